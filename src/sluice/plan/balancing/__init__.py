"""Key-group load balancing, collocation and scaling (the ALBIC paper, Madsen, Zhou and Cao).

Inputs are what the runtime measures per key group (``BalancingProblem``); outputs are a new
routing table and its migrations (``BalancePlan``).

- ``solve_milp``: the MILP load balancer of section 4.3.1 (HiGHS), budget by cost or count.
- ``albic``: ALBIC, the MILP plus integrated collocation (section 4.3.2).
- ``adapt``: one period of Algorithm 1 (integrated scaling) with a pluggable policy.
- baselines: ``flux``, ``potc``, ``cola``, ``non_integrated_scale_in``.
"""

from sluice.plan.balancing.albic import AlbicSettings, albic, collocation_pairs
from sluice.plan.balancing.baselines import cola, flux, non_integrated_scale_in, potc
from sluice.plan.balancing.milp import MilpSettings, solve_milp
from sluice.plan.balancing.model import (
    BalancePlan,
    BalancingProblem,
    Migration,
    MigrationBudget,
    Traffic,
    collocation_factor,
    load_distance,
    make_plan,
    mean_load,
    migrations_between,
    node_loads,
)
from sluice.plan.balancing.scaling import (
    AdaptationResult,
    MarkForRemoval,
    NoScaling,
    ScalingDecision,
    ScalingPolicy,
    UtilizationPolicy,
    adapt,
    apply_decision,
    release_drained_nodes,
)

__all__ = [
    "AdaptationResult",
    "AlbicSettings",
    "BalancePlan",
    "BalancingProblem",
    "MarkForRemoval",
    "Migration",
    "MigrationBudget",
    "MilpSettings",
    "NoScaling",
    "ScalingDecision",
    "ScalingPolicy",
    "Traffic",
    "UtilizationPolicy",
    "adapt",
    "albic",
    "apply_decision",
    "cola",
    "collocation_factor",
    "collocation_pairs",
    "flux",
    "load_distance",
    "make_plan",
    "mean_load",
    "migrations_between",
    "node_loads",
    "non_integrated_scale_in",
    "potc",
    "release_drained_nodes",
    "solve_milp",
]
