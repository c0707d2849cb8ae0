"""Policies configured per job, in Python or in a YAML file (``sluice run --policies``).

YAML (or the same as a Python list of dicts)::

    policies:
      - batch_sizing: {safety: 0.8}
      - fixed_point: {rho: 0.8}

Each entry names a registered policy and its keyword arguments; order is priority (the
arbiter lets the first policy win when two size the same target). Later policies (chaining,
balancing, scaling) register here with ``register``.
"""

from __future__ import annotations

from collections.abc import Callable

from sluice.control.alternates import AlternatesByLoad
from sluice.control.autopilot import Autopilot
from sluice.control.balancing import FluxBalancing, KeyGroupBalancing, RingBalancing
from sluice.control.batch_sizing import FixedAdmission, FixedPointBatchSizing, ModelBatchSizing
from sluice.control.chaining import DynamicChaining
from sluice.control.collocation import CollocationBalancing
from sluice.control.elastic import ce_policy, ga_policy, plasticc_policy
from sluice.control.guards import Guards
from sluice.control.policy import Policy
from sluice.control.scaling import FlinkLikeScaling, IncrementalScaling, OneStepScaling
from sluice.errors import ConfigError

REGISTRY: dict[str, Callable[..., Policy]] = {
    ModelBatchSizing.name: ModelBatchSizing,
    FixedPointBatchSizing.name: FixedPointBatchSizing,
    FixedAdmission.name: FixedAdmission,
    DynamicChaining.name: DynamicChaining,
    KeyGroupBalancing.name: KeyGroupBalancing,
    FluxBalancing.name: FluxBalancing,
    RingBalancing.name: RingBalancing,
    CollocationBalancing.name: CollocationBalancing,
    OneStepScaling.name: OneStepScaling,
    IncrementalScaling.name: IncrementalScaling,
    Guards.name: Guards,
    AlternatesByLoad.name: AlternatesByLoad,
    Autopilot.name: Autopilot,
    FlinkLikeScaling.name: FlinkLikeScaling,
    "elastic_ce": ce_policy,
    "elastic_ga": ga_policy,
    "elastic_plasticc": plasticc_policy,
}


def register(name: str, factory: Callable[..., Policy]) -> None:
    """Make a policy of your own usable by ``name`` in a policies YAML file (``factory`` is
    called with the entry's keyword arguments)."""
    REGISTRY[name] = factory


def default_policies(graph=None) -> list[Policy]:
    """What a job runs when the user names no policies: the autopilot when it states goals
    (``Pipeline.goals``), else adaptive batch sizing for its latency constraints."""
    goals = getattr(graph, "goals", None)
    if goals is not None:
        return [Autopilot(goals)]
    return [ModelBatchSizing()]


def build_policies(spec, graph=None) -> list[Policy]:
    """Policies from a list of Policy objects, of {name: {kwargs}} or names, a
    {"policies": [...]} dict, or a YAML file's path; None: ``default_policies(graph)``.
    An ``autopilot`` entry without goals of its own keeps the graph's."""
    if spec is None:
        return default_policies(graph)
    if isinstance(spec, str):
        return load_policies(spec, graph)
    if isinstance(spec, dict):
        if "policies" not in spec:
            raise ConfigError(f"a policies mapping needs a 'policies' list, got keys {sorted(spec)}")
        spec = spec["policies"]
    if not isinstance(spec, (list, tuple)):
        raise ConfigError(f"policies must be a list, got {type(spec).__name__}")
    out = []
    for i, entry in enumerate(spec):
        if isinstance(entry, Policy):
            out.append(entry)
            continue
        kwargs: dict
        if isinstance(entry, str):
            name, kwargs = entry, {}
        elif isinstance(entry, dict) and len(entry) == 1:
            name, kwargs = next(iter(entry.items()))
            kwargs = kwargs or {}
        else:
            raise ConfigError(f"policies[{i}]: expected a policy name or {{name: {{options}}}}, got {entry!r}")
        if name not in REGISTRY:
            raise ConfigError(f"policies[{i}]: unknown policy {name!r}; known: {sorted(REGISTRY)}")
        if name == Autopilot.name and "goals" not in kwargs and getattr(graph, "goals", None) is not None:
            kwargs = {**kwargs, "goals": graph.goals}
        try:
            out.append(REGISTRY[name](**kwargs))
        except (TypeError, ValueError, ConfigError) as e:
            raise ConfigError(f"policies[{i}] ({name}): {e}") from None
    return out


def load_policies(path: str, graph=None) -> list[Policy]:
    """Policies from a YAML file (see the module's docstring)."""
    import os

    if not os.path.exists(path):
        raise ConfigError(f"no such policies file: {path}")
    with open(path) as f:
        return parse_policies(f.read(), path, graph)


def parse_policies(text: str, where: str, graph=None) -> list[Policy]:
    """Policies from YAML text (``where``: the file it came from, for errors)."""
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{where}: not valid YAML: {e}") from None
    if isinstance(data, list):
        data = {"policies": data}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping with a 'policies' list")
    try:
        return build_policies(data, graph)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
