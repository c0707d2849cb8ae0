"""Latency constraints: Nephele's job constraint (S, l, t) on a Sluice job graph.

A constraint bounds the latency of the records that travel a path of the dataflow: the
arithmetic mean over every record that entered the path during the last ``window_s``
seconds must stay under ``bound_s`` (Nephele Eq. 1); ``p95_s`` optionally bounds the 95th
percentile as well. A record's latency is measured from its ingest time (the hidden
ingest-timestamp column: when it arrived at its source) to the commit of a sink it
reaches, so the wait at the source (Nephele's output buffer) is part of it.

Pure: no Spark. ``Pipeline.constrain`` creates constraints; ``JobGraph.validate`` checks
them against the graph (``validate_constraints``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sluice.errors import ConfigError, PipelineError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(us|ms|s|m|min)?\s*$")
_UNIT_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, None: 1.0}

MIN_WINDOW_S = 1.0
"""A window shorter than this would hold no more than a batch or two: Eq. 1 would be noise."""


def parse_duration(value: str | float, what: str = "duration") -> float:
    """Seconds from ``"800ms"``, ``"1.5s"``, ``"30s"``, ``"2m"`` or a number of seconds."""
    if isinstance(value, bool):
        raise ConfigError(f"{what} must be a duration such as '800ms' or '30s', got {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value))
        if not match:
            raise ConfigError(f"{what} must be a duration such as '800ms', '1.5s' or '30s', got {value!r}")
        seconds = float(match.group(1)) * _UNIT_S[match.group(2)]
    if not seconds > 0:
        raise ConfigError(f"{what} must be positive, got {value!r}")
    return seconds


@dataclass(frozen=True)
class LatencyConstraint:
    """(path, bound, window): the mean latency of records on ``path`` over any ``window_s``
    seconds is at most ``bound_s`` (and their 95th percentile at most ``p95_s`` if given).

    ``path`` is (first operator id, last operator id), or None for every source to every
    sink. ``name`` identifies the constraint in metrics, decisions and the progress line.
    """

    name: str
    bound_s: float
    window_s: float = 30.0
    path: tuple[str, str] | None = None
    p95_s: float | None = None

    def __post_init__(self) -> None:
        if not self.bound_s > 0:
            raise ConfigError(f"constraint {self.name!r}: the latency bound must be positive, got {self.bound_s}")
        if self.window_s < MIN_WINDOW_S:
            raise ConfigError(
                f"constraint {self.name!r}: window over={self.window_s}s is shorter than "
                f"{MIN_WINDOW_S}s; the mean of Eq. 1 needs several batches"
            )
        if self.p95_s is not None and not self.p95_s > 0:
            raise ConfigError(f"constraint {self.name!r}: p95 bound must be positive, got {self.p95_s}")

    @property
    def target_s(self) -> float:
        """The tightest bound a policy has to keep: the p95 bound when given, else the mean's."""
        return self.p95_s if self.p95_s is not None else self.bound_s

    def describe(self) -> str:
        path = "source -> every sink" if self.path is None else f"{self.path[0]} -> {self.path[1]}"
        p95 = f", p95 <= {self.p95_s * 1000:.0f} ms" if self.p95_s is not None else ""
        return f"{self.name}: mean latency <= {self.bound_s * 1000:.0f} ms over {self.window_s:g} s{p95} ({path})"

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "bound_ms": round(self.bound_s * 1000, 3),
            "window_s": self.window_s,
            "path": list(self.path) if self.path else None,
            "p95_ms": None if self.p95_s is None else round(self.p95_s * 1000, 3),
        }


def make_constraint(name: str, latency, *, path: tuple[str, str] | None = None, over="30s", p95=None) -> LatencyConstraint:
    """A constraint from user-facing values (durations as text or seconds)."""
    return LatencyConstraint(
        name=name,
        bound_s=parse_duration(latency, f"constraint {name!r} latency"),
        window_s=parse_duration(over, f"constraint {name!r} over"),
        path=path,
        p95_s=None if p95 is None else parse_duration(p95, f"constraint {name!r} p95"),
    )


# ---- the path in the graph ---------------------------------------------------------------------
def _downstream(graph, op_id: str) -> set[str]:
    seen, todo = {op_id}, [op_id]
    while todo:
        for consumer in graph.consumers(todo.pop()):
            if consumer.id not in seen:
                seen.add(consumer.id)
                todo.append(consumer.id)
    return seen


def _upstream(graph, op_id: str) -> set[str]:
    seen, todo = {op_id}, [op_id]
    while todo:
        for parent in graph[todo.pop()].inputs:
            if parent not in seen:
                seen.add(parent)
                todo.append(parent)
    return seen


def path_operators(graph, constraint: LatencyConstraint) -> list[str]:
    """Ids of the operators on the constrained path (every path from its first to its last
    operator), in topological order. Without a path: every operator of the graph."""
    order = [op.id for op in graph.topological_order()]
    if constraint.path is None:
        return order
    first, last = constraint.path
    on_path = _downstream(graph, first) & _upstream(graph, last)
    return [op_id for op_id in order if op_id in on_path]


def measuring_sinks(graph, constraint: LatencyConstraint) -> list[str]:
    """The sinks whose commit measures the path's latency: every sink its last operator
    reaches (a micro-batch's records have passed every operator before its sinks commit, so
    a sink downstream of the path's end bounds the path's latency from above)."""
    sinks = [op.id for op in graph.sinks()]
    if constraint.path is None:
        return sinks
    reach = _downstream(graph, constraint.path[1])
    return [s for s in sinks if s in reach]


def validate_constraints(graph, constraints: list[LatencyConstraint]) -> None:
    """Check every constraint against the graph: known operators, a path from the first to
    the last, a sink to measure it, distinct names. Raises PipelineError saying which."""
    names = set()
    for c in constraints:
        if c.name in names:
            raise PipelineError(f"two latency constraints are named {c.name!r}; give each its own name")
        names.add(c.name)
        if c.path is None:
            continue
        first, last = c.path
        for end in (first, last):
            if end not in graph:
                raise PipelineError(
                    f"constraint {c.name!r}: {end!r} is not an operator of this pipeline; "
                    f"operators: {[op.id for op in graph.operators]}"
                )
        if last not in _downstream(graph, first):
            raise PipelineError(
                f"constraint {c.name!r}: no path leads from {first!r} to {last!r} ({last!r} is not downstream of {first!r})",
                graph[last].name,
                graph[last].location,
            )
        if not measuring_sinks(graph, c):
            raise PipelineError(
                f"constraint {c.name!r}: no sink is downstream of {last!r}, so its latency cannot be measured",
                graph[last].name,
                graph[last].location,
            )
