"""Key-group load balancing as a control policy (ALBIC's MILP, section 4.3.1, live).

After each batch the policy builds, for every keyed stage (a keyed operator, or the keyed
operators collocated in one stage, whose loads add up), the balancing problem of the
last ``window`` batches measured under the routing in force (``sluice.control.keygroups``).
When the load distance (the largest deviation of a partition's load from the mean, ALBIC's
epsilon) exceeds ``threshold`` of the mean load, it solves the MILP on HiGHS under a
migration budget (at most ``max_migrations`` key groups, and at most ``max_pause`` of a
batch's time spent loading moved state) and proposes the new routing table if it cuts the
load distance by at least ``min_gain``. The controller applies it at the next batch through
the plan log: the moved key groups' state is read from the store by their new partition, so
nothing is lost or repeated, and a replay keeps the routing it ran with.

Expected effect: the load distance the solver predicts; the controller logs what the next
batches measure beside it.

Pure: no Spark.
"""

from __future__ import annotations

import numpy as np

from sluice.control.actions import Action, Routing
from sluice.control.keygroups import balancing_problem, key_group_stats, routing_of
from sluice.control.policy import Policy
from sluice.control.view import ControlView
from sluice.plan.balancing import (
    BalancePlan,
    BalancingProblem,
    MigrationBudget,
    MilpSettings,
    load_distance,
    mean_load,
    node_loads,
    solve_milp,
)
from sluice.plan.balancing.baselines.flux import flux
from sluice.plan.balancing.ring import ring_balance


class KeyGroupBalancing(Policy):
    """Move hot key groups between a keyed stage's partitions when their loads drift apart.

    ``threshold``: load distance, as a share of the mean partition load, that triggers a
    rebalance; ``min_gain``: the share of the load distance a new routing must remove;
    ``window``: batches of statistics (all under the routing in force);
    ``max_migrations``: key groups moved at most per round (ALBIC's count budget);
    ``max_pause``: state-loading time of the moved key groups, as a share of a batch;
    ``time_limit``: seconds HiGHS may spend.
    """

    name = "balancing"

    def __init__(
        self,
        threshold: float = 0.2,
        min_gain: float = 0.3,
        window: int = 4,
        max_migrations: int = 16,
        max_pause: float = 0.5,
        time_limit: float = 2.0,
    ):
        if threshold <= 0 or not 0 < min_gain < 1 or window < 1 or max_migrations < 1 or max_pause <= 0:
            raise ValueError(
                "balancing: threshold > 0, 0 < min_gain < 1, window >= 1, max_migrations >= 1 and max_pause > 0 are required"
            )
        self.threshold = threshold
        self.min_gain = min_gain
        self.window = window
        self.max_migrations = max_migrations
        self.max_pause = max_pause
        self.settings = MilpSettings(time_limit=time_limit)

    def describe(self) -> dict:
        return {
            "policy": self.name,
            "threshold": self.threshold,
            "min_gain": self.min_gain,
            "window": self.window,
            "max_migrations": self.max_migrations,
            "max_pause": self.max_pause,
        }

    def propose(self, view: ControlView) -> list[Action]:
        plan = view.plan
        batches = [m for m in view.batches() if m.plan_version == plan.version][-self.window :]
        if len(batches) < self.window:
            return []  # the routing in force is not measured yet
        for ops in sorted(plan.keyed_stages()):  # collocated operators share a stage: balanced together
            op_id, stage = ops[0], plan.keyed[ops[0]]
            if stage.partitions < 2:
                continue
            stats = key_group_stats(batches, ops, plan.max_parallelism)
            if stats is None:
                continue
            problem = balancing_problem(stats, stage)
            mean = mean_load(problem)
            before = load_distance(problem)
            if mean <= 0 or before <= self.threshold * mean:
                continue
            batch_s = stats.wall_s / max(stats.batches, 1)
            budget = MigrationBudget(max_cost=100.0 * self.max_pause * batch_s / stats.wall_s, max_count=self.max_migrations)
            result = self.solve(problem, budget)
            after = result.load_distance
            if not result.migrations or after > before * (1 - self.min_gain):
                continue
            moved = [m.key_group for m in result.migrations]
            hottest = int(np.argmax(problem.load))
            reason = (
                f"{op_id}: partitions' loads {_loads(problem)} % of a core deviate up to {before:.1f} points "
                f"from their mean {mean:.1f} (threshold {self.threshold:.0%}); moving {len(moved)} key "
                f"group(s) {moved[:8]}{'...' if len(moved) > 8 else ''} (hottest: {hottest}, "
                f"{problem.load[hottest]:.1f} points) cuts it to {after:.1f} ({self.solver}, {result.status})"
            )
            return [
                Routing.of(
                    op_id,
                    routing_of(result),
                    reason,
                    expected={
                        "load_distance": round(after, 2),
                        "load_distance_before": round(before, 2),
                        "migrations": len(moved),
                        # the hottest partition's load, % of a core: what a move buys a batch
                        "hottest_load": round(float(node_loads(problem).max()), 2),
                        "hottest_load_after": round(float(node_loads(problem, result.assignment).max()), 2),
                        "migration_s": round(sum(m.cost for m in result.migrations) * stats.wall_s / 100.0, 4),
                    },
                )
            ]
        return []

    solver = "MILP"

    def solve(self, problem: BalancingProblem, budget: MigrationBudget) -> BalancePlan:
        """The new routing under ``budget``: ALBIC's MILP on HiGHS."""
        return solve_milp(problem, budget, self.settings)


class FluxBalancing(KeyGroupBalancing):
    """The same policy with Flux's greedy pairing of the most and least loaded partitions
    (a baseline: same trigger, window and budget, a different solver)."""

    name = "flux_balancing"
    solver = "Flux"

    def solve(self, problem: BalancingProblem, budget: MigrationBudget) -> BalancePlan:
        return flux(problem, budget)


class RingBalancing(KeyGroupBalancing):
    """The same policy on a consistent-hash ring: tokens move between ring neighbours
    (``plan.balancing.ring``, the thesis's movable tokens), so every partition keeps one
    contiguous arc of key groups and a move only ever hands key groups to a neighbour.
    The routing in force must be a ring (range routing, the initial one, is); a table
    another policy made free-form is left alone."""

    name = "ring_balancing"
    solver = "ring"

    def solve(self, problem: BalancingProblem, budget: MigrationBudget) -> BalancePlan:
        return ring_balance(problem, budget)


def _loads(problem) -> list[float]:
    return [round(float(x), 1) for x in node_loads(problem)]
