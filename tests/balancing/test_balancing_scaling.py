"""Algorithm 1 (integrated scaling) and the model's metrics."""

from __future__ import annotations

import numpy as np
import pytest

from sluice.errors import PlanError
from sluice.plan.balancing import (
    BalancingProblem,
    MarkForRemoval,
    MigrationBudget,
    MilpSettings,
    ScalingDecision,
    Traffic,
    UtilizationPolicy,
    adapt,
    apply_decision,
    collocation_factor,
    load_distance,
    mean_load,
    release_drained_nodes,
    solve_milp,
)

MILP = lambda budget: lambda p: solve_milp(p, budget, MilpSettings(time_limit=2.0))  # noqa: E731


def test_load_distance_counts_removing_nodes_only_above_the_mean():
    problem = BalancingProblem(
        load=[4, 4, 2], state_bytes=[1, 1, 1], assignment=[0, 1, 2], nodes=[0, 1, 2], removing=[False, False, True]
    )
    assert mean_load(problem) == pytest.approx(5.0)  # 10 over the two nodes that stay
    assert load_distance(problem) == pytest.approx(1.0)  # N_s nodes are 1 below; N_r at 2 is not "over"


def test_collocation_factor_is_share_of_traffic_on_one_node():
    problem = BalancingProblem(
        load=[1, 1, 1],
        state_bytes=[1, 1, 1],
        assignment=[0, 0, 1],
        nodes=[0, 1],
        traffic=Traffic.from_pairs([(0, 1, 3.0), (1, 2, 1.0)]),
    )
    assert collocation_factor(problem) == pytest.approx(0.75)


def test_bad_inputs_name_the_problem():
    with pytest.raises(PlanError, match="not a node"):
        BalancingProblem(load=[1], state_bytes=[1], assignment=[7], nodes=[0])
    with pytest.raises(PlanError, match="every node"):
        BalancingProblem(load=[1], state_bytes=[1], assignment=[0], nodes=[0], removing=[True])


def test_release_drops_only_empty_removing_nodes():
    problem = BalancingProblem(load=[1, 1], state_bytes=[1, 1], assignment=[0, 2], nodes=[0, 1, 2], removing=[False, True, True])
    smaller, released = release_drained_nodes(problem)
    assert released == (1,)
    assert smaller.nodes.tolist() == [0, 2]


def test_scale_out_decision_comes_from_the_potential_plan():
    # node 0 at 120 %: balancing alone (potential plan) brings everyone to 60 %, so no scale-out
    problem = BalancingProblem(load=np.full(12, 10.0), state_bytes=np.ones(12), assignment=[0] * 12, nodes=[0, 1])
    result = adapt(problem, MILP(MigrationBudget()), UtilizationPolicy(high=85, low=20, target=65))
    assert result.decision.is_noop
    # at 180 % of total over two nodes, balancing cannot help: the policy adds nodes, the final
    # plan already uses them
    hot = BalancingProblem(load=np.full(18, 10.0), state_bytes=np.ones(18), assignment=[0] * 18, nodes=[0, 1])
    result = adapt(hot, MILP(MigrationBudget()), UtilizationPolicy(high=85, low=20, target=65))
    assert len(result.decision.add_capacities) >= 1
    assert result.problem.num_nodes > 2
    assert len(set(result.plan.assignment.tolist())) > 2


def test_scale_in_marks_nodes_and_the_final_plan_starts_draining():
    problem = BalancingProblem(
        load=np.full(8, 5.0), state_bytes=np.ones(8), assignment=[0, 0, 1, 1, 2, 2, 3, 3], nodes=[0, 1, 2, 3]
    )
    budget = MigrationBudget(max_count=4)
    result = adapt(problem, MILP(budget), MarkForRemoval((3,)))
    assert result.problem.removing.tolist() == [False, False, False, True]
    assert {m.source for m in result.plan.migrations} == {3}
    after = adapt(result.problem.with_assignment(result.plan.assignment), MILP(budget))
    assert after.released == (3,)


def test_apply_decision_adds_fresh_empty_nodes():
    problem = BalancingProblem(load=[1], state_bytes=[1], assignment=[5], nodes=[5])
    grown = apply_decision(problem, ScalingDecision(add_capacities=(1.0, 2.0)))
    assert grown.nodes.tolist() == [5, 6, 7] and grown.capacity.tolist() == [1.0, 1.0, 2.0]
