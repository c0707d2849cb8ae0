"""Aggregate functions a keyed or windowed stream can compute.

Built-ins (count, sum, min, max, mean) are vectorized by the runtime over Arrow;
count_distinct, approx_count_distinct, approx_percentile, first and last are built on the
user-defined aggregate's four functions with vectorized accumulators (``graph.sketches``). A
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

import pyarrow as pa

from sluice.core.location import user_location
from sluice.errors import PipelineError
from sluice.graph import sketches as sk
from sluice.graph.schemas import to_arrow_type

BUILTIN = ("count", "sum", "min", "max", "mean")
NUMERIC_AGGREGATES = ("sum", "mean", "approx_percentile")  # need a numeric column


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
    same_type: bool = False  # the result has the input column's type (first, last)
    by: str | None = None  # a second column add() gets with ``column`` (arg_max, arg_min)

    def output_type(self, input_type: pa.DataType | None) -> pa.DataType:
        """The type of the result over a column of ``input_type``."""
        if self.same_type and input_type is not None:
            return input_type
        return self.result_type or pa.float64()


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
    where = f"agg.udaf over {column!r} at {user_location()}"
    for name, fn in (("create", create), ("add", add), ("merge", merge), ("result", result)):
        if not callable(fn):
            raise PipelineError(f"{where}: {name} must be callable, got {fn!r}")
    if result_type is not None:
        result_type = to_arrow_type(result_type, f"{where}: result_type: ")
    return UserAggregate(column=column, create=create, add=add, merge=merge, result=result, result_type=result_type)


def count_distinct(column: str) -> Aggregate:
    """Exact number of distinct non-null values of ``column``, as int64. The distinct values
    are kept per key (per pane in a window) in the key-group store: memory grows with them;
    :func:`approx_count_distinct` takes a fixed 4 KiB.

    >>> from sluice import agg
    >>> agg.count_distinct("user").column
    'user'
    """
    return UserAggregate(
        kind="count_distinct",
        column=column,
        create=sk.distinct_create,
        add=sk.distinct_add,
        merge=sk.distinct_merge,
        result=sk.distinct_result,
        result_type=pa.int64(),
    )


def approx_count_distinct(column: str, precision: int = 12) -> Aggregate:
    """Approximate number of distinct non-null values of ``column`` (HyperLogLog), as int64:
    relative standard error 1.04 / sqrt(2**precision), 1.6 % at the default 12, in
    2**precision bytes per key. Sketches merge across batches, panes and restarts exactly as
    one sketch of all the values would.

    >>> from sluice import agg
    >>> agg.approx_count_distinct("user").kind
    'approx_count_distinct'
    """
    if not (isinstance(precision, int) and 4 <= precision <= 18):
        raise PipelineError(f"approx_count_distinct({column!r}): precision must be an integer from 4 to 18, got {precision!r}")
    return UserAggregate(
        kind="approx_count_distinct",
        column=column,
        create=sk.SketchFactory("hll", precision),
        add=sk.hll_add,
        merge=sk.hll_merge,
        result=sk.hll_result,
        result_type=pa.int64(),
    )


def approx_percentile(column: str, q: float, relative_accuracy: float = 0.01) -> Aggregate:
    """Approximate ``q`` quantile (0 <= q <= 1; 0.95 is the 95th percentile) of the non-null
    values of a numeric ``column``, as float64 (DDSketch): the smallest value with at least
    ``q`` of the values at or below it (SQL's ``percentile_disc``), within
    ``relative_accuracy`` (1 % by default) of it, whatever the distribution. Sketches merge
    across batches, panes and restarts.

    >>> from sluice import agg
    >>> agg.approx_percentile("latency_ms", 0.99).kind
    'approx_percentile'
    """
    if not (isinstance(q, (int, float)) and 0 <= q <= 1):
        raise PipelineError(f"approx_percentile({column!r}): q must be between 0 and 1 (0.95 for the 95th), got {q!r}")
    if not (isinstance(relative_accuracy, float) and 0 < relative_accuracy < 1):
        raise PipelineError(f"approx_percentile({column!r}): relative_accuracy must be in (0, 1), got {relative_accuracy!r}")
    return UserAggregate(
        kind="approx_percentile",
        column=column,
        create=sk.SketchFactory("dd", relative_accuracy),
        add=sk.ddsketch_add,
        merge=sk.ddsketch_merge,
        result=sk.Percentile(float(q)),
        result_type=pa.float64(),
    )


def first(column: str) -> Aggregate:
    """The first non-null value of ``column`` a key received, in the column's type (in a
    window: the first of its earliest pane that has one).

    >>> from sluice import agg
    >>> agg.first("page").kind
    'first'
    """
    return UserAggregate(
        kind="first",
        column=column,
        create=sk.extreme_create,
        add=sk.first_add,
        merge=sk.first_merge,
        result=sk.extreme_result,
        same_type=True,
    )


def last(column: str) -> Aggregate:
    """The last non-null value of ``column`` a key received, in the column's type (in a
    window: the last of its latest pane that has one).

    >>> from sluice import agg
    >>> agg.last("page").kind
    'last'
    """
    return UserAggregate(
        kind="last",
        column=column,
        create=sk.extreme_create,
        add=sk.last_add,
        merge=sk.last_merge,
        result=sk.extreme_result,
        same_type=True,
    )


def arg_max(column: str, by: str) -> Aggregate:
    """The value of ``column`` in the record with the largest ``by`` (numbers, timestamps,
    strings; nulls skipped; on a tie, the record seen first), in ``column``'s type: Spark's
    and DuckDB's ``max_by``/``arg_max``.

    >>> from sluice import agg
    >>> agg.arg_max("page", by="duration_ms").by
    'duration_ms'
    """
    return UserAggregate(
        kind="arg_max",
        column=column,
        by=by,
        create=sk.extreme_create,
        add=sk.ArgBest(True),
        merge=sk.ArgBestMerge(True),
        result=sk.extreme_result,
        same_type=True,
    )


def arg_min(column: str, by: str) -> Aggregate:
    """The value of ``column`` in the record with the smallest ``by`` (``min_by``); see
    :func:`arg_max`.

    >>> from sluice import agg
    >>> agg.arg_min("page", by="ts").kind
    'arg_min'
    """
    return UserAggregate(
        kind="arg_min",
        column=column,
        by=by,
        create=sk.extreme_create,
        add=sk.ArgBest(False),
        merge=sk.ArgBestMerge(False),
        result=sk.extreme_result,
        same_type=True,
    )


def udaf_values(table: pa.Table, agg: UserAggregate) -> pa.Array:
    """What ``agg.add`` receives from ``table``'s rows: its column, or with ``by`` a struct
    array of (``value``, ``by``)."""
    column = table[agg.column].combine_chunks()
    if agg.by is None:
        return column
    return pa.StructArray.from_arrays([column, table[agg.by].combine_chunks()], names=["value", "by"])


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
        raise PipelineError(f"aggregate {output_name!r}: unknown function {agg.kind!r}; built-ins are {', '.join(BUILTIN)}")
    if agg.column is None and agg.kind != "count":
        raise PipelineError(f"aggregate {output_name!r}: {agg.kind} needs a column")
    return agg
