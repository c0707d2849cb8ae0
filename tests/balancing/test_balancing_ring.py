"""Consistent-hash ring routing with movable tokens: the minimal-movement property, and
balancing by token moves against the MILP on the same workload."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_balancing_milp import check_plan

from sluice.errors import PlanError
from sluice.plan.balancing import BalancingProblem, MigrationBudget, MilpSettings, load_distance, solve_milp
from sluice.plan.balancing.ring import TokenRing, add_node, remove_node, ring_balance
from sluice.plan.physical import range_routing


@st.composite
def rings(draw, max_nodes=8, max_key_groups=64):
    k = draw(st.integers(2, max_key_groups))
    n = draw(st.integers(1, min(max_nodes, k)))
    tokens = draw(st.lists(st.integers(0, k - 1), min_size=n, max_size=n, unique=True))
    nodes = draw(st.permutations(list(range(n))))
    load = draw(st.lists(st.floats(0.0, 50.0), min_size=k, max_size=k))
    return TokenRing(np.array(tokens), np.array(nodes), k), np.array(load)


def arcs_are_contiguous(assignment: np.ndarray) -> bool:
    """Each node's key groups form one arc of the ring."""
    changes = int((assignment != np.roll(assignment, 1)).sum())
    return changes == len(np.unique(assignment)) or len(np.unique(assignment)) == 1


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 300), st.integers(1, 40))
def test_even_tokens_are_the_range_routing_every_stage_starts_with(k, n):
    if n > k:
        return
    assert TokenRing.evenly(k, np.arange(n)).assignment().tolist() == range_routing(k, n)


@settings(max_examples=80, deadline=None)
@given(rings())
def test_a_routing_table_shaped_as_a_ring_gives_its_tokens_back(case):
    ring, _ = case
    table = ring.assignment()
    assert arcs_are_contiguous(table)
    back = TokenRing.from_assignment(table, ring.nodes)
    assert back is not None and back.assignment().tolist() == table.tolist()
    if len(ring.nodes) > 1:
        assert back.tokens.tolist() == ring.tokens.tolist()


def test_a_free_routing_table_is_not_a_ring():
    assert TokenRing.from_assignment([0, 1, 0, 1], [0, 1]) is None  # node 0 in two arcs
    assert TokenRing.from_assignment([0, 0, 0, 0], [0, 1]) is None  # node 1 owns nothing
    with pytest.raises(PlanError):
        TokenRing(np.array([3, 3]), np.array([0, 1]), 8)


@settings(max_examples=80, deadline=None)
@given(rings(), st.data())
def test_moving_one_token_moves_key_groups_between_its_two_ring_neighbours_only(case, data):
    ring, _ = case
    if len(ring.nodes) < 2:
        return
    order = ring.ring_order()
    at = data.draw(st.integers(0, len(order) - 1))
    mover, before_node, after_node = order[at], order[at - 1], order[(at + 1) % len(order)]
    # a token may move anywhere strictly between its neighbours' tokens
    low, high = int(ring.tokens[before_node]) + 1, int(ring.tokens[after_node])
    span = (high - low) % ring.num_key_groups
    if span == 0 and len(order) > 2:
        return
    step = data.draw(st.integers(0, max(span - 1, 0)))
    moved_ring = ring.with_token(mover, (low + step) % ring.num_key_groups)
    old, new = ring.assignment(), moved_ring.assignment()
    changed = np.flatnonzero(old != new)
    assert set(old[changed]) | set(new[changed]) <= {ring.nodes[mover], ring.nodes[before_node]}


@settings(max_examples=80, deadline=None)
@given(rings())
def test_adding_a_node_moves_key_groups_from_one_node_to_it_only(case):
    ring, load = case
    if all(len(ring.arc(p)) < 2 for p in range(len(ring.nodes))):
        with pytest.raises(PlanError):
            add_node(ring, 99, load)
        return
    grown = add_node(ring, 99, load)
    old, new = ring.assignment(), grown.assignment()
    changed = np.flatnonzero(old != new)
    assert len(changed) >= 1 and set(new[changed]) == {99}
    assert len(set(old[changed])) == 1  # one node's arc is split, nobody else's changes
    # range routing rescaled from n to n + 1 partitions moves far more (about half of all)
    n, k = len(ring.nodes), ring.num_key_groups
    assert len(changed) <= k - (n - 1)


@settings(max_examples=80, deadline=None)
@given(rings(), st.data())
def test_removing_a_node_moves_only_its_key_groups_all_to_one_neighbour(case, data):
    ring, _ = case
    if len(ring.nodes) < 2:
        return
    node = int(data.draw(st.sampled_from(ring.nodes.tolist())))
    shrunk = remove_node(ring, node)
    old, new = ring.assignment(), shrunk.assignment()
    changed = np.flatnonzero(old != new)
    assert changed.tolist() == np.flatnonzero(old == node).tolist()
    assert len(set(new[changed])) == 1
    assert arcs_are_contiguous(new)


@settings(max_examples=60, deadline=None)
@given(rings(), st.integers(0, 12), st.one_of(st.none(), st.floats(0.0, 20.0)))
def test_ring_balancing_keeps_a_ring_and_the_budget_and_never_worsens_the_variance(case, max_count, max_cost):
    ring, load = case
    problem = BalancingProblem(load=load, state_bytes=np.ones(len(load)), assignment=ring.assignment(), nodes=np.sort(ring.nodes))
    budget = MigrationBudget(max_cost=max_cost, max_count=max_count)
    plan = ring_balance(problem, budget)
    check_plan(problem, plan, budget)
    assert TokenRing.from_assignment(plan.assignment, problem.nodes) is not None
    var = lambda a: np.var(np.bincount(problem.node_index(a), weights=load, minlength=problem.num_nodes))  # noqa: E731
    assert var(plan.assignment) <= var(problem.assignment) + 1e-6 * max(1.0, var(problem.assignment))


def test_ring_balancing_relieves_a_hot_node_through_its_neighbours():
    # node 0 holds the hot arc; its neighbours take the ends of it, and node 2, busy after
    # taking over from node 1, passes load on round the ring (the thesis's cascade)
    load = np.array([1.0] * 24)
    load[:6] = 10.0
    problem = BalancingProblem(load=load, state_bytes=np.ones(24), assignment=range_routing(24, 4), nodes=np.arange(4))
    plan = ring_balance(problem, MigrationBudget(max_count=24))
    assert plan.load_distance < 0.5 * load_distance(problem)
    assert arcs_are_contiguous(plan.assignment)


def test_a_table_that_is_no_ring_is_left_alone():
    problem = BalancingProblem(load=[5, 1, 5, 1], state_bytes=np.ones(4), assignment=[0, 1, 0, 1], nodes=[0, 1])
    plan = ring_balance(problem, MigrationBudget(max_count=4))
    assert plan.status == "not a ring" and not plan.migrations


def test_ring_and_milp_on_the_same_skewed_workload():
    """The ring trades balance for locality: it moves key groups only across arc boundaries
    (every partition keeps one arc), where the MILP may pick any key group of any node, so
    on a Zipf workload the MILP balances at least as well, and the ring moves no more."""
    rng = np.random.default_rng(7)
    k, n = 128, 4
    load = rng.zipf(1.6, k).clip(max=40).astype(float)
    problem = BalancingProblem(
        load=load, state_bytes=np.full(k, 1e6), assignment=range_routing(k, n), nodes=np.arange(n), cost_per_byte=1e-7
    )
    budget = MigrationBudget(max_count=16)
    ring_plan = ring_balance(problem, budget)
    milp_plan = solve_milp(problem, budget, MilpSettings(time_limit=5.0))
    assert ring_plan.load_distance < load_distance(problem)
    assert milp_plan.load_distance <= ring_plan.load_distance + 1e-9
    assert arcs_are_contiguous(ring_plan.assignment)
    sources = {(m.source, m.target) for m in ring_plan.migrations}
    order = {p: i for i, p in enumerate(np.argsort(TokenRing.from_assignment(problem.assignment, problem.nodes).tokens))}
    for source, target in sources:  # only between ring neighbours (as the ring was before the round)
        assert (order[source] - order[target]) % n in (1, n - 1)


def test_the_ring_policy_moves_tokens_from_recorded_metrics():
    """The live policy on recorded batches: a routing action whose table is still a ring."""
    from tests.control.test_control_balancing import HOT, K, _view, batch, plan_with

    from sluice.control import RingBalancing, build_policies

    view = _view([batch(i, HOT) for i in range(2)], plan_with(range_routing(K, 2)))
    (action,) = RingBalancing(window=2).propose(view)
    assert action.kind == "routing" and action.target == "agg" and "ring" in action.reason
    assert TokenRing.from_assignment(action.value, [0, 1]) is not None
    assert action.expected["load_distance"] < action.expected["load_distance_before"]
    (policy,) = build_policies(["ring_balancing"])
    assert isinstance(policy, RingBalancing)
    free = plan_with([0, 1, 0, 1, 0, 1, 0, 1])  # a table another policy made: not a ring, left alone
    assert RingBalancing(window=2).propose(_view([batch(i, HOT) for i in range(2)], free)) == []
