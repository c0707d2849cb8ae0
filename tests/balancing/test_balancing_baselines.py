"""Baselines: Flux, PoTC, COLA, non-integrated scale-in."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_balancing_milp import check_plan

from sluice.errors import PlanError
from sluice.plan.balancing import (
    BalancingProblem,
    MigrationBudget,
    cola,
    collocation_factor,
    flux,
    load_distance,
    non_integrated_scale_in,
    potc,
)
from sluice.plan.balancing.baselines import lpt_pack
from sluice.sim.balancing_workloads import collocation_workload, solver_workload


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 12), st.integers(0, 30), st.integers(0, 1000))
def test_flux_keeps_budget_and_never_worsens_variance(nodes, max_count, seed):
    problem = solver_workload(nodes, nodes * 6, 0.5, seed=seed)
    plan = flux(problem, MigrationBudget(max_count=max_count))
    check_plan(problem, plan, MigrationBudget(max_count=max_count))
    var = lambda a: np.var(np.bincount(problem.node_index(a), weights=problem.load, minlength=nodes))  # noqa: E731
    assert var(plan.assignment) <= var(problem.assignment) + 1e-9


def test_flux_moves_biggest_suitable_key_group_from_first_to_last():
    problem = BalancingProblem(load=[6, 3, 1, 1], state_bytes=np.ones(4), assignment=[0, 0, 0, 1], nodes=[0, 1])
    plan = flux(problem, MigrationBudget(max_count=1))
    # gap is 10 - 1 = 9: the 6 is suitable (< 9) and the biggest
    assert [(m.key_group, m.target) for m in plan.migrations] == [(0, 1)]


def test_flux_refuses_nodes_marked_for_removal():
    problem = BalancingProblem(load=[1, 1], state_bytes=[1, 1], assignment=[0, 1], nodes=[0, 1], removing=[False, True])
    with pytest.raises(PlanError):
        flux(problem, MigrationBudget(max_count=1))


def test_potc_splits_load_and_charges_merge_on_the_first_choice():
    problem = solver_workload(10, 200, 0.5, seed=0)
    result = potc(problem, merge_cost=0.1)
    assert np.all(result.first != result.second)
    assert result.node_load.sum() == pytest.approx(problem.load.sum() + result.merge_load)
    assert result.merge_load > 0
    no_merge = potc(problem, merge_cost=0.0)
    assert no_merge.load_distance < load_distance(problem)


def test_lpt_pack_balances_equal_items():
    bins = lpt_pack(np.ones(8), np.ones(4))
    assert np.bincount(bins).tolist() == [2, 2, 2, 2]


def test_cola_reaches_max_collocation_but_migrates_a_lot():
    workload = collocation_workload(10, 200, 5, one_to_one_fraction=0.5, seed=0)
    problem = workload.problem
    plan = cola(problem, max_load_distance=10.0)
    assert plan.load_distance <= 10.0
    assert collocation_factor(problem, plan.assignment) > 0.4  # near the 50 % obtainable
    assert len(plan.migrations) > problem.num_key_groups // 2  # a full re-optimization


def test_non_integrated_drains_first_then_balances():
    problem = BalancingProblem(
        load=np.ones(8),
        state_bytes=np.ones(8),
        assignment=[0, 0, 0, 0, 0, 2, 2, 2],
        nodes=[0, 1, 2],
        removing=[False, False, True],
    )
    budget = MigrationBudget(max_count=2)
    plan = non_integrated_scale_in(problem, budget)
    check_plan(problem, plan, budget)
    assert all(m.source == 2 for m in plan.migrations) and len(plan.migrations) == 2
