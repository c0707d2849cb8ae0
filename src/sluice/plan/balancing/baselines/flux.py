"""Flux (Shah et al., ICDE 2003) as the ALBIC paper describes it (section 2.2).

At the end of each period the nodes are sorted by load, descending; the biggest *suitable*
key group of the first node moves to the last node, "if necessary" one of the second node to
the second last, and so on. Suitable means the move lowers the load variance: for loads
L_a > L_b on nodes of capacity w_a, w_b, moving load l lowers sum_n L_n^2 / w_n iff
l * (1/w_a + 1/w_b) < 2 * (L_a/w_a - L_b/w_b) (for equal nodes: l < L_a - L_b).
Passes repeat, re-sorting each time, until the migration budget is spent or a pass finds
no suitable move. A key group moves at most once per round. Like the paper (section 5), the
budget is the same maxMigrations the MILP gets.
"""

from __future__ import annotations

import numpy as np

from sluice.errors import PlanError
from sluice.plan.balancing.model import BalancePlan, BalancingProblem, MigrationBudget, make_plan, node_loads


def flux(problem: BalancingProblem, budget: MigrationBudget) -> BalancePlan:
    if problem.removing.any():
        raise PlanError("Flux balances a fixed set of nodes; use non_integrated_scale_in while nodes are marked for removal")
    assignment = problem.assignment.copy()
    node_of = problem.assignment_index.copy()
    loads = node_loads(problem)
    w = problem.capacity
    cost = problem.migration_cost
    moved = np.zeros(problem.num_key_groups, bool)
    spent_cost, spent_count = 0.0, 0
    while True:
        moved_this_pass = False
        order = np.argsort(-(loads / w), kind="stable")
        for i in range(len(order) // 2):
            heavy, light = order[i], order[-1 - i]
            gap = loads[heavy] / w[heavy] - loads[light] / w[light]
            if gap <= 0:
                break
            limit = 2.0 * gap / (1.0 / w[heavy] + 1.0 / w[light])
            affordable = ~moved & (node_of == heavy) & (problem.load < limit)
            affordable &= budget.affordable(cost, spent_cost, spent_count)
            if not affordable.any():
                continue
            candidates = np.flatnonzero(affordable)
            k = candidates[np.argmax(problem.load[candidates])]
            node_of[k], assignment[k], moved[k] = light, problem.nodes[light], True
            loads[heavy] -= problem.load[k]
            loads[light] += problem.load[k]
            spent_cost += cost[k]
            spent_count += 1
            moved_this_pass = True
        if not moved_this_pass or not budget.allows(spent_cost, spent_count + 1):
            break
    return make_plan(problem, assignment, status="flux")
