"""Integrated horizontal scaling: the paper's Algorithm 1 (section 4.1).

    1-3  release the nodes of N_r that no key group is left on;
    4    compute a *potential* plan (balancing and collocation) on the current nodes;
    5    decide on scaling from that potential plan (a pluggable policy): balancing or
         collocation may cure an overload without new nodes, and scale-in is refused when the
         remaining nodes could not be balanced well enough;
    6-7  apply the decision (new nodes join empty; removed nodes join N_r) and plan again, so
         one solve weighs scaling, balancing and collocation together under one budget.

The balancer is any function problem -> BalancePlan (the MILP, ALBIC, ...). The scaling
decision itself is out of the paper's scope (section 4.2): ``UtilizationPolicy`` is a simple
threshold rule, and ``MarkForRemoval`` / ``NoScaling`` serve experiments.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from sluice.errors import PlanError
from sluice.plan.balancing.model import BalancePlan, BalancingProblem, mean_load, node_loads

Balancer = Callable[[BalancingProblem], BalancePlan]


@dataclass(frozen=True)
class ScalingDecision:
    add_capacities: tuple[float, ...] = ()  # capacity weights of the nodes to acquire
    remove: tuple[int, ...] = ()  # node ids to mark for removal (join N_r)

    @property
    def is_noop(self) -> bool:
        return not self.add_capacities and not self.remove


class ScalingPolicy(Protocol):
    def decide(self, problem: BalancingProblem, potential: BalancePlan) -> ScalingDecision: ...


class NoScaling:
    def decide(self, problem: BalancingProblem, potential: BalancePlan) -> ScalingDecision:
        return ScalingDecision()


@dataclass(frozen=True)
class MarkForRemoval:
    """Mark fixed nodes for removal (experiments: "mark ten nodes for removal")."""

    nodes: tuple[int, ...]

    def decide(self, problem: BalancingProblem, potential: BalancePlan) -> ScalingDecision:
        fresh = tuple(n for n in self.nodes if n in set(problem.nodes[~problem.removing].tolist()))
        return ScalingDecision(remove=fresh)


@dataclass(frozen=True)
class UtilizationPolicy:
    """Threshold rule on the *potential* plan's utilizations (percentage points).

    Scale out when a node would still exceed ``high`` after the potential plan: add enough
    average nodes to bring the mean to ``target``. Scale in when the mean over N_s is below
    ``low`` and the potential plan is balanced (load distance <= ``max_load_distance``):
    remove the least loaded nodes while the mean stays <= ``target``.
    """

    high: float = 85.0
    low: float = 40.0
    target: float = 65.0
    max_load_distance: float = 10.0

    def decide(self, problem: BalancingProblem, potential: BalancePlan) -> ScalingDecision:
        after = problem.with_assignment(potential.assignment)
        util = node_loads(after) / problem.capacity
        staying = ~problem.removing
        total = problem.load.sum()
        if util[staying].max() > self.high:
            missing = total / self.target - problem.capacity[staying].sum()
            return ScalingDecision(add_capacities=(1.0,) * max(1, math.ceil(missing)))
        if mean_load(problem) < self.low and potential.load_distance <= self.max_load_distance:
            order = np.flatnonzero(staying)[np.argsort(util[staying], kind="stable")]
            remaining = problem.capacity[staying].sum()
            remove = []
            for n in order[:-1]:  # keep at least one node
                if total / (remaining - problem.capacity[n]) > self.target:
                    break
                remaining -= problem.capacity[n]
                remove.append(int(problem.nodes[n]))
            return ScalingDecision(remove=tuple(remove))
        return ScalingDecision()


@dataclass(frozen=True)
class AdaptationResult:
    problem: BalancingProblem  # the cluster the final plan is for (released/added/marked nodes)
    released: tuple[int, ...]  # nodes of N_r given back in lines 1-3
    potential: BalancePlan
    decision: ScalingDecision
    plan: BalancePlan


def release_drained_nodes(problem: BalancingProblem) -> tuple[BalancingProblem, tuple[int, ...]]:
    """Lines 1-3: nodes of N_r with no key group left are removed from the job."""
    occupied = np.bincount(problem.assignment_index, minlength=problem.num_nodes) > 0
    drained = problem.removing & ~occupied
    if not drained.any():
        return problem, ()
    keep = ~drained
    smaller = replace(
        problem,
        nodes=problem.nodes[keep],
        capacity=problem.capacity[keep],
        removing=problem.removing[keep],
        resource_cap=None if problem.resource_cap is None else problem.resource_cap[keep],
    )
    return smaller, tuple(int(n) for n in problem.nodes[drained])


def apply_decision(problem: BalancingProblem, decision: ScalingDecision) -> BalancingProblem:
    """Line 6: new nodes (fresh ids, empty) join N_s; removed nodes join N_r."""
    if decision.is_noop:
        return problem
    unknown = set(decision.remove) - set(problem.nodes.tolist())
    if unknown:
        raise PlanError(f"scaling decision removes unknown nodes {sorted(unknown)}")
    removing = problem.removing | np.isin(problem.nodes, decision.remove)
    first_id = int(problem.nodes.max()) + 1
    new_ids = np.arange(first_id, first_id + len(decision.add_capacities))
    caps = None
    if problem.resource_cap is not None:  # new nodes get the mean caps of the current ones
        caps = np.vstack([problem.resource_cap, np.tile(problem.resource_cap.mean(axis=0), (len(new_ids), 1))])
    return replace(
        problem,
        nodes=np.concatenate([problem.nodes, new_ids]),
        capacity=np.concatenate([problem.capacity, np.asarray(decision.add_capacities, dtype=float)]),
        removing=np.concatenate([removing, np.zeros(len(new_ids), bool)]),
        resource_cap=caps,
    )


def adapt(problem: BalancingProblem, balancer: Balancer, policy: ScalingPolicy | None = None) -> AdaptationResult:
    """One period of Algorithm 1; returns the final plan and the cluster it is for (no scaling by default)."""
    policy = policy or NoScaling()
    problem, released = release_drained_nodes(problem)
    potential = balancer(problem)
    decision = policy.decide(problem, potential)
    scaled = apply_decision(problem, decision)
    plan = potential if decision.is_noop else balancer(scaled)
    return AdaptationResult(scaled, released, potential, decision, plan)
