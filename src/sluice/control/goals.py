"""A job's goals: what it must achieve, stated once (``Pipeline.goals``, ``sluice run --latency``).

A job with goals and no policies named runs the autopilot (``control.autopilot``), which
keeps them with every countermeasure the job has. The goals are:

- ``latency``: a bound on a path's latency, at a percentile (95 by default, or ``"mean"``),
  over a sliding window (``over``). It becomes the job's latency constraint named
  ``GOAL_CONSTRAINT`` (``graph.constraints``), measured like any other.
- ``keep_up``: the input must not fall behind for good (the backlog stays bounded).
- a budget: ``max_executors`` (on a standalone cluster, the most executors the job may
  hold) and ``price_per_hour`` (what one executor costs, for the cost the autopilot
  reports).
- ``favour``: what wins when they conflict: ``"latency"`` (spend resources to hold the
  bound; the default) or ``"cost"`` (run the resources hotter and give them back sooner).

Pure: no Spark.
"""

from __future__ import annotations

from dataclasses import dataclass

from sluice.errors import ConfigError
from sluice.graph.constraints import LatencyConstraint, make_constraint, parse_duration

GOAL_CONSTRAINT = "goal_latency"
"""The name of the latency constraint a latency goal becomes."""

FAVOURS = ("latency", "cost")
PERCENTILES = (95, "mean")


@dataclass(frozen=True)
class Goals:
    """What a job must achieve (see the module's docstring). ``latency_s`` None: no bound."""

    latency_s: float | None = None
    percentile: int | str = 95
    over_s: float = 30.0
    path: tuple[str, str] | None = None
    keep_up: bool = True
    max_executors: int | None = None
    price_per_hour: float | None = None
    favour: str = "latency"

    def __post_init__(self) -> None:
        if self.percentile not in PERCENTILES:
            raise ConfigError(f"goals: percentile must be 95 or 'mean' (what the job measures), got {self.percentile!r}")
        if self.favour not in FAVOURS:
            raise ConfigError(f"goals: favour must be one of {FAVOURS}, got {self.favour!r}")
        if self.max_executors is not None and (
            isinstance(self.max_executors, bool) or not isinstance(self.max_executors, int) or self.max_executors < 1
        ):
            raise ConfigError(f"goals: max_executors must be a whole number >= 1, got {self.max_executors!r}")
        if self.price_per_hour is not None and not (isinstance(self.price_per_hour, (int, float)) and self.price_per_hour >= 0):
            raise ConfigError(f"goals: price_per_hour must be >= 0, got {self.price_per_hour!r}")
        if not isinstance(self.keep_up, bool):
            raise ConfigError(f"goals: keep_up must be True or False, got {self.keep_up!r}")
        if self.latency_s is None and not self.keep_up:
            raise ConfigError("goals: state a latency bound or keep_up=True (a job with no goal has nothing to keep)")

    def constraint(self) -> LatencyConstraint | None:
        """The latency constraint the latency goal becomes (None without one). A p95 goal
        bounds the mean by the same figure too: the mean of the records is never above their
        95th percentile by more than noise, so that bound never binds first."""
        if self.latency_s is None:
            return None
        p95 = self.latency_s if self.percentile == 95 else None
        return make_constraint(GOAL_CONSTRAINT, self.latency_s, path=self.path, over=self.over_s, p95=p95)

    def describe(self) -> str:
        parts = []
        if self.latency_s is not None:
            measure = "p95" if self.percentile == 95 else "mean"
            where = "every source to every sink" if self.path is None else f"{self.path[0]} -> {self.path[1]}"
            parts.append(f"{measure} latency <= {self.latency_s * 1000:.0f} ms over {self.over_s:g} s ({where})")
        if self.keep_up:
            parts.append("keep up with the input")
        if self.max_executors is not None:
            parts.append(f"at most {self.max_executors} executors")
        parts.append(f"favour {self.favour}")
        return "; ".join(parts)

    def to_dict(self) -> dict:
        return {
            "latency_ms": None if self.latency_s is None else round(self.latency_s * 1000, 3),
            "percentile": self.percentile,
            "over_s": self.over_s,
            "path": list(self.path) if self.path else None,
            "keep_up": self.keep_up,
            "max_executors": self.max_executors,
            "price_per_hour": self.price_per_hour,
            "favour": self.favour,
        }


def make_goals(
    latency=None,
    *,
    percentile: int | str = 95,
    over="30s",
    path: tuple[str, str] | None = None,
    keep_up: bool = True,
    max_executors: int | None = None,
    price_per_hour: float | None = None,
    favour: str = "latency",
) -> Goals:
    """Goals from user-facing values (durations as text or seconds)."""
    return Goals(
        latency_s=None if latency is None else parse_duration(latency, "goals latency"),
        percentile=percentile,
        over_s=parse_duration(over, "goals over"),
        path=path,
        keep_up=keep_up,
        max_executors=max_executors,
        price_per_hour=price_per_hour,
        favour=favour,
    )
