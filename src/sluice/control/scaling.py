"""One-step rescaling of keyed stages from true processing rates (DS2, Kalavri et al., OSDI 2018).

DS2 measures, per operator, its *true* processing rate: rows processed per second of useful
time (time spent working, not waiting for input), and sets every operator's parallelism in
one step to what the offered rate needs. On Sluice a keyed stage's useful time is its task
time minus the time its tasks waited for their input (``time_s - input_wait_s``, summed over
tasks), so its true rate per partition is ``rows_in / useful`` and the partitions it needs are

    ceil(offered_rate * rows_per_source_row / (true_rate * target_utilization))

bounded by the cores the job can use (partitions beyond them only queue) and by the
stage's key groups. The key groups are then placed on the new partitions by their measured
loads, as ALBIC's Algorithm 1 rescales (:func:`balanced_routing`): new partitions join empty
and removed ones are drained, and one MILP balances the lot, so the new partitions share the
work evenly rather than by hash ranges (which leave a partition with the most keys behind:
DS2's count assumes balanced partitions). The offered rate is what arrives at the sources
(``ControlView.offered_rate``: rows admitted plus the growth of the backlog); without a backlog report (a
pull source), the admitted rate stands in for it. The first batch after a change of the
plan is not measured: its tasks load the state of the key groups that moved, a transient
that would understate the true rate and ask for a second step. Keyed operators collocated in
one stage (``plan.collocation``) are sized together: their rows and useful time add up. The
controller applies one stage's change
at a time (the arbiter's rule) at a batch boundary: key groups are re-routed in ranges and
their state follows them through the store, with no restart (Flink's autoscaler restarts
the job for each rescale). On a standalone cluster the executors those partitions run on
change in the same step (``executors`` action, ``runtime.executor_pool.ExecutorPool``); on local
Spark the partitions alone, up to its cores.

Pure: no Spark.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from sluice.control.actions import Action, Executors, Partitions
from sluice.control.keygroups import balancing_problem, key_group_stats
from sluice.control.policy import Policy
from sluice.control.view import ControlView, Resources
from sluice.plan.balancing import MigrationBudget, MilpSettings, solve_milp
from sluice.plan.balancing.scaling import ScalingDecision, apply_decision
from sluice.plan.physical import KeyedStagePlan


class OneStepScaling(Policy):
    """Set each keyed stage's partitions to what the offered rate needs, in one step, and on
    a standalone cluster the executors whose cores those partitions run on.

    ``target_utilization``: the share of a partition's time it should be busy (headroom for
    bursts); ``window``: batches measured under the plan in force; ``tolerance``: partitions
    are changed only when the need differs from the current count by more than this share
    (no churn around a boundary); ``max_step``: the most partitions one decision may add or
    remove (None: DS2, straight to the need; 1: a one-instance-at-a-time baseline in the
    manner of Dhalion, ``IncrementalScaling``).

    With elastic resources (``view.resources.elastic``) partitions may grow to every core the
    job may hold, and the executors follow in the same step: ``ceil(partitions /
    cores_per_executor)`` for the largest keyed stage, proposed with the partition change
    (the arbiter accepts both in one batch) or alone when only they are off.
    """

    name = "scaling"

    def __init__(
        self,
        target_utilization: float = 0.7,
        window: int = 3,
        tolerance: float = 0.25,
        max_step: int | None = None,
        whole_job: bool = False,
    ):
        if not 0 < target_utilization <= 1 or window < 1 or tolerance < 0 or (max_step is not None and max_step < 1):
            raise ValueError("scaling: 0 < target_utilization <= 1, window >= 1, tolerance >= 0 and max_step >= 1 are required")
        self.target_utilization = target_utilization
        self.window = window
        self.tolerance = tolerance
        self.max_step = max_step
        self.balance = True  # place key groups by measured load (one MILP); False: in ranges
        self.whole_job = whole_job

    def describe(self) -> dict:
        return {
            "policy": self.name,
            "target_utilization": self.target_utilization,
            "window": self.window,
            "max_step": self.max_step,
            "whole_job": self.whole_job,
        }

    def propose(self, view: ControlView) -> list[Action]:
        plan = view.plan
        # measured under the plan in force, without its first batch after a change: that one
        # carries the change's transient (moved key groups load their state), not the true rate
        batches = [
            m for m in view.batches() if m.plan_version == plan.version and (plan.version == 0 or m.batch_id > plan.version)
        ][-self.window :]
        if len(batches) < self.window:
            return []
        seconds = sum(m.duration_s for m in batches)
        admitted = sum(m.rows_in for m in batches)
        if seconds <= 0 or admitted <= 0:
            return []
        if not self._steady(view):
            return []  # the rate is still moving (a step inside the window): one step needs its new level
        offered = self.offered(view) or admitted / seconds
        resources = view.resources
        ceiling = resources.max_cores
        actions: list[Action] = []
        partitions = {op_id: stage.partitions for op_id, stage in plan.keyed.items()}
        for ops in sorted(plan.keyed_stages()):
            # collocated operators share the stage's partitions: their rows and useful time add
            # up (the partitions needed are the sum of what each needs)
            op_id, stage = ops[0], plan.keyed[ops[0]]
            measured = [m.operators[op] for m in batches for op in ops if op in m.operators]
            rows = sum(float(progress.rows_in) for progress in measured)
            useful = sum(progress.own_busy_s for progress in measured)
            if rows <= 0 or useful <= 0:
                continue
            true_rate = rows / useful  # rows a second one partition processes while it works
            needed_rate = offered * rows / admitted  # rows a second reaching this stage
            exact = needed_rate / (true_rate * self.target_utilization)
            need = min(max(1, math.ceil(exact)), ceiling, plan.max_parallelism)
            now = stage.partitions
            if need == now or (need < now and now - need <= self.tolerance * now):
                continue  # a small scale-in is not worth moving state around
            if self.max_step is not None:
                need = now + max(-self.max_step, min(self.max_step, need - now))
            direction = "out" if need > now else "in"
            routing = balanced_routing(batches, ops, stage, need, plan.max_parallelism) if self.balance else None
            placed = "key groups by measured load" if routing is not None else "key groups in ranges"
            reason = (
                f"{op_id}: true rate {true_rate:,.0f} rows/s a partition (useful time, DS2), "
                f"{needed_rate:,.0f} rows/s offered; at {self.target_utilization:.0%} utilization it needs "
                f"{exact:.2f} partitions (capped at {ceiling} cores): scale {direction} {now} -> {need}, "
                f"{placed}"
            )
            actions.append(
                Partitions(
                    target=op_id,
                    count=need,
                    routing=None if routing is None else tuple(routing),
                    reason=reason,
                    expected={
                        "utilization": round(needed_rate / (true_rate * need), 3),
                        "partitions": need,
                        "true_rate": round(true_rate, 1),
                    },
                )
            )
            partitions.update(dict.fromkeys(ops, need))
            break  # one stage a step (the arbiter's rule); the others follow after the flush
        if resources.elastic and partitions:
            executors = executors_for(max(partitions.values()), resources)
            if executors != resources.target:
                actions.append(
                    Executors(
                        count=executors,
                        reason=f"{max(partitions.values())} partitions on {resources.cores_per_executor} "
                        f"core(s) an executor: hold {executors} executors (held {resources.executors}, "
                        f"asked for {resources.target})",
                        expected={"executors": executors},
                    )
                )
        return self._whole_job(view, actions) if self.whole_job else actions

    def _whole_job(self, view: ControlView, actions: list[Action]) -> list[Action]:
        """With ``whole_job``: DS2's partitions of each keyed stage; on an elastic cluster, executors for the
        whole job's work (every operator's useful task time a row, at the offered rate, at
        the target utilization), not only for the largest keyed stage's partitions: the
        Python steps share the executors' cores."""
        resources = view.resources
        if not resources.elastic:
            return actions
        need = self.job_executors(view)
        if need is None:
            return actions
        partitions = [a.count for a in actions if isinstance(a, Partitions)]
        most = resources.max_executors or resources.executors
        target = min(max([need] + [math.ceil(p / max(resources.cores_per_executor, 1)) for p in partitions]), most)
        rest = [a for a in actions if not isinstance(a, Executors)]
        now = resources.target
        if target > now:  # never fewer partitions while the job needs more executors
            rest = [
                a
                for a in rest
                if not (
                    isinstance(a, Partitions) and a.target in view.plan.keyed and a.count < view.plan.keyed[a.target].partitions
                )
            ]
        if target == now or (target < now and now - target <= self.tolerance * now and not rest):
            return rest
        reason = (
            f"the job's work needs {need} executor(s) at {self.target_utilization:.0%} utilization (every "
            f"operator's useful time a row at the offered rate): hold {target} (asked for {now})"
        )
        return [*rest, Executors(count=target, reason=reason, expected={"executors": target})]

    def job_executors(self, view: ControlView) -> int | None:
        batches = [m for m in view.batches() if m.plan_version == view.plan.version][-self.window :]
        if len(batches) < self.window:
            return None
        rows = sum(m.rows_in for m in batches)
        useful = sum(v.busy_s for m in batches for v in m.operators.values())
        seconds = sum(m.duration_s for m in batches)
        rate = self.offered(view) or (rows / seconds if seconds > 0 else None)
        if rows <= 0 or useful <= 0 or not rate:
            return None
        cores = rate * useful / rows / self.target_utilization
        return max(1, math.ceil(cores / max(view.resources.cores_per_executor, 1)))

    def offered(self, view: ControlView) -> float | None:
        """The rate to size for: what arrives at the sources over the window (None: a pull source)."""
        return view.offered_rate(self.window)

    def _steady(self, view: ControlView) -> bool:
        """Whether the offered rate held still over the window: the arrival rates between
        consecutive batches stay within ``STEADY_SPREAD`` of their mean (a window across a
        rate step would size for a mixture of the old and the new rate and need a second
        step). Without a backlog report it cannot tell, and says yes."""
        measured = [view.offered_rate(1, before=i) for i in range(self.window)]
        rates = [r for r in measured if r is not None]
        if len(rates) < len(measured):
            return True
        mean = sum(rates) / len(rates)
        return mean <= 0 or max(abs(r - mean) for r in rates) <= STEADY_SPREAD * mean


STEADY_SPREAD = 0.3
"""How far one batch's arrival rate may stray from the window's mean for the rate to count as steady."""


class IncrementalScaling(OneStepScaling):
    """The baseline DS2 is measured against: one partition (and its executor) more or less a
    decision, each after the flush of the last, in the manner of Dhalion's one-instance steps."""

    name = "incremental_scaling"

    def __init__(self, target_utilization: float = 0.7, window: int = 3, tolerance: float = 0.25):
        super().__init__(target_utilization, window, tolerance, max_step=1)


class FlinkLikeScaling(OneStepScaling):
    """A baseline in the manner of Flink's Kubernetes autoscaler (its documented defaults,
    shortened by the caller for compressed traces): DS2's need at ``target_utilization``
    (0.7), acted on only when the stage's utilization leaves ``target +- boundary`` (0.3);
    no decision within ``stabilization_s`` of the start or of the last change; a scale-down
    only once one has been recommended for ``scale_down_interval_s`` (lazy scale-down,
    FLINK-36018), then the largest partition count recommended over that interval. Flink
    restarts the job for each rescale; here a rescale is Sluice's, without a restart."""

    name = "flink_autoscaler"

    def __init__(
        self,
        target_utilization: float = 0.7,
        boundary: float = 0.3,
        stabilization_s: float = 300.0,
        scale_down_interval_s: float = 3600.0,
        window: int = 3,
        whole_job: bool = False,
    ):
        super().__init__(target_utilization, window, tolerance=0.0, whole_job=whole_job)
        if not 0 <= boundary < target_utilization or stabilization_s < 0 or scale_down_interval_s < 0:
            raise ValueError(
                "flink_autoscaler: 0 <= boundary < target_utilization, stabilization_s >= 0 and "
                "scale_down_interval_s >= 0 are required"
            )
        self.boundary = boundary
        self.stabilization_s, self.scale_down_interval_s = stabilization_s, scale_down_interval_s
        self.started: float | None = None
        self.changed_at: float | None = None
        self.version: int | None = None
        self.down_since: float | None = None
        self.down_need = 0

    def describe(self) -> dict:
        return {
            **super().describe(),
            "policy": self.name,
            "boundary": self.boundary,
            "stabilization_s": self.stabilization_s,
            "scale_down_interval_s": self.scale_down_interval_s,
        }

    def propose(self, view: ControlView) -> list[Action]:
        latest = view.latest
        if latest is None:
            return []
        now = latest.started_at + latest.duration_s
        self.started = now if self.started is None else self.started
        if self.version is not None and view.plan.version != self.version:
            self.changed_at = now
        self.version = view.plan.version
        quiet_since = self.started if self.changed_at is None else self.changed_at
        if now - quiet_since < self.stabilization_s:
            return []
        actions = super().propose(view)
        resize = next((a for a in actions if isinstance(a, Partitions)), None)
        if resize is None:
            return [a for a in actions if isinstance(a, Executors)]
        need = int(resize.expected["partitions"])
        current = view.plan.keyed[resize.target].partitions
        utilization = float(resize.expected["utilization"]) * need / max(current, 1)
        low, high = self.target_utilization - self.boundary, self.target_utilization + self.boundary
        if low <= utilization <= high:
            self.down_since = None
            return []
        if need > current:
            self.down_since = None
            return actions
        if self.down_since is None:
            self.down_since, self.down_need = now, need
            return []
        self.down_need = max(self.down_need, need)
        if now - self.down_since < self.scale_down_interval_s or self.down_need >= current:
            return []
        self.down_since = None
        if need == self.down_need:
            return actions
        return [
            Partitions(
                target=resize.target,
                count=self.down_need,
                reason=f"{resize.target}: scale in {current} -> {self.down_need}, the largest need recommended over "
                f"{self.scale_down_interval_s:.0f} s",
                expected={"partitions": self.down_need},
            )
        ] + [replace(a, count=executors_for(self.down_need, view.resources)) for a in actions if isinstance(a, Executors)]


RESCALE_SETTINGS = MilpSettings(time_limit=1.0)


def balanced_routing(
    batches: Sequence,
    ops: Sequence[str],
    stage: KeyedStagePlan,
    partitions: int,
    max_parallelism: int,
    settings: MilpSettings = RESCALE_SETTINGS,
) -> list[int] | None:
    """The routing of a keyed stage rescaled to ``partitions``, balanced by the key groups'
    loads measured over ``batches`` (ALBIC's Algorithm 1, lines 6-7: new partitions join
    empty, the ones beyond the new count are marked for removal, and one MILP on HiGHS
    balances every key group over the partitions that stay, with no migration budget: a
    rescale moves state anyway, and the removed partitions must drain in this step). None
    when nothing was measured (the caller re-routes by ranges)."""
    stats = key_group_stats(batches, list(ops), max_parallelism)
    if stats is None or float(stats.load.sum()) <= 0:
        return None
    now = stage.partitions
    problem = balancing_problem(stats, stage)
    decision = (
        ScalingDecision(add_capacities=(1.0,) * (partitions - now))
        if partitions > now
        else ScalingDecision(remove=tuple(range(partitions, now)))
    )
    scaled = apply_decision(problem, decision)
    routing = np.asarray(solve_milp(scaled, MigrationBudget(), settings).assignment, dtype=np.int64)
    # whatever the solver left on a removed partition (key groups without load, on a time-out)
    # goes to the least loaded partition that stays
    staying = routing < partitions
    loads = np.bincount(routing[staying], weights=stats.load[staying], minlength=partitions)
    for kg in np.flatnonzero(~staying):
        target = int(np.argmin(loads))
        routing[kg] = target
        loads[target] += float(stats.load[kg])
    return [int(p) for p in routing]


def executors_for(partitions: int, resources: Resources) -> int:
    """Executors whose cores run ``partitions`` tasks at once, within what the job may hold."""
    per = max(resources.cores_per_executor, 1)
    most = resources.max_executors if resources.max_executors is not None else resources.executors
    return max(1, min(math.ceil(partitions / per), most))
