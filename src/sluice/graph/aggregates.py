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
NUMERIC_AGGREGATES = ("sum", "mean")  # need a numeric column


@dataclass(frozen=True)
class Aggregate:
    """One aggregate function over a column: a built-in or a user-defined one (subclasses)."""

    kind: str  # one of BUILTIN or "udaf"
    column: str | None = None  # None only for count(*)

    @property
    def invertible(self) -> bool:
        """Whether removing a partial aggregate is possible (subtract-on-evict)."""
        return self.kind in ("count", "sum", "mean")


@dataclass(frozen=True)
class BuiltinAggregate(Aggregate):
    """count, sum, min, max or mean: vectorized by the runtime over Arrow."""


@dataclass(frozen=True, kw_only=True)
class UserAggregate(Aggregate):
    """A user-defined aggregate: four functions over picklable accumulators."""

    kind: str = "udaf"
    column: str
    create: Callable[[], Any]
    add: Callable[[Any, Any], Any]
    merge: Callable[[Any, Any], Any]
    result: Callable[[Any], Any]
    result_type: Any = None  # pyarrow DataType of the result (default float64)


def count(column: str | None = None) -> Aggregate:
    """Number of rows (or of non-null values of ``column``), as int64.

    >>> from sluice import agg
    >>> agg.count(), agg.count("kwh")
    (BuiltinAggregate(kind='count', column=None), BuiltinAggregate(kind='count', column='kwh'))
    """
    return BuiltinAggregate("count", column)


def sum(column: str) -> Aggregate:
    """Sum of the non-null values of ``column``: int64 for an integer column, else float64.

    >>> from sluice import agg
    >>> agg.sum("kwh")
    BuiltinAggregate(kind='sum', column='kwh')
    """
    return BuiltinAggregate("sum", column)


def min(column: str) -> Aggregate:
    """Smallest non-null value of ``column`` (numbers, timestamps, strings), in its type.

    >>> from sluice import agg
    >>> agg.min("voltage")
    BuiltinAggregate(kind='min', column='voltage')
    """
    return BuiltinAggregate("min", column)


def max(column: str) -> Aggregate:
    """Largest non-null value of ``column`` (numbers, timestamps, strings), in its type.

    >>> from sluice import agg
    >>> agg.max("voltage")
    BuiltinAggregate(kind='max', column='voltage')
    """
    return BuiltinAggregate("max", column)


def mean(column: str) -> Aggregate:
    """Mean of the non-null values of a numeric ``column``, as float64 (null when none).

    >>> from sluice import agg
    >>> agg.mean("kwh")
    BuiltinAggregate(kind='mean', column='kwh')
    """
    return BuiltinAggregate("mean", column)


def udaf(
    column: str,
    create: Callable[[], Any],
    add: Callable[[Any, Any], Any],
    merge: Callable[[Any, Any], Any],
    result: Callable[[Any], Any],
    result_type: Any = None,
) -> Aggregate:
    """A user-defined aggregate over ``column`` from (create, add, merge, result).

    ``add`` gets a key's new values as one pyarrow Array, so it can be vectorized;
    accumulators must be picklable (they are kept in the key-group store).

    >>> from sluice import agg
    >>> import pyarrow.compute as pc
    >>> spread = agg.udaf("kwh", create=lambda: (float("inf"), float("-inf")),
    ...                   add=lambda acc, v: (min(acc[0], pc.min(v).as_py()), max(acc[1], pc.max(v).as_py())),
    ...                   merge=lambda a, b: (min(a[0], b[0]), max(a[1], b[1])),
    ...                   result=lambda acc: acc[1] - acc[0])
    >>> spread.kind, spread.column
    ('udaf', 'kwh')
    """
    for name, fn in (("create", create), ("add", add), ("merge", merge), ("result", result)):
        if not callable(fn):
            raise PipelineError(f"udaf over {column!r}: {name} must be callable, got {fn!r}")
    return UserAggregate(column=column, create=create, add=add, merge=merge, result=result, result_type=result_type)


def parse(spec: Aggregate | tuple | str, output_name: str) -> Aggregate:
    """Accept ``count()``-style objects, ``("sum", "col")`` tuples or ``"count"``."""
    if isinstance(spec, Aggregate):
        agg = spec
    elif isinstance(spec, str):
        agg = BuiltinAggregate(spec)
    elif isinstance(spec, tuple) and len(spec) == 2:
        agg = BuiltinAggregate(spec[0], spec[1])
    else:
        raise PipelineError(f"aggregate {output_name!r}: cannot read {spec!r}; use e.g. sluice.agg.sum('col')")
    if not isinstance(agg, UserAggregate) and agg.kind not in BUILTIN:
        raise PipelineError(
            f"aggregate {output_name!r}: unknown function {agg.kind!r}; built-ins are {', '.join(BUILTIN)}"
        )
    if agg.column is None and agg.kind != "count":
        raise PipelineError(f"aggregate {output_name!r}: {agg.kind} needs a column")
    return agg
