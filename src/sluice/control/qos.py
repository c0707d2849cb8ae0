"""The QoS manager: a sliding window of t seconds per constraint (Nephele section 3.3).

It reads only ``BatchMetrics`` (their ``paths``: the latency split of each constrained path,
``models.latency``). For each constraint it keeps the batches committed during the last
``window_s`` seconds and computes:

- Eq. 1: the mean latency over every record of the window (each batch's mean weighted by
  its rows), compared with the bound;
- the 95th percentile (approximate: the row-weighted mean of the batches' p95, exact when
  the batches are alike) and the worst batch's p95;
- the mean split: source wait, each operator, exchanges, sink commit, rest.

``flushed(after_batch)`` is Nephele's flush rule: true once every measurement in every window
was taken after ``after_batch``, i.e. none was taken under a setting changed then.
Pure: no Spark.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from sluice.graph.constraints import LatencyConstraint

MET, VIOLATED, UNKNOWN = "met", "violated", "unknown"


@dataclass(frozen=True)
class Sample:
    """One batch's measurement of one constrained path."""

    batch_id: int
    at: float  # when the batch committed (epoch s)
    rows: int
    mean_ms: float
    p95_ms: float | None
    split: dict  # models.latency.split_path_latency


@dataclass(frozen=True)
class ConstraintStatus:
    """A latency constraint over its window, as policies see it after a batch: ``state``
    (``met``, ``violated`` or ``unknown``), the row-weighted mean and p95 in ms against the
    bounds, the worst batch's p95, the batches and rows in the window, and ``split``: the
    mean's parts along the path (source wait, operators, exchanges, sink commit, rest)."""

    name: str
    bound_ms: float
    p95_bound_ms: float | None
    state: str  # met / violated / unknown (no measurement yet)
    mean_ms: float | None = None  # Eq. 1 over the window
    p95_ms: float | None = None
    worst_p95_ms: float | None = None
    batches: int = 0
    rows: int = 0
    split: dict = field(default_factory=dict)  # part -> mean ms over the window

    def to_dict(self) -> dict:
        return {
            k: getattr(self, k)
            for k in (
                "name",
                "state",
                "bound_ms",
                "p95_bound_ms",
                "mean_ms",
                "p95_ms",
                "worst_p95_ms",
                "batches",
                "rows",
                "split",
            )
        }


def eq1_mean(samples) -> float | None:
    """Nephele Eq. 1: mean latency over the records of the window (batches weighted by rows)."""
    rows = sum(s.rows for s in samples)
    if rows == 0:
        return None
    return sum(s.mean_ms * s.rows for s in samples) / rows


def _weighted_p95(samples) -> float | None:
    measured = [s for s in samples if s.p95_ms is not None]
    rows = sum(s.rows for s in measured)
    if rows == 0:
        return None
    return sum(s.p95_ms * s.rows for s in measured) / rows


def _mean_split(samples) -> dict:
    rows = sum(s.rows for s in samples)
    if rows == 0:
        return {}
    out: dict = {"operators": {}}
    for s in samples:
        w = s.rows / rows
        for part in ("source_wait", "exchange", "sink_commit", "rest"):
            out[part] = out.get(part, 0.0) + w * float(s.split.get(part, 0.0))
        for op, ms in s.split.get("operators", {}).items():
            out["operators"][op] = out["operators"].get(op, 0.0) + w * ms
    return {k: ({o: round(v, 2) for o, v in val.items()} if isinstance(val, dict) else round(val, 2)) for k, val in out.items()}


class QoSManager:
    """Keeps each constraint's window of measurements and evaluates it."""

    def __init__(self, constraints: list[LatencyConstraint]):
        self.constraints = {c.name: c for c in constraints}
        self.windows: dict[str, deque[Sample]] = {c.name: deque() for c in constraints}

    def observe(self, metrics) -> None:
        """Add one batch (a ``BatchMetrics``); drop measurements older than each window."""
        at = metrics.started_at + metrics.duration_s
        for name, c in self.constraints.items():
            split = (metrics.paths or {}).get(name)
            window = self.windows[name]
            if split is not None and split.get("rows"):
                window.append(
                    Sample(metrics.batch_id, at, int(split["rows"]), float(split["mean_ms"]), split.get("p95_ms"), split)
                )
            while window and window[0].at < at - c.window_s:
                window.popleft()

    def window(self, name: str) -> list[Sample]:
        return list(self.windows[name])

    def status(self, name: str) -> ConstraintStatus:
        c = self.constraints[name]
        samples = self.windows[name]
        bound_ms = c.bound_s * 1000
        p95_bound = None if c.p95_s is None else c.p95_s * 1000
        mean = eq1_mean(samples)
        if mean is None:
            return ConstraintStatus(name, bound_ms, p95_bound, UNKNOWN)
        p95 = _weighted_p95(samples)
        worst = max((s.p95_ms for s in samples if s.p95_ms is not None), default=None)
        met = mean <= bound_ms and (p95_bound is None or p95 is None or p95 <= p95_bound)
        return ConstraintStatus(
            name,
            bound_ms,
            p95_bound,
            MET if met else VIOLATED,
            round(mean, 2),
            None if p95 is None else round(p95, 2),
            worst,
            len(samples),
            sum(s.rows for s in samples),
            _mean_split(samples),
        )

    def statuses(self) -> dict[str, ConstraintStatus]:
        return {name: self.status(name) for name in self.constraints}

    def flushed(self, after_batch: int, min_samples: int = 2) -> bool:
        """Nephele's flush rule: every window holds only measurements of batches after
        ``after_batch`` (and at least ``min_samples`` of them, so the new setting is measured)."""
        for window in self.windows.values():
            if any(s.batch_id <= after_batch for s in window):
                return False
            if len(window) < min_samples:
                return False
        return True
