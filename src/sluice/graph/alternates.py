"""Alternates: several implementations of one operator, any one of them active at a time.

Kumbhare's dynamic dataflows (thesis chapters 3 and 4, Def. 3): an operator ("PE") has one
or more *alternates* ``<gamma, c, s>``, each with its relative value ``gamma`` in (0, 1]
(Eq. 4.1: its quality relative to the best), its cost ``c`` (seconds of one reference core
per record) and its selectivity ``s`` (output records per input record). The controller
picks the active alternate of each such operator between batches, trading value for cost.

In Sluice an operator with alternates keeps them in its spec's ``alternates`` (name ->
:class:`Alt`, ``graph.specs.FunctionSpec``), and its ``fn`` is the function of its default
alternate, so code that knows nothing of alternates (the profiler, the pipeline operator)
sees a plain operator.
Which alternate runs is part of the Plan (``Plan.alternates``): it changes only at a batch
boundary, is in the plan log, and a replayed batch runs the alternate it ran with.

Pure Python: no Spark.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from sluice.errors import PipelineError, PlanError
from sluice.graph.specs import FunctionSpec


@dataclass(frozen=True)
class Alt:
    """One alternate implementation of an operator.

    ``fn``: the function, with the signature the operator asks for (a batch function for
    ``map_batches``, ``fn(key, rows, state)`` for ``process``, ...). ``value``: its relative
    quality in (0, 1], 1 for the best (thesis Eq. 4.1). ``cost``: seconds of one core per
    record, if known (None: measured while it runs). ``selectivity``: output records per
    input record, if known (None: measured).
    """

    fn: Callable
    value: float = 1.0
    cost: float | None = None
    selectivity: float | None = None

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise ValueError(f"Alt needs a function, got {self.fn!r}")
        if not isinstance(self.value, (int, float)) or not 0.0 < float(self.value) <= 1.0:
            raise ValueError(f"an alternate's value is its quality relative to the best, in (0, 1]; got {self.value!r}")
        if self.cost is not None and (not isinstance(self.cost, (int, float)) or self.cost < 0):
            raise ValueError(f"an alternate's cost is seconds of CPU per record (>= 0), got {self.cost!r}")
        if self.selectivity is not None and (not isinstance(self.selectivity, (int, float)) or self.selectivity < 0):
            raise ValueError(f"an alternate's selectivity is output records per input record (>= 0), got {self.selectivity!r}")

    def describe(self) -> dict[str, Any]:
        """As JSON: the function's name and the declared figures."""
        return {
            "fn": f"{getattr(self.fn, '__module__', '?')}.{getattr(self.fn, '__qualname__', repr(self.fn))}",
            "value": float(self.value),
            "cost": self.cost,
            "selectivity": self.selectivity,
        }


def check_alternates(
    fn: Callable | None,
    alternates: Mapping[str, Any] | None,
    active: str | None,
    what: str,
    name: str | None,
    location: str | None,
) -> tuple[Callable, dict[str, Alt], str | None]:
    """The function, the alternates (name -> Alt) and the default alternate of an operator
    built with ``fn=`` or ``alternates=``; raises PipelineError saying what is wrong.

    A plain function given as an alternate is ``Alt(fn)`` (value 1). The default alternate
    is ``active`` when given, else the one of highest value (the first of those on a tie)."""
    label = name or what
    if alternates is None:
        if active is not None:
            raise PipelineError(f"{what}: active={active!r} names an alternate, but no alternates= were given", label, location)
        if not callable(fn):
            raise PipelineError(f"{what} needs a function, got {fn!r}", label, location)
        return fn, {}, None
    if fn is not None:
        raise PipelineError(
            f"{what}: give the function or alternates=, not both (the function of each alternate is Alt(fn, ...))",
            label,
            location,
        )
    if not isinstance(alternates, Mapping) or not alternates:
        raise PipelineError(
            f"{what}: alternates= must be a non-empty dict of name -> Alt(fn, value=...), got {alternates!r}", label, location
        )
    alts: dict[str, Alt] = {}
    for alt_name, alt in alternates.items():
        if not isinstance(alt_name, str) or not alt_name:
            raise PipelineError(f"{what}: alternate names must be non-empty strings, got {alt_name!r}", label, location)
        if isinstance(alt, Alt):
            alts[alt_name] = alt
        elif callable(alt):
            alts[alt_name] = Alt(alt)
        else:
            raise PipelineError(
                f"{what}: alternate {alt_name!r} must be Alt(fn, value=...) or a function, got {alt!r}", label, location
            )
    if active is None:
        top = max(a.value for a in alts.values())
        active = next(n for n, a in alts.items() if a.value == top)
    elif active not in alts:
        raise PipelineError(f"{what}: active={active!r} is not one of its alternates {sorted(alts)}", label, location)
    return alts[active].fn, alts, active


def alternates_of(op) -> dict[str, Alt]:
    """An operator's alternates (name -> Alt); empty for one with a single implementation."""
    return dict(op.spec.alternates) if isinstance(op.spec, FunctionSpec) else {}


def default_alternate(op) -> str | None:
    return op.spec.active if isinstance(op.spec, FunctionSpec) else None


def initial_alternates(graph) -> dict[str, str]:
    """Operator id -> its default alternate, for every operator with alternates."""
    return {op.id: op.spec.active for op in graph.operators if alternates_of(op)}


def with_alternate(op, name: str | None):
    """The operator running alternate ``name`` (itself when ``name`` is None or the default)."""
    alts = alternates_of(op)
    if name is None or not alts:
        return op
    if name not in alts:
        raise PlanError(f"operator {op.name!r} has no alternate {name!r}; its alternates: {sorted(alts)}")
    if alts[name].fn is op.spec.fn:
        return op
    return replace(op, spec=replace(op.spec, fn=alts[name].fn))


def processing_elements(graph) -> list:
    """The operators the application value averages over (thesis Eq. 4.3, |P|): every
    operator but sources, sinks, key_by and union. One without alternates has one implementation,
    of value 1."""
    return [op for op in graph.operators if op.definition.processing_element]


def application_value(graph, active: Mapping[str, str]) -> float:
    """Gamma(t) of Eq. 4.3: the mean over the processing elements of the value of their
    active alternate (``active``: operator id -> alternate; the default where missing)."""
    pes = processing_elements(graph)
    if not pes:
        return 1.0
    total = 0.0
    for op in pes:
        alts = alternates_of(op)
        if alts:
            total += float(alts[active.get(op.id) or op.spec.active].value)
        else:
            total += 1.0
    return total / len(pes)


def value_bounds(graph) -> tuple[float, float]:
    """(Gamma_min, Gamma_max): every operator on its worst / on its best alternate."""
    worst: dict[str, str] = {}
    best: dict[str, str] = {}
    for op in graph.operators:
        values = {name: alt.value for name, alt in alternates_of(op).items()}
        if values:
            worst[op.id] = min(values, key=values.__getitem__)
            best[op.id] = max(values, key=values.__getitem__)
    return application_value(graph, worst), application_value(graph, best)
