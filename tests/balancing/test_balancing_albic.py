"""ALBIC: scores, union of collocated pairs, METIS splitting, pinning cases, re-solve loop."""

from __future__ import annotations

import numpy as np
from test_balancing_milp import check_plan

from sluice.plan.balancing import AlbicSettings, BalancingProblem, MigrationBudget, MilpSettings, Traffic, albic
from sluice.plan.balancing.albic import Units, collocated_sets, collocation_pairs, pin_new_pairs, split_set
from sluice.plan.balancing.graph import undirected_traffic
from sluice.plan.balancing.model import collocation_factor
from sluice.sim.balancing_workloads import collocation_workload


def chain_problem(assignment, load=None, rate_one_to_one=100.0):
    """Operators A (kg 0, 1) -> B (kg 2, 3): 0 -> 2 one-to-one, 1 -> {2, 3} evenly."""
    traffic = Traffic.from_pairs([(0, 2, rate_one_to_one), (1, 2, 50.0), (1, 3, 50.0)])
    return BalancingProblem(
        load=np.ones(4) if load is None else load,
        state_bytes=np.ones(4),
        assignment=assignment,
        nodes=[0, 1],
        traffic=traffic,
        operator=[0, 0, 1, 1],
    )


def test_scores_keep_only_pairs_above_sigma_times_average():
    problem = chain_problem([0, 0, 1, 1])
    pairs = collocation_pairs(problem, score_factor=1.5)
    # avg(0) = 100 / 2 downstream key groups = 50: 100 > 75 qualifies; avg(1) = 50: 50 > 75 does not
    assert list(zip(pairs.a.tolist(), pairs.b.tolist())) == [(0, 2)]
    assert collocation_pairs(problem, score_factor=2.0).a.size == 0  # 100 is not > 2 * 50


def test_collocated_pairs_merge_into_sets_by_union():
    traffic = Traffic.from_pairs([(0, 1, 10.0), (1, 2, 10.0), (3, 4, 10.0)])
    problem = BalancingProblem(
        load=np.ones(6), state_bytes=np.ones(6), assignment=[0, 0, 0, 1, 2, 1], nodes=[0, 1, 2], traffic=traffic
    )
    pairs = collocation_pairs(problem, score_factor=0.5)
    sets = collocated_sets(problem, pairs)
    assert [s.tolist() for s in sets] == [[0, 1, 2]]  # (3, 4) are on different nodes


def test_split_respects_load_and_migration_caps():
    rng = np.random.default_rng(0)
    k = 40
    src = np.arange(k - 1)
    traffic = Traffic(src, src + 1, np.full(k - 1, 10.0))
    problem = BalancingProblem(
        load=rng.uniform(1, 2, k), state_bytes=rng.uniform(1, 3, k), assignment=np.zeros(k, int), nodes=[0, 1], traffic=traffic
    )
    graph = undirected_traffic(k, traffic.src, traffic.dst, traffic.rate)
    budget = MigrationBudget(max_cost=12.0)
    parts = split_set(np.arange(k), problem, graph, budget, max_partition_load=10.0)
    assert sorted(np.concatenate(parts).tolist()) == list(range(k))
    for p in parts:
        assert problem.load[p].sum() <= 10.0 or len(p) == 1
        assert problem.migration_cost[p].sum() <= 12.0 or len(p) == 1
    # a chain split by METIS keeps neighbours together: few cut edges
    cut = sum(1 for i in range(k - 1) if not any(i in p and i + 1 in p for p in parts))
    assert cut <= 2 * len(parts)


def test_zero_partition_load_means_singletons():
    problem = chain_problem([0, 0, 0, 0])
    graph = undirected_traffic(4, problem.traffic.src, problem.traffic.dst, problem.traffic.rate)
    assert len(split_set(np.arange(4), problem, graph, MigrationBudget(), 0.0)) == 4


def _pin(problem, sets):
    pairs = collocation_pairs(problem, 1.5)
    units = Units.from_partitions(problem.num_key_groups, sets)
    return pin_new_pairs(
        problem, pairs, units, MigrationBudget(), AlbicSettings(score_factor=1.5), np.random.default_rng(0)
    ), units


def test_pin_case_1_goes_to_the_less_loaded_node():
    problem = chain_problem([0, 0, 1, 1], load=np.array([1.0, 5.0, 1.0, 1.0]))  # node 0 busier
    pinned, _ = _pin(problem, [])
    assert pinned == [(0, 2, 1)]


def test_pin_case_2_goes_to_the_node_of_the_set():
    # kg 2 is in a set with kg 3 on node 1... and node 1 is the busier one: case 2 still goes there
    traffic = Traffic.from_pairs([(0, 2, 100.0), (1, 3, 100.0)])
    problem = BalancingProblem(
        load=[1, 1, 5, 5], state_bytes=np.ones(4), assignment=[0, 0, 1, 1], nodes=[0, 1], traffic=traffic, operator=[0, 0, 1, 1]
    )
    pinned, units = _pin(problem, [np.array([2, 3])])
    assert len(pinned) == 1 and pinned[0][2] == 1


def test_pins_never_target_nodes_being_removed():
    problem = BalancingProblem(
        load=[1, 1, 1, 1],
        state_bytes=np.ones(4),
        assignment=[0, 0, 1, 1],
        nodes=[0, 1],
        removing=[False, True],
        traffic=Traffic.from_pairs([(0, 2, 100.0), (1, 3, 50.0)]),
        operator=[0, 0, 1, 1],
    )
    pinned, _ = _pin(problem, [])
    assert all(node == 0 for _, _, node in pinned)


def test_albic_rounds_raise_collocation_and_keep_invariants():
    workload = collocation_workload(8, 96, 6, one_to_one_fraction=0.6, seed=1)
    budget = MigrationBudget(max_count=8)
    settings = AlbicSettings(max_new_pairs=None, milp=MilpSettings(time_limit=1.0))
    assignment = workload.problem.assignment
    first = collocation_factor(workload.problem)
    rng = np.random.default_rng(0)
    for _ in range(4):
        problem = workload.next_round(assignment, rng)
        plan = albic(problem, budget, settings)
        check_plan(problem, plan, budget)
        assignment = plan.assignment
    assert collocation_factor(problem, assignment) > first + 0.1
    assert plan.load_distance <= settings.max_load_distance


def test_albic_resolves_with_smaller_partitions_until_load_distance_fits():
    # One heavy collocated set on node 0; D_max small forces lowering L_P^max and re-solving.
    k = 12
    traffic = Traffic(np.arange(k - 1), np.arange(1, k), np.full(k - 1, 10.0))
    problem = BalancingProblem(
        load=np.full(k, 5.0), state_bytes=np.ones(k), assignment=np.zeros(k, int), nodes=[0, 1, 2, 3], traffic=traffic
    )  # mean 15: partitions of 20 cannot fit
    plan = albic(
        problem, MigrationBudget(), AlbicSettings(score_factor=0.5, max_load_distance=1.0, milp=MilpSettings(time_limit=2.0))
    )
    assert plan.notes["solves"] > 1
    assert plan.load_distance <= 1.0 + 1e-9
