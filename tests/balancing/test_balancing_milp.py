"""MILP load balancer: invariants, Lemma 1, Lemma 4.2 (and its caveat), brute-force optimum."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.errors import PlanError
from sluice.plan.balancing import (
    BalancingProblem,
    MigrationBudget,
    MilpSettings,
    NoScaling,
    adapt,
    load_distance,
    mean_load,
    solve_milp,
)

EXACT = MilpSettings(time_limit=30.0, mip_rel_gap=0.0)


def check_plan(problem: BalancingProblem, plan, budget: MigrationBudget) -> None:
    """Every key group on exactly one existing node; the budget holds; no move into N_r."""
    assert plan.assignment.shape == (problem.num_key_groups,)
    assert np.isin(plan.assignment, problem.nodes).all()
    moved = np.flatnonzero(plan.assignment != problem.assignment)
    assert sorted(m.key_group for m in plan.migrations) == moved.tolist()
    for m in plan.migrations:
        assert m.source == problem.assignment[m.key_group] and m.target == plan.assignment[m.key_group]
    assert budget.allows(plan.migration_cost, len(plan.migrations))
    removing_ids = set(problem.nodes[problem.removing].tolist())
    for m in plan.migrations:  # Lemma 1: never from N_s to N_r
        assert not (m.source not in removing_ids and m.target in removing_ids)
    assert plan.load_distance == pytest.approx(load_distance(problem, plan.assignment))


@st.composite
def small_problems(draw, max_nodes=4, max_key_groups=8):
    n = draw(st.integers(2, max_nodes))
    k = draw(st.integers(1, max_key_groups))
    load = draw(st.lists(st.integers(1, 20), min_size=k, max_size=k))
    state = draw(st.lists(st.integers(1, 5), min_size=k, max_size=k))
    assignment = draw(st.lists(st.integers(0, n - 1), min_size=k, max_size=k))
    capacity = draw(st.lists(st.sampled_from([1.0, 1.0, 1.5, 2.0]), min_size=n, max_size=n))
    removing = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    if all(removing):
        removing[0] = False
    problem = BalancingProblem(
        load=np.array(load, float),
        state_bytes=np.array(state, float),
        assignment=np.array(assignment) + 10,
        nodes=np.arange(n) + 10,
        capacity=capacity,
        removing=removing,
    )
    by_count = draw(st.booleans())
    budget = (
        MigrationBudget(max_count=draw(st.integers(0, k)))
        if by_count
        else MigrationBudget(max_cost=float(draw(st.integers(0, 12))))
    )
    return problem, budget


def brute_force(problem: BalancingProblem, budget: MigrationBudget, alpha: float, gamma: float, into_removing: bool = False):
    """Best objective and best load distance over all assignments (moves into N_r only if asked)."""
    k, n = problem.num_key_groups, problem.num_nodes
    combos = np.array(list(itertools.product(range(n), repeat=k)))
    cur = problem.assignment_index
    moved = combos != cur[None, :]
    cost = (moved * problem.migration_cost[None, :]).sum(axis=1)
    count = moved.sum(axis=1)
    ok = np.ones(len(combos), bool)
    if not into_removing:
        ok &= ~(moved & problem.removing[combos]).any(axis=1)
    if budget.max_cost is not None:
        ok &= cost <= budget.max_cost + 1e-9
    if budget.max_count is not None:
        ok &= count <= budget.max_count
    combos, moved = combos[ok], moved[ok]
    loads = np.zeros((len(combos), n))
    for j in range(k):
        np.add.at(loads, (np.arange(len(combos)), combos[:, j]), problem.load[j])
    dev = loads / problem.capacity[None, :] - mean_load(problem)
    upper = dev.max(axis=1)
    lower = (-dev[:, ~problem.removing]).max(axis=1)
    eps = np.maximum(np.maximum(upper, lower), 0)
    eps_u, eps_l = np.minimum(eps, eps - upper), np.minimum(eps, eps - lower)
    from_r = problem.removing[cur]
    churn = (moved & ~from_r[None, :]).sum(axis=1) - (moved & from_r[None, :]).sum(axis=1)
    objective = eps - alpha * (eps_u + eps_l) + gamma * mean_load(problem) * churn
    return objective.min(), eps.min()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_problems())
def test_milp_matches_brute_force_optimum(case):
    problem, budget = case
    exact = MilpSettings(time_limit=30.0, mip_rel_gap=0.0, drain_share=0.0)
    plan = solve_milp(problem, budget, exact)
    check_plan(problem, plan, budget)
    best_objective, best_eps = brute_force(problem, budget, exact.secondary_weight, exact.tie_weight)
    assert plan.notes["objective"] == pytest.approx(best_objective, abs=1e-6)
    # eps is minimized first: the secondary terms can cost at most a factor 1/(1 - 2 alpha).
    assert plan.load_distance <= best_eps / (1 - 2 * exact.secondary_weight) + 1e-6


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_problems(max_nodes=6, max_key_groups=30), st.sampled_from([0.0, 0.5]))
def test_milp_invariants_with_drain_pace(case, drain_share):
    problem, budget = case
    plan = solve_milp(problem, budget, MilpSettings(time_limit=5.0, drain_share=drain_share))
    check_plan(problem, plan, budget)


def test_lemma_1_holds_by_construction_even_where_the_objective_would_break_it():
    """Hypothesis-found fixture: parking the key group on the big N_r node would give eps 6, not 12."""
    problem = BalancingProblem(
        load=[18.0],
        state_bytes=[1.0],
        assignment=[3],
        nodes=[0, 1, 2, 3],
        capacity=[2.0, 1.0, 1.0, 1.0],
        removing=[True, False, False, False],
    )
    budget = MigrationBudget(max_count=1)
    exact = MilpSettings(time_limit=10, mip_rel_gap=0.0)
    _, unrestricted_eps = brute_force(problem, budget, exact.secondary_weight, exact.tie_weight, into_removing=True)
    assert unrestricted_eps == pytest.approx(6.0)
    plan = solve_milp(problem, budget, exact)
    check_plan(problem, plan, budget)
    assert plan.load_distance == pytest.approx(12.0)


def test_unbudgeted_milp_balances_a_skewed_cluster():
    rng = np.random.default_rng(3)
    load = rng.uniform(1, 3, 60)
    problem = BalancingProblem(load=load, state_bytes=np.ones(60), assignment=np.zeros(60, int), nodes=[0, 1, 2, 3])
    plan = solve_milp(problem, MigrationBudget(), MilpSettings(time_limit=1))
    assert load_distance(problem) > 50
    assert plan.load_distance < 1.0


def test_zero_budget_keeps_the_routing_table():
    problem = BalancingProblem(load=[5, 1, 1], state_bytes=[1, 1, 1], assignment=[0, 0, 1], nodes=[0, 1])
    plan = solve_milp(problem, MigrationBudget(max_count=0), EXACT)
    assert plan.migrations == () and plan.assignment.tolist() == [0, 0, 1]


def test_heterogeneous_capacity_gets_proportional_load():
    # node 1 is twice as big: the balanced plan puts two thirds of the load on it
    problem = BalancingProblem(
        load=np.ones(6), state_bytes=np.ones(6), assignment=np.zeros(6, int), nodes=[0, 1], capacity=[1.0, 2.0]
    )
    plan = solve_milp(problem, MigrationBudget(), EXACT)
    assert (plan.assignment == 1).sum() == 4
    assert plan.load_distance == pytest.approx(0.0, abs=1e-9)


def test_resource_caps_are_respected():
    # memory caps force the two big-memory key groups apart although the load would not
    problem = BalancingProblem(
        load=[1, 1, 1, 1],
        state_bytes=[1, 1, 1, 1],
        assignment=[0, 0, 1, 1],
        nodes=[0, 1],
        resource_load=[[10], [10], [1], [1]],
        resource_cap=[[12], [12]],
    )
    plan = solve_milp(problem, MigrationBudget(), EXACT)
    assert plan.assignment[0] != plan.assignment[1]


def test_infeasible_caps_raise_plan_error():
    problem = BalancingProblem(
        load=[1, 1], state_bytes=[1, 1], assignment=[0, 1], nodes=[0, 1], resource_load=[[10], [10]], resource_cap=[[5], [5]]
    )
    with pytest.raises(PlanError):
        solve_milp(problem, MigrationBudget(), EXACT)


def test_lemma_4_2_caveat_granular_last_key_group():
    """Reconstruction check: with whole key groups the pure MILP may keep the last one on N_r."""
    problem = BalancingProblem(
        load=np.ones(9),
        state_bytes=np.ones(9),
        assignment=[0, 0, 1, 1, 2, 2, 3, 3, 4],
        nodes=[0, 1, 2, 3, 4],
        removing=[False] * 4 + [True],
    )
    pure = solve_milp(problem, MigrationBudget(max_count=1), MilpSettings(time_limit=10, mip_rel_gap=0, drain_share=0))
    assert pure.migrations == ()  # eps 0.25 staying vs 0.75 drained
    paced = solve_milp(problem, MigrationBudget(max_count=1), MilpSettings(time_limit=10, mip_rel_gap=0))
    assert [(m.source, m.key_group) for m in paced.migrations] == [(4, 8)]


def drain_rounds(problem, budget, settings, max_rounds=50):
    """Run Algorithm 1 with no new scaling decisions until N_r is released; returns (rounds, result)."""
    marked, released = set(problem.nodes[problem.removing].tolist()), set()
    for rounds in range(1, max_rounds + 1):
        result = adapt(problem, lambda p: solve_milp(p, budget, settings))
        check_plan(result.problem, result.plan, budget)
        released |= set(result.released)
        problem = result.problem.with_assignment(result.plan.assignment)
        if not problem.removing[problem.assignment_index].any():
            return rounds, problem, marked - released
    raise AssertionError("N_r did not drain")


@settings(max_examples=8, deadline=None)
@given(st.integers(2, 5), st.integers(1, 4), st.integers(1, 3), st.integers(1, 12), st.integers(0, 2**16))
def test_lemma_4_2_drains_within_budget_rounds_and_releases(staying, per_node, removing, budget_count, seed):
    rng = np.random.default_rng(seed)
    k_s = staying * per_node
    k_r = int(rng.integers(1, 4 * removing + 1))
    assignment = np.concatenate([np.repeat(np.arange(staying), per_node), rng.integers(staying, staying + removing, k_r)])
    problem = BalancingProblem(
        load=rng.uniform(1.0, 1.2, k_s + k_r),
        state_bytes=np.ones(k_s + k_r),
        assignment=assignment,
        nodes=np.arange(staying + removing),
        removing=[False] * staying + [True] * removing,
    )
    budget = MigrationBudget(max_count=budget_count)
    share = MilpSettings().drain_share
    rounds, drained, marked = drain_rounds(problem, budget, MilpSettings(time_limit=1))
    assert rounds <= int(np.ceil(k_r / max(1, np.floor(share * budget_count))))
    # Algorithm 1 lines 1-3: the next period releases every drained node of N_r.
    released = adapt(drained, lambda p: solve_milp(p, budget, MilpSettings(time_limit=1)), NoScaling())
    assert set(released.released) == marked
    assert not released.problem.removing.any()


@pytest.mark.parametrize("removing", [0, 3])
def test_neighbourhood_search_on_large_models_keeps_invariants_and_improves_start(removing):
    from sluice.sim.balancing_workloads import solver_workload

    base = solver_workload(20, 300, 0.5, seed=4)  # 6000 columns: above full_model_columns
    mask = np.zeros(20, bool)
    mask[:removing] = True
    problem = BalancingProblem(
        load=base.load,
        state_bytes=base.state_bytes,
        assignment=base.assignment,
        nodes=base.nodes,
        removing=mask,
        cost_per_byte=base.cost_per_byte,
    )
    budget = MigrationBudget(max_count=15)
    plan = solve_milp(problem, budget, MilpSettings(time_limit=1.0))
    assert plan.notes["neighbourhood_search"]
    check_plan(problem, plan, budget)
    assert plan.notes["objective"] <= plan.notes["start_objective"] + 1e-12
    assert plan.load_distance < load_distance(problem)


def test_the_solver_prints_no_banner():
    """HiGHS's copyright banner (printed from C++ by the first solver a process makes) never
    reaches a job's console."""
    import subprocess
    import sys

    code = (
        "import numpy as np\n"
        "from sluice.plan.balancing import BalancingProblem, MigrationBudget, solve_milp\n"
        "p = BalancingProblem(load=np.arange(1.0, 9.0), state_bytes=np.ones(8), assignment=np.zeros(8, int), "
        "nodes=[0, 1])\n"
        "print('moves', len(solve_milp(p, MigrationBudget(max_count=8)).migrations))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120)
    assert out.stdout.startswith("moves ") and "HiGHS" not in out.stdout + out.stderr, out.stdout
