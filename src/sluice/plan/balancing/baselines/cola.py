"""COLA (Khandekar et al., Middleware 2009) as a full re-optimization every round.

As the ALBIC paper describes it (section 2.1): all key groups start in one partition, and
partitions are split (balanced graph partitioning with METIS, minimizing the traffic cut)
until packing the partitions onto the nodes gives a sufficient load balance, that is a
load distance <= D_max (the same bound ALBIC uses). We split the heaviest partition in two at
each step, and pack with LPT (largest partition first, onto the least utilized node).

COLA ignores where key groups are now, which is why re-running it each period migrates a
lot (section 5.4). Our one concession to the current placement: the packed bins are matched
to the existing nodes so as to keep the most state in place (an assignment problem), which
only relabels nodes and never changes COLA's load distance or collocation.
"""

from __future__ import annotations

import heapq

import numpy as np
from scipy.optimize import linear_sum_assignment

from sluice.plan.balancing.graph import metis_split, undirected_traffic
from sluice.plan.balancing.model import BalancePlan, BalancingProblem, load_distance, make_plan


def lpt_pack(part_loads: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Bin of each partition: largest first, onto the node with the lowest utilization after adding it."""
    bins = np.empty(len(part_loads), dtype=np.int64)
    heap = [(0.0, i) for i in range(len(capacity))]  # (utilization, bin)
    heapq.heapify(heap)
    for p in np.argsort(-part_loads, kind="stable"):
        util, b = heapq.heappop(heap)
        bins[p] = b
        heapq.heappush(heap, (util + part_loads[p] / capacity[b], b))
    return bins


def cola(problem: BalancingProblem, max_load_distance: float, max_splits: int | None = None) -> BalancePlan:
    staying = np.flatnonzero(~problem.removing)
    traffic = undirected_traffic(problem.num_key_groups, problem.traffic.src, problem.traffic.dst, problem.traffic.rate)
    load = problem.load
    partitions = [np.arange(problem.num_key_groups)]
    limit = max_splits if max_splits is not None else problem.num_key_groups
    best: tuple[list[np.ndarray], np.ndarray, float] | None = None
    for _ in range(limit + 1):
        part_loads = np.array([load[p].sum() for p in partitions])
        bins = lpt_pack(part_loads, problem.capacity[staying])
        assignment = np.empty(problem.num_key_groups, dtype=np.int64)
        for p, b in zip(partitions, bins):
            assignment[p] = problem.nodes[staying[b]]
        distance = load_distance(problem, assignment)
        best = (partitions, bins, distance)
        if distance <= max_load_distance:
            break
        splittable = [i for i, p in enumerate(partitions) if len(p) > 1]
        if not splittable:
            break
        heaviest = max(splittable, key=lambda i: part_loads[i])
        victim = partitions.pop(heaviest)
        partitions.extend(metis_split(victim, load[victim], traffic, 2))
    assert best is not None  # the loop runs at least once
    partitions, bins, _ = best
    assignment = _keep_state_in_place(problem, partitions, bins, staying)
    return make_plan(problem, assignment, status="cola", notes={"partitions": len(partitions)})


def _keep_state_in_place(problem, partitions, bins, staying) -> np.ndarray:
    """Relabel bins as nodes to maximize the state that does not move (Hungarian method)."""
    n_s = len(staying)
    bin_of = np.empty(problem.num_key_groups, dtype=np.int64)
    for p, b in zip(partitions, bins):
        bin_of[p] = b
    cur = problem.assignment_index
    kept = np.zeros((n_s, problem.num_nodes))
    np.add.at(kept, (bin_of, cur), problem.state_bytes)
    kept = kept[:, staying]
    # Heterogeneous nodes: a bin was packed for a node's capacity; only same-capacity swaps keep it.
    same_capacity = np.isclose(problem.capacity[staying][:, None], problem.capacity[staying][None, :])
    score = np.where(same_capacity, kept, -1e18)
    rows, cols = linear_sum_assignment(score, maximize=True)
    node_of_bin = np.empty(n_s, dtype=np.int64)
    node_of_bin[rows] = staying[cols]
    return problem.nodes[node_of_bin[bin_of]]
