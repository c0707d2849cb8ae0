"""One-step rescaling of keyed stages from true processing rates (DS2, Kalavri et al., OSDI 2018).

DS2 measures, per operator, its *true* processing rate: rows processed per second of useful
time (time spent working, not waiting for input), and sets every operator's parallelism in
one step to what the offered rate needs. On Sluice a keyed stage's useful time is its task
time minus the time its tasks waited for their input (``time_s - input_wait_s``, summed over
tasks), so its true rate per partition is ``rows_in / useful`` and the partitions it needs are

    ceil(offered_rate * rows_per_source_row / (true_rate * target_utilization))

bounded by the cores the job can use (partitions beyond them only queue) and by the
stage's key groups. The offered rate is what arrives at the sources (``ControlView.
offered_rate``: rows admitted plus the growth of the backlog); without a backlog report (a
pull source), the admitted rate stands in for it. The controller applies one stage's change
at a time (the arbiter's rule) at a batch boundary: key groups are re-routed in ranges and
their state follows them through the store, with no restart (Flink's autoscaler restarts
the job for each rescale).

Pure: no Spark.
"""

from __future__ import annotations

import math

from sluice.control.actions import PARTITIONS, Action
from sluice.control.policy import Policy
from sluice.control.view import ControlView


class OneStepScaling(Policy):
    """Set each keyed stage's partitions to what the offered rate needs, in one step.

    ``target_utilization``: the share of a partition's time it should be busy (headroom for
    bursts); ``window``: batches measured under the plan in force; ``tolerance``: partitions
    are changed only when the need differs from the current count by more than this share
    (no churn around a boundary).
    """

    name = "scaling"

    def __init__(self, target_utilization: float = 0.7, window: int = 3, tolerance: float = 0.25):
        if not 0 < target_utilization <= 1 or window < 1 or tolerance < 0:
            raise ValueError("scaling: 0 < target_utilization <= 1, window >= 1 and tolerance >= 0 are required")
        self.target_utilization = target_utilization
        self.window = window
        self.tolerance = tolerance

    def describe(self) -> dict:
        return {"policy": self.name, "target_utilization": self.target_utilization, "window": self.window}

    def propose(self, view: ControlView) -> list[Action]:
        plan = view.plan
        batches = [m for m in view.batches() if m.plan_version == plan.version][-self.window:]
        if len(batches) < self.window:
            return []
        seconds = sum(m.duration_s for m in batches)
        admitted = sum(m.rows_in for m in batches)
        if seconds <= 0 or admitted <= 0:
            return []
        offered = view.offered_rate(self.window) or admitted / seconds
        ceiling = view.resources.max_cores
        for op_id, stage in sorted(plan.keyed.items()):
            rows = sum(float((m.operators.get(op_id) or {}).get("rows_in", 0.0)) for m in batches)
            useful = sum(max(float((m.operators.get(op_id) or {}).get("time_s", 0.0))
                             - float((m.operators.get(op_id) or {}).get("input_wait_s", 0.0)), 0.0) for m in batches)
            if rows <= 0 or useful <= 0:
                continue
            true_rate = rows / useful  # rows a second one partition processes while it works
            needed_rate = offered * rows / admitted  # rows a second reaching this stage
            exact = needed_rate / (true_rate * self.target_utilization)
            need = min(max(1, math.ceil(exact)), ceiling, plan.max_parallelism)
            now = stage.partitions
            if need == now or (need < now and now - need <= self.tolerance * now):
                continue  # a small scale-in is not worth moving state around
            direction = "out" if need > now else "in"
            reason = (f"{op_id}: true rate {true_rate:,.0f} rows/s a partition (useful time, DS2), "
                      f"{needed_rate:,.0f} rows/s offered; at {self.target_utilization:.0%} utilization it needs "
                      f"{exact:.2f} partitions (capped at {ceiling} cores): scale {direction} {now} -> {need}")
            return [Action(PARTITIONS, op_id, need, reason,
                           expected={"utilization": round(needed_rate / (true_rate * need), 3),
                                     "partitions": need, "true_rate": round(true_rate, 1)})]
        return []
