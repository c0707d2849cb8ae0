"""PoTC, "the power of both choices" (Nasir et al., ICDE 2015), as a load model.

Each key group has two candidate nodes from two hash functions; every tuple goes to the
candidate that is less loaded at that moment, so a key group's state is split over two nodes
and must be merged before the final result: a merge that costs work on the key group's
first node and that cannot itself be balanced (ALBIC paper, sections 2.2 and 5.2.1).

PoTC never migrates state, so it has no routing table: the result is the split of each key
group's load between its two nodes and the node loads that follow, merge work included.
Tuples are simulated as ``chunks`` equal slices of each key group's load, interleaved at
random, each sent to the candidate with the lower utilization (sources here know the true
loads, which flatters PoTC a little).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sluice.errors import PlanError
from sluice.plan.balancing.model import BalancingProblem


@dataclass(frozen=True)
class PotcResult:
    first: np.ndarray  # node position of each key group's first choice (where the merge runs)
    second: np.ndarray  # node position of its second choice
    share_first: np.ndarray  # fraction of each key group's tuples sent to its first choice
    node_load: np.ndarray  # absolute load per node, merge work included
    merge_load: float  # total merge work added
    load_distance: float


def hash_choices(num_key_groups: int, num_nodes: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two distinct pseudo-random nodes per key group (stable for a given seed)."""
    if num_nodes < 2:
        raise PlanError("PoTC needs at least two nodes")
    rng = np.random.default_rng(seed)
    first = rng.integers(0, num_nodes, num_key_groups)
    second = (first + rng.integers(1, num_nodes, num_key_groups)) % num_nodes
    return first, second


def potc(problem: BalancingProblem, merge_cost: float = 0.1, chunks: int = 20, seed: int = 0) -> PotcResult:
    """Split each key group over its two hash choices; merge work = merge_cost * L_k on the first.

    Only nodes of N_s are used (PoTC has no notion of draining; the hash functions range over
    the nodes that stay).
    """
    staying = np.flatnonzero(~problem.removing)
    first_s, second_s = hash_choices(problem.num_key_groups, len(staying), seed)
    first, second = staying[first_s], staying[second_s]
    w = problem.capacity
    loads = np.zeros(problem.num_nodes)
    to_first = np.zeros(problem.num_key_groups)
    rng = np.random.default_rng(seed + 1)
    slices = rng.permutation(np.repeat(np.arange(problem.num_key_groups), chunks))
    piece = problem.load / chunks
    for k in slices:
        a, b = first[k], second[k]
        target = a if loads[a] / w[a] <= loads[b] / w[b] else b
        loads[target] += piece[k]
        if target == a:
            to_first[k] += piece[k]
    share = np.divide(to_first, problem.load, out=np.ones_like(to_first), where=problem.load > 0)
    split = (share > 0) & (share < 1)
    merge = merge_cost * problem.load * split
    loads += np.bincount(first, weights=merge, minlength=problem.num_nodes)
    util = loads / w
    mean = loads.sum() / w[staying].sum()
    return PotcResult(first, second, share, loads, float(merge.sum()), float(np.abs(util[staying] - mean).max()))
