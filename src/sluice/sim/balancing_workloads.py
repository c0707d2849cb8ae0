"""Synthetic key-group workloads of the ALBIC paper, sections 5.1 and 5.3.

The paper's ranges were lost in extraction; the constants below are our choices (each says
so). Loads are percentage points of an average node.

Section 5.1: key groups evenly allocated; each key group's load is the mean adjusted by a
random percentage; then a fraction of the nodes ("varies") is perturbed, half of them down
and half up, by changing the load of a random set of key groups on each such node.

Section 5.3: a chain of operators whose key groups talk to the next operator's key groups;
a fraction of the key groups send one-to-one (all their output to one downstream key group,
so collocating the pair removes that traffic from the network), the others send evenly to
every downstream key group (full partitioning, little to gain from collocation). That
fraction is the maximum obtainable collocation factor. Every round, the load of 20 % of the
nodes is adjusted by a random percentage.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sluice.plan.balancing.model import BalancingProblem, Traffic

NODE_MEAN_LOAD = 50.0  # our choice: nodes start half busy, so +-30 % perturbations fit
KEY_GROUP_JITTER = 0.20  # our choice for the lost range: each key group's load is mean * (1 +- U(0.2))
NODE_PERTURBATION = 0.30  # our choice for the lost value: perturbed nodes get -30 % / +30 % load
ROUND_PERTURBATION = 0.30  # section 5.3: per round, 20 % of the nodes move by U(-30 %, +30 %)
STATE_BYTES = (1e6, 10e6)  # state size per key group, uniform; cost_per_byte = 1e-7 s/byte


def even_assignment(num_key_groups: int, nodes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each node gets the same number of key groups (within one), in random order."""
    slots = np.resize(np.asarray(nodes), num_key_groups)
    return rng.permutation(slots)


def perturb_nodes(
    load: np.ndarray,
    assignment: np.ndarray,
    nodes: np.ndarray,
    fraction: float,
    change: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """Section 5.1: ``fraction`` of the nodes change load, half by -change, half by +change.

    A node's change is put on a random half of its key groups (the paper: "a randomly selected
    set of key groups on a node"), in proportion to their load.
    """
    load = load.copy()
    picked = rng.choice(nodes, size=round(fraction * len(nodes)), replace=False)
    for i, node in enumerate(picked):
        sign = -1.0 if i % 2 == 0 else 1.0
        on_node = np.flatnonzero(assignment == node)
        if len(on_node) == 0:
            continue
        chosen = rng.choice(on_node, size=max(1, len(on_node) // 2), replace=False)
        delta = sign * change * load[on_node].sum()
        load[chosen] = np.maximum(load[chosen] + delta * load[chosen] / load[chosen].sum(), 0.0)
    return load


def solver_workload(
    num_nodes: int,
    num_key_groups: int,
    perturbed_fraction: float,
    seed: int = 0,
    node_mean_load: float = NODE_MEAN_LOAD,
) -> BalancingProblem:
    """One instance of section 5.1's solver experiment."""
    rng = np.random.default_rng(seed)
    nodes = np.arange(num_nodes)
    assignment = even_assignment(num_key_groups, nodes, rng)
    mean = node_mean_load * num_nodes / num_key_groups
    load = mean * (1.0 + rng.uniform(-KEY_GROUP_JITTER, KEY_GROUP_JITTER, num_key_groups))
    load = perturb_nodes(load, assignment, nodes, perturbed_fraction, NODE_PERTURBATION, rng)
    return BalancingProblem(
        load=load,
        state_bytes=rng.uniform(*STATE_BYTES, num_key_groups),
        assignment=assignment,
        nodes=nodes,
        cost_per_byte=1e-7,
    )


def scale_in_workload(
    num_nodes: int,
    num_key_groups: int,
    num_removing: int,
    num_overloaded: int,
    seed: int = 0,
) -> BalancingProblem:
    """Section 5.1's scale-in experiment: ``num_removing`` nodes of N_r, ``num_overloaded`` nodes at 100 %.

    The overloaded nodes are taken from the nodes that stay (an overloaded node about to be
    removed would be drained anyway) and are brought to 100 % load by scaling their key groups.
    """
    problem = solver_workload(num_nodes, num_key_groups, 0.0, seed)
    rng = np.random.default_rng(seed + 1)
    removing = np.zeros(num_nodes, bool)
    removing[rng.choice(num_nodes, size=num_removing, replace=False)] = True
    overloaded = rng.choice(np.flatnonzero(~removing), size=num_overloaded, replace=False)
    load = problem.load.copy()
    for node in overloaded:
        on_node = problem.assignment == node
        load[on_node] *= 100.0 / load[on_node].sum()
    return BalancingProblem(
        load=load,
        state_bytes=problem.state_bytes,
        assignment=problem.assignment,
        nodes=problem.nodes,
        removing=removing,
        cost_per_byte=problem.cost_per_byte,
    )


@dataclass(frozen=True)
class CollocationWorkload:
    """Section 5.3's job: operators in a chain, key groups with one-to-one or full partitioning."""

    base_load: np.ndarray
    problem: BalancingProblem  # round 0, with the initial (random, even) assignment

    def next_round(self, assignment: np.ndarray, rng: np.random.Generator, fraction: float = 0.2) -> BalancingProblem:
        """Statistics of the next period: 20 % of the nodes see their key groups' load change."""
        nodes = self.problem.nodes
        factor = np.ones(len(self.base_load))
        for node in rng.choice(nodes, size=max(1, round(fraction * len(nodes))), replace=False):
            factor[assignment == node] = 1.0 + rng.uniform(-ROUND_PERTURBATION, ROUND_PERTURBATION)
        p = self.problem
        return BalancingProblem(
            load=self.base_load * factor,
            state_bytes=p.state_bytes,
            assignment=assignment,
            nodes=nodes,
            traffic=p.traffic,
            operator=p.operator,
            cost_per_byte=p.cost_per_byte,
        )


def collocation_workload(
    num_nodes: int,
    num_key_groups: int,
    num_operators: int,
    one_to_one_fraction: float = 0.5,
    seed: int = 0,
) -> CollocationWorkload:
    """Section 5.3: ``one_to_one_fraction`` is the maximum obtainable collocation factor."""
    rng = np.random.default_rng(seed)
    per_op = num_key_groups // num_operators
    k = per_op * num_operators
    operator = np.repeat(np.arange(num_operators), per_op)
    mean = NODE_MEAN_LOAD * num_nodes / k
    load = mean * (1.0 + rng.uniform(-KEY_GROUP_JITTER, KEY_GROUP_JITTER, k))
    out_rate = 100.0 * load / mean  # tuples/s, in proportion to the work done
    src: list[np.ndarray] = []
    dst: list[np.ndarray] = []
    rate: list[np.ndarray] = []
    for op in range(num_operators - 1):
        ups = np.arange(op * per_op, (op + 1) * per_op)
        downs = np.arange((op + 1) * per_op, (op + 2) * per_op)
        one_to_one = rng.random(per_op) < one_to_one_fraction
        targets = rng.permutation(downs)
        for i, up in enumerate(ups):
            if one_to_one[i]:
                src.append(np.array([up]))
                dst.append(np.array([targets[i]]))
                rate.append(np.array([out_rate[up]]))
            else:
                src.append(np.full(per_op, up))
                dst.append(downs)
                rate.append(np.full(per_op, out_rate[up] / per_op))
    traffic = Traffic(np.concatenate(src).astype(np.int64), np.concatenate(dst).astype(np.int64), np.concatenate(rate))
    nodes = np.arange(num_nodes)
    problem = BalancingProblem(
        load=load,
        state_bytes=rng.uniform(*STATE_BYTES, k),
        assignment=even_assignment(k, nodes, rng),
        nodes=nodes,
        traffic=traffic,
        operator=operator,
        cost_per_byte=1e-7,
    )
    return CollocationWorkload(base_load=load, problem=problem)
