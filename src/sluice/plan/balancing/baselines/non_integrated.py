"""Non-integrated scale-in, the baseline of section 5.1 (Figure 5).

Scale-in runs "as an independent process": while nodes of N_r still hold key groups, each
round spends the whole migration budget moving them "evenly" to the other nodes (each to
the least utilized node of N_s at that moment), without looking at overloaded nodes. Once
N_r is empty, ordinary MILP load balancing resumes.
"""

from __future__ import annotations

import numpy as np

from sluice.plan.balancing.milp import MilpSettings, solve_milp
from sluice.plan.balancing.model import BalancePlan, BalancingProblem, MigrationBudget, make_plan, node_loads


def non_integrated_scale_in(
    problem: BalancingProblem, budget: MigrationBudget, settings: MilpSettings | None = None
) -> BalancePlan:
    settings = settings or MilpSettings()
    on_removing = np.flatnonzero(problem.removing[problem.assignment_index])
    if len(on_removing) == 0:
        return solve_milp(problem, budget, settings)
    assignment = problem.assignment.copy()
    loads = node_loads(problem)
    util_key = loads / problem.capacity
    util_key[problem.removing] = np.inf  # never a target
    cost = problem.migration_cost
    spent_cost, spent_count = 0.0, 0
    for k in on_removing:
        if not budget.allows(spent_cost + cost[k], spent_count + 1):
            continue
        target = int(np.argmin(util_key))
        assignment[k] = problem.nodes[target]
        loads[target] += problem.load[k]
        util_key[target] = loads[target] / problem.capacity[target]
        spent_cost += cost[k]
        spent_count += 1
    return make_plan(problem, assignment, status="non_integrated_drain")
