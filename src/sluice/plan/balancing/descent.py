"""Greedy descent on the MILP's own objective: the MILP's warm start.

From the start placement (units where they are, pinned units on their pin), repeatedly make
the single unit move that lowers eps - alpha * (eps_u + eps_l) + tie-break the most (then
the spread of utilizations around L-bar, or zero for N_r, to cross plateaus), while
the budget allows; each unit moves at most once (its cost is counted from where it is now).
Every candidate move is scored at once with numpy: a move changes two nodes, so the new
extremes are those two nodes against the best of the other nodes (the top three values
suffice to exclude any two nodes).

At scale (hundreds of nodes) scoring every (unit, node) pair each step is what costs: a
step then scores moves to the ``max_targets`` least utilized nodes only (a move's best
target is almost always among them: it lowers the maximum by taking load off the fullest
node and puts it where the most room is), and the descent stops at ``deadline`` with the
placement it has (each step keeps the budget, so any prefix is a valid start).
"""

from __future__ import annotations

import time

import numpy as np

from sluice.plan.balancing.model import MigrationBudget
from sluice.plan.balancing.units import UnitModel


def _best_excluding(values: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """max(values[j] for j not in {a, b}), for arrays of (a, b) pairs."""
    if len(values) < 3:
        values = np.concatenate([values, np.full(3 - len(values), -np.inf)])
    top = np.argsort(-values, kind="stable")[:3]
    out = np.full(np.broadcast(a, b).shape, values[top[2]])
    for idx in (top[1], top[0]):  # the highest free one wins, so write it last
        free = (a != idx) & (b != idx)
        out = np.where(free, values[idx], out)
    return out


def greedy_descent(
    um: UnitModel, budget: MigrationBudget, alpha: float, deadline: float | None = None, max_targets: int | None = None
) -> np.ndarray | None:
    if um.start is None:
        return None
    place = um.start.copy()
    units = np.arange(um.num_units)
    spent_cost = float(um.move_cost[units, place].sum())
    spent_count = int(um.move_count[units, place].sum())
    if not budget.allows(spent_cost, spent_count):
        return None  # the pins alone exceed the budget
    w, mean, staying = um.capacity, um.mean, ~um.removing
    load = np.bincount(place, weights=um.unit_load, minlength=um.num_nodes)
    unit_res, resource_cap = um.unit_res, um.resource_cap  # given together, or neither
    res = None
    if unit_res is not None and resource_cap is not None:
        res = np.zeros((um.num_nodes, unit_res.shape[1]))
        np.add.at(res, place, unit_res)
        if (res > resource_cap + 1e-9).any():
            return None  # the start breaks a resource cap: no greedy start
    movable = um.allowed.sum(axis=1) > 1
    target = np.where(staying, 0.0, -mean)  # in deviations from L-bar
    drained_count = float(um.drain_count[units, place].sum())
    drained_cost = float(um.drain_cost[units, place].sum())
    current = um.objective(place, alpha)
    tie_now = um.tie_cost[units, place]
    everywhere = max_targets is None or um.num_nodes <= max_targets
    while deadline is None or time.perf_counter() < deadline:
        if everywhere:
            cols = np.arange(um.num_nodes)
        else:  # the least utilized nodes that stay (moves into N_r are not allowed anyway)
            cols = np.argsort(np.where(staying, load / w, np.inf), kind="stable")[:max_targets]
        col_of = np.full(um.num_nodes, -1)
        col_of[cols] = np.arange(len(cols))
        cand = movable[:, None] & um.allowed[:, cols]
        here = col_of[place]
        cand[units[here >= 0], here[here >= 0]] = False
        extra_cost = um.move_cost[:, cols] - um.move_cost[units, place][:, None]
        extra_count = um.move_count[:, cols] - um.move_count[units, place][:, None]
        if budget.max_cost is not None:
            cand &= spent_cost + extra_cost <= budget.max_cost + 1e-9 * max(1.0, budget.max_cost)
        if budget.max_count is not None:
            cand &= spent_count + extra_count <= budget.max_count
        if res is not None and unit_res is not None and resource_cap is not None:
            cand &= (res[None, cols, :] + unit_res[:, None, :] <= resource_cap[None, cols, :] + 1e-9).all(axis=2)
        draining = drained_count < um.required_drain_count - 1e-9 or drained_cost < um.required_drain_cost - 1e-9
        if draining:  # first meet the drain pace row, with the best moves out of N_r
            extra_drain = um.drain_count[:, cols] - um.drain_count[units, place][:, None]
            extra_drain_cost = um.drain_cost[:, cols] - um.drain_cost[units, place][:, None]
            cand &= (extra_drain > 0) | (extra_drain_cost > 0)
        u_idx, c_idx = np.nonzero(cand)
        if len(u_idx) == 0:
            break
        n_idx = cols[c_idx]
        s_idx = place[u_idx]
        moved = um.unit_load[u_idx]
        util = load / w - mean
        new_s = (load[s_idx] - moved) / w[s_idx] - mean
        new_n = (load[n_idx] + moved) / w[n_idx] - mean
        upper = np.maximum(_best_excluding(util, s_idx, n_idx), np.maximum(new_s, new_n))
        low_vals = np.where(staying, -util, -np.inf)
        lower = np.maximum(
            _best_excluding(low_vals, s_idx, n_idx),
            np.maximum(np.where(staying[s_idx], -new_s, -np.inf), np.where(staying[n_idx], -new_n, -np.inf)),
        )
        eps = np.maximum(np.maximum(upper, lower), 0.0)
        eps_u = np.minimum(eps, eps - upper)
        eps_l = np.minimum(eps, eps - lower)
        tie = tie_now.sum() - tie_now[u_idx] + um.tie_cost[u_idx, n_idx]
        score = eps - alpha * (eps_u + eps_l) + tie
        # Lexicographic: the objective, then the spread sum_n L_n^2 / w_n. The second key
        # crosses plateaus the max-based objective cannot see (five nodes equally overloaded:
        # relieving one alone leaves eps and eps_u unchanged).
        # Spread around each node's target: L-bar for N_s, zero for N_r (it is to be emptied).
        spread = w[s_idx] * ((new_s - target[s_idx]) ** 2 - (util[s_idx] - target[s_idx]) ** 2) + w[n_idx] * (
            (new_n - target[n_idx]) ** 2 - (util[n_idx] - target[n_idx]) ** 2
        )
        tol = 1e-6 * max(1.0, mean)
        near = score <= score.min() + tol
        best = int(np.flatnonzero(near)[np.argmin(spread[near])])
        improves = score[best] < current - tol or (score[best] <= current + tol and spread[best] < -tol)
        if not draining and not improves:
            break
        u, s, n = u_idx[best], s_idx[best], n_idx[best]
        spent_cost += float(extra_cost[u, c_idx[best]])
        spent_count += int(extra_count[u, c_idx[best]])
        drained_count += float(um.drain_count[u, n] - um.drain_count[u, place[u]])
        drained_cost += float(um.drain_cost[u, n] - um.drain_cost[u, place[u]])
        load[s] -= um.unit_load[u]
        load[n] += um.unit_load[u]
        if res is not None and unit_res is not None:
            res[s] -= unit_res[u]
            res[n] += unit_res[u]
        place[u] = n
        tie_now[u] = um.tie_cost[u, n]
        movable[u] = False  # each unit moves at most once
        current = float(score[best])
    if drained_count < um.required_drain_count - 1e-9 or drained_cost < um.required_drain_cost - 1e-9:
        return None  # could not meet the drain pace greedily; let the solver search
    return place
