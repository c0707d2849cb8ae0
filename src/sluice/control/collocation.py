"""ALBIC's collocation across keys, live: communicating key groups of two consecutive keyed
operators keyed differently are routed to the same partition index (section 4.3.2).

A keyed operator B whose rows come from a keyed operator A keyed differently (through
forward, row-wise operators) has an exchange before it: its partition q reads the rows A's
partitions emitted for the key groups routed to q. The runtime counts those rows per (A's key
group, B's key group) pair (``runtime.batch.traffic``). After each batch, for each such pair of
stages with the same partition count, this policy takes the last ``window`` batches run under
the routing in force and, while the measured *collocation factor* (the share of B's rows
that A emitted in the same partition index) is below ``target``, runs one ALBIC round
(``plan.balancing.albic``) on both stages at once (``control.keygroups.collocation_problem``):
worthwhile pairs are pinned together and the MILP keeps both stages balanced, under a
migration budget (at most ``max_migrations`` key groups of the two, and at most ``max_pause``
of a batch spent loading moved state). It proposes both routing tables in one action when
they raise the collocation factor by at least ``min_gain``. The controller applies them at the
next batch through the plan log (exactly once, as any routing change).

Why it pays on Spark: B's partition q is a reduce task of the shuffle after A; when most of
its input was written by A's task q, Spark's reduce-locality preference
(``spark.shuffle.reduceLocality.enabled``) runs it on that task's executor, and it reads
its input there rather than over the network.

Pure: no Spark.
"""

from __future__ import annotations

from sluice.control.actions import Action, Routing
from sluice.control.keygroups import collocation_problem, key_group_stats, key_group_traffic, routings_of
from sluice.control.policy import Policy
from sluice.control.view import ControlView
from sluice.plan.balancing import AlbicSettings, MigrationBudget, MilpSettings, albic, collocation_factor, load_distance


class CollocationBalancing(Policy):
    """Collocate communicating key groups of consecutive keyed stages keyed differently.

    ``target``: the collocation factor above which a pair of stages is left alone;
    ``min_gain``: the rise of the collocation factor a new routing must bring;
    ``window``: batches of statistics (all under the routing in force);
    ``max_migrations``: key groups (of both stages) moved at most per round;
    ``max_pause``: state-loading time of the moved key groups, as a share of a batch;
    ``tolerance``: how far above its mean a stage's busiest partition may end
    (``collocation_problem``); ``pin_share``: the share of the budget ALBIC's pins may use
    (the rest balances); ``time_limit``: seconds HiGHS may spend on each of ALBIC's solves.
    """

    name = "collocation"

    def __init__(
        self,
        target: float = 0.9,
        min_gain: float = 0.05,
        window: int = 2,
        max_migrations: int = 64,
        max_pause: float = 0.5,
        tolerance: float = 0.2,
        pin_share: float = 0.75,
        time_limit: float = 2.0,
    ):
        if (
            not 0 < target <= 1
            or not 0 < min_gain < 1
            or window < 1
            or max_migrations < 1
            or max_pause <= 0
            or tolerance < 0
            or not 0 < pin_share <= 1
        ):
            raise ValueError(
                "collocation: 0 < target <= 1, 0 < min_gain < 1, window >= 1, max_migrations >= 1, "
                "max_pause > 0, tolerance >= 0 and 0 < pin_share <= 1 are required"
            )
        self.target = target
        self.min_gain = min_gain
        self.window = window
        self.max_migrations = max_migrations
        self.max_pause = max_pause
        self.tolerance = tolerance
        self.settings = AlbicSettings(
            max_new_pairs=None, collocation_budget_share=pin_share, milp=MilpSettings(time_limit=time_limit)
        )

    def describe(self) -> dict:
        return {
            "policy": self.name,
            "target": self.target,
            "min_gain": self.min_gain,
            "window": self.window,
            "max_migrations": self.max_migrations,
            "max_pause": self.max_pause,
            "tolerance": self.tolerance,
            "pin_share": self.settings.collocation_budget_share,
        }

    def propose(self, view: ControlView) -> list[Action]:
        plan = view.plan
        batches = [m for m in view.batches() if m.plan_version == plan.version][-self.window :]
        if len(batches) < self.window:
            return []  # the routing in force is not measured yet
        k = plan.max_parallelism
        for op_id in sorted(plan.keyed):
            traffic = key_group_traffic(batches, op_id, k)
            if traffic is None or traffic.upstream not in plan.keyed:
                continue
            up_ops, down_ops = plan.stage_of(traffic.upstream), plan.stage_of(op_id)
            up_stage, down_stage = plan.keyed[traffic.upstream], plan.keyed[op_id]
            if up_stage.partitions != down_stage.partitions or up_stage.partitions < 2 or up_ops == down_ops:
                continue
            before = traffic.collocation
            if before >= self.target:
                continue
            up, down = key_group_stats(batches, up_ops, k), key_group_stats(batches, down_ops, k)
            if up is None or down is None:
                continue
            problem = collocation_problem(up, down, traffic, up_stage, down_stage, self.tolerance)
            batch_s = up.wall_s / max(up.batches, 1)
            budget = MigrationBudget(max_cost=100.0 * self.max_pause * batch_s / up.wall_s, max_count=self.max_migrations)
            result = albic(problem, budget, self.settings)
            expected_before = collocation_factor(problem)  # the window's pairs as recorded
            after = collocation_factor(problem, result.assignment)
            if not result.migrations or after < expected_before + self.min_gain:
                continue
            routing_up, routing_down = routings_of(result, k)
            moved = len(result.migrations)
            reason = (
                f"{op_id} reads {before:.0%} of its rows from {traffic.upstream}'s partition of the same index "
                f"(target {self.target:.0%}); ALBIC moves {moved} key group(s) of the two to raise it to "
                f"{after:.0%} ({result.notes.get('pinned_pairs', 0)} pair(s) pinned, "
                f"{result.notes.get('solves', 1)} solve(s), load distance {load_distance(problem):.1f} -> "
                f"{result.load_distance:.1f} points)"
            )
            return [
                Routing(
                    target=f"{traffic.upstream}+{op_id}",
                    tables={traffic.upstream: tuple(routing_up), op_id: tuple(routing_down)},
                    reason=reason,
                    expected={
                        "collocation": round(after, 4),
                        "collocation_before": round(before, 4),
                        "migrations": moved,
                        "load_distance": round(result.load_distance, 2),
                        "load_distance_before": round(load_distance(problem), 2),
                        "migration_s": round(result.migration_cost * up.wall_s / 100.0, 4),
                    },
                )
            ]
        return []
