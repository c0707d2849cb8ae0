"""One model of the running job, for the autopilot's arbiter to judge every candidate by.

Built after each batch from the ``ControlView``: the batch time as a fixed cost plus a cost
per row (``batch_sizing.fit_batch_time`` over the batches run under the Plan in force), the
offered rate (measured, and forecast ahead), Spark's gap between batches and the measured
ratio of the goal's latency to the batch time. From these:

- **utilization** u = rate * b: the share of the job's time its rows' work takes. At u >= 1
  the job cannot keep up at any batch size; the batches settle at
  (a + gap) / (1 - u) below it.
- **latency**: the goal's latency at a rate, k * (a + gap) / (1 - u) (the batch-sizing
  model, ``control.batch_sizing``).
- **cost**: the executors the job holds (on local Spark, its fixed cores).

A candidate change is judged by what it does to these three: a scale-out or a rebalance
must relieve a measured or forecast pressure (the goal violated, the backlog growing, u
above the band); a scale-in must leave u and the predicted latency inside the band with a
margin. Pure: no Spark.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from sluice.control.batch_sizing import LinearFit, Target, _gap_s, fit_batch_time, latency_targets
from sluice.control.qos import VIOLATED
from sluice.control.view import ControlView


@dataclass(frozen=True)
class JobModel:
    fit: LinearFit | None  # batch time = a + b * rows, under the Plan in force
    rate: float | None  # rows/s offered now (None: pull mode, no backlog reported)
    ahead: float | None  # the highest rate forecast over the scale-ahead horizon
    gap_s: float
    k: float  # the goal's latency over the batch time (measured; 2 before it is)
    bound_s: float | None  # the goal's latency bound (the tightest, p95 if given)
    violated: bool  # the QoS window says the bound is broken now
    backlog: int | None
    growing: bool  # the backlog grew over the last batches by more than a batch's worth
    executors: int
    cores: int

    busy_per_row: float | None = None  # core-seconds of useful task time a row (every operator)
    projected_s: float | None = None  # the goal's measured latency on its rising line, a horizon ahead

    @property
    def utilization(self) -> float | None:
        """The share of the job's cores the offered rows' work keeps busy (useful task time a
        row times the rate over the cores); without task times, rate * b."""
        if self.rate is None:
            return None
        if self.busy_per_row is not None:
            return self.rate * self.busy_per_row / max(self.cores, 1)
        return None if self.fit is None else self.rate * self.fit.b

    def utilization_at(self, rate: float | None, speedup: float = 1.0) -> float | None:
        """The utilization at ``rate`` with the cores multiplied by ``speedup``."""
        u = self.utilization
        if u is None or rate is None or not self.rate:
            return None
        return u * rate / self.rate / speedup

    def latency_s(self, rate: float | None = None, speedup: float = 1.0) -> float | None:
        """The goal's latency the model predicts at ``rate`` (default: the offered rate):
        the batches' cycle (a + gap) / (1 - rate * b / speedup), times k."""
        rate = self.rate if rate is None else rate
        if self.fit is None or rate is None:
            return None
        u = rate * self.fit.b / speedup
        if u >= 1:
            return math.inf
        return self.k * (self.fit.a + self.gap_s) / (1 - u)

    @property
    def behind(self) -> bool:
        """The job is not keeping up: the bound is broken, or the backlog grows."""
        return self.violated or self.growing


def build_model(view: ControlView, *, ahead: float | None = None, horizon_s: float = 0.0, window: int = 20) -> JobModel:
    """The job's model after the view's latest batch (see the module's docstring);
    ``horizon_s``: how far ahead ``projected_s`` looks (what a scale-out takes to act)."""
    version = view.plan.version
    batches = [m for m in view.batches() if m.plan_version == version][-window:]
    fit = fit_batch_time([m.rows_in for m in batches], [m.duration_s for m in batches]) if len(batches) >= 4 else None
    if fit is None:  # too few batches under this Plan, or sizes that hardly vary: all recent ones
        recent = view.batches(window)
        fit = fit_batch_time([m.rows_in for m in recent], [m.duration_s for m in recent])
    rate = view.offered_rate()
    targets = latency_targets(view, pull=rate is None)
    tight = min(targets, key=lambda t: t.bound_ms / t.k) if targets else None
    violated = any(s.state == VIOLATED for s in view.status.values())
    measured = batches[-5:] if len(batches) >= 3 else view.batches(5)
    rows = sum(m.rows_in for m in measured)
    useful = sum(v.busy_s for m in measured for v in m.operators.values())
    return JobModel(
        busy_per_row=useful / rows if rows > 0 and useful > 0 else None,
        fit=fit,
        rate=rate,
        ahead=ahead,
        gap_s=_gap_s(view),
        k=tight.k if tight else 2.0,
        bound_s=tight.bound_ms / 1000 if tight else None,
        violated=violated,
        backlog=view.backlog(),
        growing=_growing(view),
        executors=view.resources.target,
        cores=view.resources.cores,
        projected_s=_projected_s(view, tight, horizon_s) if tight and horizon_s > 0 else None,
    )


def _projected_s(view: ControlView, target: Target, horizon_s: float, last: int = 6) -> float | None:
    """The goal's measured latency ``horizon_s`` ahead on the line through its last batches,
    when it rises in every one of the last three (None: not rising, or too few batches). A
    rising latency is the earliest sign of a ramp the resources will not hold: the batches
    grow before the goal breaks or the backlog outgrows a batch."""
    key = "mean_ms" if target.measure == "mean" else "p95_ms"
    points = []
    for m in view.batches(last):
        value = ((m.paths or {}).get(target.constraint) or {}).get(key)
        if value:
            points.append((m.started_at + m.duration_s, value / 1000))
    if len(points) < 4 or not all(b[1] > a[1] for a, b in itertools.pairwise(points[-3:])):
        return None
    times, values = np.array([p[0] for p in points]), np.array([p[1] for p in points])
    if np.ptp(times) <= 0:
        return None
    slope = float(np.polyfit(times - times[-1], values, 1)[0])
    return float(values[-1] + slope * horizon_s) if slope > 0 else None


def _growing(view: ControlView, last: int = 4) -> bool:
    """Whether the backlog grew over the last batches by more than the last batch admitted."""
    batches = [m for m in view.history if not m.skipped][-last:]
    if len(batches) < last:
        return False
    totals = []
    for m in batches:
        if not m.backlog or any(v is None for v in m.backlog.values()):
            return False
        totals.append(sum(m.backlog.values()))
    rising = all(b > a for a, b in itertools.pairwise(totals))
    return rising and totals[-1] - totals[0] > max(batches[-1].rows_in, 1)
