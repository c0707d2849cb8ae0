"""Aggregate functions a keyed or windowed stream can compute.

Built-ins (count, sum, min, max, mean) are vectorized by the runtime over Arrow. A
user-defined aggregate is given the classic way, as four functions over *accumulators*:
``create() -> acc``, ``add(acc, values) -> acc`` (``values`` is a pyarrow Array of one key's
new values, so the function can be vectorized), ``merge(acc, acc) -> acc`` and
``result(acc) -> value``. Accumulators must be picklable: they are stored in the key-group
store.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sluice.errors import PipelineError

BUILTIN = ("count", "sum", "min", "max", "mean")


@dataclass(frozen=True)
class Aggregate:
    kind: str  # one of BUILTIN or "udaf"
    column: str | None = None  # None only for count(*)
    create: Callable[[], Any] | None = None
    add: Callable[[Any, Any], Any] | None = None
    merge: Callable[[Any, Any], Any] | None = None
    result: Callable[[Any], Any] | None = None
    result_type: Any = None  # pyarrow DataType of a UDAF's result (default float64)

    @property
    def invertible(self) -> bool:
        """Whether removing a partial aggregate is possible (subtract-on-evict)."""
        return self.kind in ("count", "sum", "mean")


def count(column: str | None = None) -> Aggregate:
    """Number of rows (or of non-null values of ``column``)."""
    return Aggregate("count", column)


def sum(column: str) -> Aggregate:
    return Aggregate("sum", column)


def min(column: str) -> Aggregate:
    return Aggregate("min", column)


def max(column: str) -> Aggregate:
    return Aggregate("max", column)


def mean(column: str) -> Aggregate:
    return Aggregate("mean", column)


def udaf(
    column: str,
    create: Callable[[], Any],
    add: Callable[[Any, Any], Any],
    merge: Callable[[Any, Any], Any],
    result: Callable[[Any], Any],
    result_type: Any = None,
) -> Aggregate:
    """A user-defined aggregate over ``column`` from (create, add, merge, result)."""
    for name, fn in (("create", create), ("add", add), ("merge", merge), ("result", result)):
        if not callable(fn):
            raise PipelineError(f"udaf over {column!r}: {name} must be callable, got {fn!r}")
    return Aggregate("udaf", column, create, add, merge, result, result_type)


def parse(spec: Aggregate | tuple | str, output_name: str) -> Aggregate:
    """Accept ``count()``-style objects, ``("sum", "col")`` tuples or ``"count"``."""
    if isinstance(spec, Aggregate):
        agg = spec
    elif isinstance(spec, str):
        agg = Aggregate(spec)
    elif isinstance(spec, tuple) and len(spec) == 2:
        agg = Aggregate(spec[0], spec[1])
    else:
        raise PipelineError(f"aggregate {output_name!r}: cannot read {spec!r}; use e.g. sluice.agg.sum('col')")
    if agg.kind not in BUILTIN and agg.kind != "udaf":
        raise PipelineError(
            f"aggregate {output_name!r}: unknown function {agg.kind!r}; built-ins are {', '.join(BUILTIN)}"
        )
    if agg.column is None and agg.kind != "count":
        raise PipelineError(f"aggregate {output_name!r}: {agg.kind} needs a column")
    return agg
