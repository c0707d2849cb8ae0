"""The MILP load balancer of section 4.3.1, solved with HiGHS.

RECONSTRUCTION. The paper's MILP rows were lost in extraction; only their prose survived
("Constraint (1) ensures ... (5) ..."). The rows below are rebuilt from that prose and from
the proofs of Lemma 1 and Lemma 4.2. With x'_{k,n} = 1 iff key group k goes to node n,
x_{k,n} its current placement, w_n the capacity weight, r_n = 1 iff n is in N_r, and
L-bar = sum_k L_k / sum_{n in N_s} w_n:

    min   eps - alpha * (eps_u + eps_l)                                         (objective)
    (1)   sum_n x'_{k,n} = 1                                for every key group k
    (2)   sum_k sum_n m_k * x'_{k,n} * (1 - x_{k,n}) <= maxMigrCost       (and/or a count)
    (3)   sum_k L_k x'_{k,n} <= w_n * (L-bar + eps - eps_u) for every node n
    (4)   sum_k L_k x'_{k,n} >= (1 - r_n) * w_n * (L-bar - eps + eps_l)   for every node n
    (5)   0 <= eps_u <= eps,  0 <= eps_l <= eps

Choices and why:
* (2) is linear because x is a constant; a key group costs m_k only if it leaves its node.
* (5): the prose says (5) keeps eps_l from pushing the lower bound past L-bar; we bound both
  slacks by eps, which keeps the upper bound >= L-bar >= the lower bound.
* alpha (the lost "w1 >> w2" constants): 1e-3. For alpha < 1/2 the LP always sets eps to the
  assignment's load distance, so eps is minimized first; maximizing eps_u + eps_l then
  minimizes the spread (max - min utilization) among plans of (almost) equal eps.
* A third, tiny tie-break (gamma, 1e-7 of L-bar per migration) that the paper does not have:
  it penalizes migrations out of N_s and rewards migrations out of N_r. It only decides
  between plans with equal eps, eps_u and eps_l: it stops pointless moves, and makes the
  drain of N_r proceed at the budget's pace when draining is neutral for eps (Lemma 4.2 only
  says the *final* optimum has N_r empty).
* Moves *into* N_r are not offered to the solver. Lemma 1 argues they are never preferred;
  with whole key groups that is not exactly true of the reconstructed model (hypothesis found
  e.g. one key group of load 18 on a node of capacity 1, two empty nodes of capacity 1 and an
  N_r node of capacity 2: parking it on the N_r node gives eps 6 instead of 12; and ties on
  eps can be broken toward N_r by eps_u). Forbidding them makes Lemma 1 hold by construction
  (also for time-limited plans) and shrinks the model; the tests compare the MILP with brute
  force over the same moves and keep those counterexamples as fixtures.
* Drain pace (our addition). Lemma 4.2 holds for finely divisible load only: with whole key
  groups the eps-optimum may keep the last ones on N_r. Example: 4 nodes with two key groups
  of load 1 each and one more on a node of N_r: L-bar = 2.25, eps = 0.25 if it stays, 0.75
  if it moves, so the pure MILP never drains it. While N_r holds key groups we therefore add
  a row "at least ``drain_share`` of the budget (count or cost) moves out of N_r" (capped by
  what is left and reachable), so N_r drains within ceil(K_r / (drain_share * B)) rounds
  and the rest of the budget stays free for urgent balancing (integrated scale-in).
  ``drain_share=0`` gives the paper's pure MILP.
* Heterogeneous nodes: L-bar multiplied by w_n in (3) and (4), as in the paper.
* Multi-dimensional load: optional rows sum_k R_{k,r} x'_{k,n} <= cap_{n,r}.
* Warm start: HiGHS's own heuristics find poor incumbents on this model within seconds (the
  LP relaxation splits key groups and says almost nothing), where the paper's CPLEX did well.
  So the solver starts from a greedy descent on the same objective (descent.py); the MILP
  can only improve on it, and the time limit covers both. Above ``full_model_columns``
  (unit x node) columns, the MILP is solved exactly on rotating neighbourhoods of the
  incumbent instead of whole (large-neighbourhood search, see _neighbourhood_search).

ALBIC reuses this model with *units* (indivisible sets of collocated key groups) in place of
single key groups, and with *pins* (a unit forced onto a node).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import highspy
import numpy as np
import scipy.sparse as sp

from sluice.errors import PlanError
from sluice.plan.balancing.descent import greedy_descent
from sluice.plan.balancing.model import BalancePlan, BalancingProblem, MigrationBudget, make_plan
from sluice.plan.balancing.units import UnitModel, unit_model

_BANNER_LOCK = threading.Lock()
_BANNER = {"shown": False}  # HiGHS printed (or was kept from printing) its banner in this process


def quiet_highs() -> highspy.Highs:
    """A HiGHS solver that prints nothing. HiGHS prints its copyright banner to the process's
    stdout (from C++, so Python cannot catch it) the first time a process makes a solver,
    before any option can turn it off: that first one is made with stdout pointed at
    /dev/null for the instant it takes."""
    with _BANNER_LOCK:
        if _BANNER["shown"]:
            h = highspy.Highs()
        else:
            sys.stdout.flush()
            saved = os.dup(1)
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, 1)
                h = highspy.Highs()
            finally:
                os.dup2(saved, 1)
                os.close(saved)
                os.close(devnull)
            _BANNER["shown"] = True
    h.setOptionValue("output_flag", False)
    h.setOptionValue("log_to_console", False)
    return h


@dataclass(frozen=True)
class MilpSettings:
    """Solver knobs. ``time_limit`` seconds; the best plan found by then is returned."""

    time_limit: float = 5.0
    mip_rel_gap: float = 1e-4
    secondary_weight: float = 1e-3  # alpha: eps first, then eps_u + eps_l
    tie_weight: float = 1e-7  # gamma, times L-bar per migration (see module docstring)
    forbid_moves_into_removing: bool = True
    drain_share: float = 0.5  # drain pace row, see the module docstring; 0 = the paper's pure MILP
    full_model_columns: int = 4000  # above this, solve by neighbourhood search (see _neighbourhood_search)
    neighbourhood_nodes: int = 6
    descent_targets: int = 32  # above this many nodes, the greedy start scores moves to the least utilized ones


def solve_milp(
    problem: BalancingProblem,
    budget: MigrationBudget,
    settings: MilpSettings = MilpSettings(),
    units: Sequence[np.ndarray] | None = None,
    pins: Mapping[int, int] | None = None,
) -> BalancePlan:
    """Balance ``problem`` under ``budget``; returns the new routing table and its migrations.

    ``units`` partitions the key groups into indivisible sets (default: one per key group);
    ``pins`` maps a unit's index to the node id it must end on. The whole call (greedy start,
    model building, solving) stays within ``settings.time_limit`` plus HiGHS's own overshoot;
    on time-out the best plan found is returned (``status`` says so).
    Raises PlanError when the constraints admit no plan (e.g. a pin beyond the budget).
    """
    started = time.perf_counter()
    deadline = started + settings.time_limit
    um = unit_model(
        problem,
        budget,
        units,
        pins or {},
        settings.forbid_moves_into_removing,
        settings.tie_weight,
        settings.drain_share,
    )
    start = greedy_descent(um, budget, settings.secondary_weight, deadline, settings.descent_targets)
    large = int(um.allowed.sum()) > settings.full_model_columns
    place: np.ndarray | None
    if large and start is not None:
        place, status, gap = _neighbourhood_search(um, budget, settings, start, deadline)
    else:
        place, status, gap = _solve(um, budget, settings, um.allowed, start, deadline)
        if place is None:
            place = start  # HiGHS stopped before accepting anything: the greedy plan stands
    if place is None:
        if status == "infeasible":
            raise PlanError(
                f"MILP balancer: infeasible for {problem.num_key_groups} key groups on {problem.num_nodes} nodes "
                f"(budget {budget}, {len(pins or {})} pins, resource caps: {problem.resource_cap is not None})"
            )
        raise PlanError(f"MILP balancer: no plan within {settings.time_limit} s (HiGHS: {status})")
    return make_plan(
        problem,
        um.assignment_of(place),
        status=status,
        solve_seconds=time.perf_counter() - started,
        notes={
            "objective": um.objective(place, settings.secondary_weight),
            "start_objective": None if start is None else um.objective(start, settings.secondary_weight),
            "start_load_distance": None if start is None else um.deviations(start)[0],
            "mip_gap": gap,
            "neighbourhood_search": bool(large and start is not None),
        },
    )


def _solve(um: UnitModel, budget, settings, allowed, start, deadline) -> tuple[np.ndarray | None, str, float]:
    """One HiGHS run on the columns ``allowed``; returns (placement or None, status, gap)."""
    lp, col_unit, col_node = _build_lp(um, budget, settings, allowed)
    h = quiet_highs()
    h.setOptionValue("time_limit", float(max(deadline - time.perf_counter(), 0.05)))
    h.setOptionValue("mip_rel_gap", float(settings.mip_rel_gap))
    h.setOptionValue("threads", 1)
    h.passModel(lp)
    if start is not None:
        h.setSolution(lp.num_col_, np.arange(lp.num_col_, dtype=np.int32), _columns_of(um, start, col_unit, col_node))
    h.run()
    status = h.getModelStatus()
    solution = np.asarray(h.getSolution().col_value)
    name = "optimal" if status == highspy.HighsModelStatus.kOptimal else h.modelStatusToString(status).lower()
    if status == highspy.HighsModelStatus.kInfeasible:
        return None, "infeasible", float("inf")
    if h.getInfo().primal_solution_status != 2 or len(solution) != lp.num_col_:
        return None, name, float("inf")
    return _decode(um, solution, col_unit, col_node), name, float(h.getInfo().mip_gap)


def _neighbourhood_search(um: UnitModel, budget, settings, start, deadline) -> tuple[np.ndarray, str, float]:
    """Large models: repeatedly solve the MILP exactly on a neighbourhood of the incumbent.

    HiGHS cannot improve a large model's greedy start within seconds (its LP bound is ~0, so
    it searches blind). Restricted to the ``neighbourhood_nodes`` most over- and under-loaded
    nodes of the incumbent, the MILP is small and solves to optimality in a fraction of a
    second: units on those nodes may go to any of them (or back home); every other unit may
    only stay or go back to where it is now. All rows (budget, bounds, drain pace, caps) are
    the full model's, so every incumbent is a plan of the full MILP. Neighbourhoods rotate at
    random among the extreme nodes until the time limit or until several fail in a row.
    """
    rng = np.random.default_rng(0)
    place = start
    best = um.objective(place, settings.secondary_weight)
    failures, rounds = 0, 0
    while deadline - time.perf_counter() > 0.2 and failures < 10:
        allowed = _neighbourhood(um, place, settings.neighbourhood_nodes, rng, rounds)
        rounds += 1
        candidate, _, _ = _solve(um, budget, settings, allowed, place, min(deadline, time.perf_counter() + 1.0))
        if candidate is not None:
            value = um.objective(candidate, settings.secondary_weight)
            if value < best - 1e-9 * max(1.0, abs(best)):
                place, best, failures = candidate, value, 0
                continue
        failures += 1
    status = "time limit reached" if deadline - time.perf_counter() <= 0.2 else "neighbourhood optimal"
    return place, status, float("nan")


def _neighbourhood(um: UnitModel, place: np.ndarray, size: int, rng: np.random.Generator, round_: int) -> np.ndarray:
    util = um.utilization(place) - um.mean
    staying = ~um.removing
    half = max(1, size // 2)
    pool = 2 * half if round_ else half  # first round: the most extreme; then random among the top
    over = np.argsort(-util, kind="stable")[:pool]
    under_order = np.argsort(np.where(staying, util, np.inf), kind="stable")
    under = under_order[: min(pool, int(staying.sum()))]
    chosen = np.concatenate([rng.permutation(over)[:half], rng.permutation(under)[:half], np.flatnonzero(um.removing)])
    in_hood = np.zeros(um.num_nodes, bool)
    in_hood[chosen] = True
    units = np.arange(um.num_units)
    home = np.zeros_like(um.allowed)
    home[units, um.start if um.start is not None else place] = True
    here = np.zeros_like(um.allowed)
    here[units, place] = True
    free = in_hood[place][:, None] & in_hood[None, :]
    return um.allowed & (free | home | here)


def _decode(um: UnitModel, solution: np.ndarray, col_unit: np.ndarray, col_node: np.ndarray) -> np.ndarray:
    """Node position of each unit: the column with the largest value (they are 0/1)."""
    x = solution[: len(col_unit)]
    place = np.zeros(um.num_units, dtype=np.int64)
    order = np.argsort(x, kind="stable")  # ascending: each unit's largest value is written last
    place[col_unit[order]] = col_node[order]
    return place


def _columns_of(um: UnitModel, place: np.ndarray, col_unit, col_node) -> np.ndarray:
    x = (place[col_unit] == col_node).astype(float)
    eps, eps_u, eps_l = um.deviations(place)
    return np.concatenate([x, [eps, eps_u, eps_l]])


def _build_lp(um: UnitModel, budget: MigrationBudget, settings: MilpSettings, allowed: np.ndarray):
    col_unit, col_node = np.nonzero(allowed)
    nx = len(col_unit)
    n_count, u_count = um.num_nodes, um.num_units
    i_eps, i_up, i_lo = nx, nx + 1, nx + 2
    num_col = nx + 3
    w, mean, removing = um.capacity, um.mean, um.removing

    col_cost = np.zeros(num_col)
    col_cost[:nx] = um.tie_cost[col_unit, col_node]
    col_cost[i_eps] = 1.0
    col_cost[i_up] = col_cost[i_lo] = -settings.secondary_weight

    rows, cols, vals, lower, upper = [], [], [], [], []
    row = 0

    def add_rows(r, c, v, lo, hi):
        nonlocal row
        rows.append(np.asarray(r) + row)
        cols.append(np.asarray(c))
        vals.append(np.asarray(v, dtype=float))
        lower.append(np.asarray(lo, dtype=float))
        upper.append(np.asarray(hi, dtype=float))
        row += len(lo)

    xs = np.arange(nx)
    # (1) every unit on exactly one node
    add_rows(col_unit, xs, np.ones(nx), np.ones(u_count), np.ones(u_count))
    # (2) migration budget, by cost and/or by count
    if budget.max_cost is not None:
        add_rows(np.zeros(nx, int), xs, um.move_cost[col_unit, col_node], [-np.inf], [budget.max_cost])
    if budget.max_count is not None:
        add_rows(np.zeros(nx, int), xs, um.move_count[col_unit, col_node], [-np.inf], [budget.max_count])
    # drain pace (our addition, see the module docstring)
    if um.required_drain_count > 0:
        add_rows(np.zeros(nx, int), xs, um.drain_count[col_unit, col_node], [um.required_drain_count], [np.inf])
    if um.required_drain_cost > 0:
        add_rows(np.zeros(nx, int), xs, um.drain_cost[col_unit, col_node], [um.required_drain_cost], [np.inf])
    # (3) upper load bound, every node: L_n - w_n eps + w_n eps_u <= w_n L-bar
    load_vals = um.unit_load[col_unit]
    n_idx = np.arange(n_count)
    add_rows(
        np.concatenate([col_node, n_idx, n_idx]),
        np.concatenate([xs, np.full(n_count, i_eps), np.full(n_count, i_up)]),
        np.concatenate([load_vals, -w, w]),
        np.full(n_count, -np.inf),
        w * mean,
    )
    # (4) lower load bound, N_s only (disabled for N_r): L_n + w_n eps - w_n eps_l >= w_n L-bar
    staying = np.flatnonzero(~removing)
    s_pos = np.full(n_count, -1)
    s_pos[staying] = np.arange(len(staying))
    in_s = ~removing[col_node]
    add_rows(
        np.concatenate([s_pos[col_node[in_s]], np.arange(len(staying)), np.arange(len(staying))]),
        np.concatenate([xs[in_s], np.full(len(staying), i_eps), np.full(len(staying), i_lo)]),
        np.concatenate([load_vals[in_s], w[staying], -w[staying]]),
        w[staying] * mean,
        np.full(len(staying), np.inf),
    )
    # (5) eps_u <= eps, eps_l <= eps
    add_rows([0, 0, 1, 1], [i_up, i_eps, i_lo, i_eps], [1, -1, 1, -1], [-np.inf, -np.inf], [0, 0])
    # optional caps on the other resources
    if um.unit_res is not None and um.resource_cap is not None:  # given together
        for r in range(um.unit_res.shape[1]):
            add_rows(col_node, xs, um.unit_res[col_unit, r], np.full(n_count, -np.inf), um.resource_cap[:, r])

    a = sp.csc_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(row, num_col))
    lp = highspy.HighsLp()
    lp.num_col_ = num_col
    lp.num_row_ = row
    lp.col_cost_ = col_cost
    lp.col_lower_ = np.zeros(num_col)
    col_upper = np.ones(num_col)
    col_upper[nx:] = np.inf
    lp.col_upper_ = col_upper
    lp.row_lower_ = np.concatenate(lower)
    lp.row_upper_ = np.concatenate(upper)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = a.indptr.astype(np.int32)
    lp.a_matrix_.index_ = a.indices.astype(np.int32)
    lp.a_matrix_.value_ = a.data
    lp.integrality_ = [highspy.HighsVarType.kInteger] * nx + [highspy.HighsVarType.kContinuous] * 3
    return lp, col_unit, col_node
