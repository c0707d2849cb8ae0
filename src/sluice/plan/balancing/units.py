"""The balancing problem seen per *unit*: what the MILP and its greedy start both work on.

A unit is an indivisible set of key groups (one key group for the plain MILP, a partition
of collocated key groups for ALBIC). Per (unit, node) we precompute what putting the unit
there costs: the migration cost and count of its members that are not there yet, and the
tiny tie-break cost of milp.py (moves out of N_s cost, moves out of N_r earn).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from sluice.errors import PlanError
from sluice.plan.balancing.model import BalancingProblem, MigrationBudget, mean_load


@dataclass
class UnitModel:
    problem: BalancingProblem
    units: list[np.ndarray]
    unit_of: np.ndarray  # (K,) unit of each key group
    unit_load: np.ndarray  # (U,)
    unit_res: np.ndarray | None  # (U, R) other resources
    move_cost: np.ndarray  # (U, N)
    move_count: np.ndarray  # (U, N)
    tie_cost: np.ndarray  # (U, N), objective coefficient of the tie-break
    allowed: np.ndarray  # (U, N) bool
    start: np.ndarray | None  # (U,) node position to start from (pin, or the unit's one node)
    mean: float
    drain_count: np.ndarray  # (U, N) members leaving N_r if the unit goes to n
    drain_cost: np.ndarray  # (U, N) their migration cost
    required_drain_count: float = 0.0  # the drain pace row (milp.py); 0 = no row
    required_drain_cost: float = 0.0

    @property
    def num_units(self) -> int:
        return len(self.units)

    @property
    def num_nodes(self) -> int:
        return self.problem.num_nodes

    @property
    def capacity(self) -> np.ndarray:
        return self.problem.capacity

    @property
    def removing(self) -> np.ndarray:
        return self.problem.removing

    @property
    def resource_cap(self) -> np.ndarray | None:
        return self.problem.resource_cap

    def assignment_of(self, place: np.ndarray) -> np.ndarray:
        """Routing table (node id per key group) of a unit placement (node position per unit)."""
        return self.problem.nodes[place[self.unit_of]]

    def utilization(self, place: np.ndarray) -> np.ndarray:
        return np.bincount(place, weights=self.unit_load, minlength=self.num_nodes) / self.capacity

    def deviations(self, place: np.ndarray) -> tuple[float, float, float]:
        """(eps, eps_u, eps_l) the MILP would choose for this placement (see milp.py)."""
        util = self.utilization(place) - self.mean
        upper = float(util.max())
        lower = float((-util[~self.removing]).max())
        eps = max(upper, lower, 0.0)
        return eps, min(eps, eps - upper), min(eps, eps - lower)

    def objective(self, place: np.ndarray, secondary_weight: float) -> float:
        eps, eps_u, eps_l = self.deviations(place)
        tie = float(self.tie_cost[np.arange(self.num_units), place].sum())
        return eps - secondary_weight * (eps_u + eps_l) + tie


def _per_unit_node_sums(unit_of, node_idx, weights, shape) -> np.ndarray:
    return sp.coo_matrix((weights, (unit_of, node_idx)), shape=shape).toarray()


def required_drain(problem: BalancingProblem, budget: MigrationBudget, drain_share: float) -> tuple[float, float]:
    """What the drain pace row asks of this round: (count, cost) to move out of N_r.

    ``drain_share`` of the budget while N_r holds key groups, capped by what is left there and
    by what one round can reach (cheapest key groups first), so the row never makes the MILP
    infeasible on its own.
    """
    on_removing = problem.removing[problem.assignment_index]
    if drain_share <= 0 or not on_removing.any():
        return 0.0, 0.0
    count = float(on_removing.sum())
    if budget.max_count is not None:
        count = min(count, max(1.0, np.floor(drain_share * budget.max_count)), float(budget.max_count))
    cost = 0.0
    if budget.max_cost is not None:
        costs = np.sort(problem.migration_cost[on_removing])
        reachable = costs[np.cumsum(costs) <= budget.max_cost * (1 + 1e-9)].sum()
        cost = float(min(drain_share * budget.max_cost, reachable))
        count = 0.0 if budget.max_count is None else count
    return count, cost


def unit_model(
    problem: BalancingProblem,
    budget: MigrationBudget,
    units: Sequence[np.ndarray] | None,
    pins: Mapping[int, int],
    forbid_moves_into_removing: bool,
    tie_weight: float,
    drain_share: float = 0.0,
) -> UnitModel:
    k_count, n_count = problem.num_key_groups, problem.num_nodes
    units = [np.array([k]) for k in range(k_count)] if units is None else [np.asarray(u, dtype=np.int64) for u in units]
    u_count = len(units)
    unit_of = np.full(k_count, -1, dtype=np.int64)
    for u, members in enumerate(units):
        if (unit_of[members] >= 0).any():
            raise PlanError(f"balancing units overlap: unit {u} repeats a key group of another unit")
        unit_of[members] = u
    if (unit_of < 0).any():
        raise PlanError(f"balancing units: key group {int(np.flatnonzero(unit_of < 0)[0])} is in no unit")
    cur = problem.assignment_index
    shape = (u_count, n_count)
    cost = problem.migration_cost
    cost_total = np.bincount(unit_of, weights=cost, minlength=u_count)
    size = np.bincount(unit_of, minlength=u_count).astype(float)
    move_cost = cost_total[:, None] - _per_unit_node_sums(unit_of, cur, cost, shape)
    move_count = size[:, None] - _per_unit_node_sums(unit_of, cur, np.ones(k_count), shape)
    from_removing = problem.removing[cur].astype(float)
    out_of_removing = np.bincount(unit_of, weights=from_removing, minlength=u_count)[:, None] - _per_unit_node_sums(
        unit_of, cur, from_removing, shape
    )
    out_of_staying = move_count - out_of_removing
    cost_on_removing = cost * from_removing
    drain_cost = np.bincount(unit_of, weights=cost_on_removing, minlength=u_count)[:, None] - _per_unit_node_sums(
        unit_of, cur, cost_on_removing, shape
    )
    mean = mean_load(problem)
    tie_cost = tie_weight * max(mean, 1e-9) * (out_of_staying - out_of_removing)

    allowed = np.ones(shape, dtype=bool)
    if forbid_moves_into_removing:  # Lemma 1; a unit wholly on a node of N_r may stay there
        allowed &= ~problem.removing[None, :] | (move_count == 0)
    for u, node_id in pins.items():
        n = int(problem.node_index(np.array([node_id]))[0])
        if problem.nodes[n] != node_id:
            raise PlanError(f"balancing: unit {u} is pinned to unknown node {node_id}")
        allowed[u, :] = False
        allowed[u, n] = True
    if not allowed.any(axis=1).all():
        raise PlanError("balancing: a unit has no node it may go to")

    start = np.full(u_count, -1, dtype=np.int64)
    for u, members in enumerate(units):
        here = np.flatnonzero(allowed[u]) if u in pins else np.unique(cur[members])
        if len(here) == 1 and allowed[u, here[0]]:
            start[u] = here[0]
    unit_res = None
    if problem.resource_load is not None:
        unit_res = np.zeros((u_count, problem.resource_load.shape[1]))
        np.add.at(unit_res, unit_of, problem.resource_load)
    return UnitModel(
        problem,
        units,
        unit_of,
        np.bincount(unit_of, weights=problem.load, minlength=u_count),
        unit_res,
        move_cost,
        move_count,
        tie_cost,
        allowed,
        None if (start < 0).any() else start,
        mean,
        out_of_removing,
        drain_cost,
        *required_drain(problem, budget, drain_share),
    )
