"""Partial aggregates over panes: the vectorized core of sub-window combine.

C-MR (section 2.1) "adopts incremental processing of each reduce window ... by decomposing
each reduce window into sub-windows and perform[ing] a Combine operation on them". Sluice's
sub-windows are *panes*: slices of time of length gcd(size, slide) (see
``sluice.graph.windows.pane_length``). Each record updates exactly one pane's partial
aggregate; a window's result combines the partials of its panes. Session windows reuse the
same partials, one per open session.

Everything here works on a :class:`PaneTable`: one row per (key, pane) with one numpy array
per partial field, sorted by (key, pane). No Spark, no per-record Python: built-in
aggregates are numpy reductions; a user-defined aggregate's ``add`` is called once per
(key, pane) group with a pyarrow Array, and its ``merge`` combines pane accumulators.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.errors import SchemaError
from sluice.graph.aggregates import Aggregate, UserAggregate, udaf_values
from sluice.graph.windows import value_kind

# Watermarks are clamped into [NO_WATERMARK, END_OF_TIME] so that time arithmetic on int64
# never overflows (event times in microseconds since 1970 are around 2**51).
NO_WATERMARK = -(2**62)
END_OF_TIME = 2**62

_INT_KINDS = ("rows", "n")  # partial fields that are always int64 counts


@dataclass(frozen=True)
class PartialField:
    """One partial-aggregate column kept per pane (or per session)."""

    name: str  # column name in the state table and key in PaneTable.parts
    kind: str  # rows | n | sum | min | max | udaf
    column: str | None = None  # input column (None for rows)
    user_aggregate: UserAggregate | None = None  # the UDAF of a "udaf" field

    @property
    def combine(self) -> np.ufunc:
        """The numpy ufunc combining two partials of a built-in field (a UDAF's merge does)."""
        if self.kind == "udaf":
            raise TypeError(f"partial {self.name!r}: a UDAF's partials combine by its merge, not a ufunc")
        return _COMBINE[self.kind]

    @property
    def udaf(self) -> UserAggregate:
        """The user-defined aggregate of a "udaf" field."""
        if self.user_aggregate is None:
            raise TypeError(f"partial {self.name!r} is a built-in {self.kind}, not a UDAF")
        return self.user_aggregate


_COMBINE = {"rows": np.add, "n": np.add, "sum": np.add, "min": np.minimum, "max": np.maximum}


class PartialLayout:
    """The partial fields a set of aggregates needs, shared by every aggregate that can use them.

    ``rows`` (records in the pane) is always kept: it is count(*) and tells an empty pane.
    Each column aggregated by a built-in keeps ``n:col`` (its non-null values); sum and mean
    share ``sum:col``; min and max keep ``min:col`` / ``max:col``; each distinct UDAF keeps
    its pickled accumulator.
    """

    def __init__(self, aggregates: list[Aggregate], input_schema: pa.Schema):
        self.input_schema = input_schema
        fields: dict[str, PartialField] = {"rows": PartialField("rows", "rows")}
        self.value_kind: dict[str, str] = {}
        self.udaf_field: dict[int, str] = {}
        for agg in aggregates:
            if agg.kind == "count" and agg.column is None:
                continue
            if agg.column not in input_schema.names:
                raise SchemaError(f"window aggregate {agg.kind}({agg.column!r}): no such column; input has {input_schema.names}")
            if isinstance(agg, UserAggregate):
                key = id(agg)
                if key not in self.udaf_field:
                    name = f"udaf:{len(self.udaf_field)}:{agg.column}"
                    self.udaf_field[key] = name
                    fields[name] = PartialField(name, "udaf", agg.column, agg)
                continue
            fields.setdefault(f"n:{agg.column}", PartialField(f"n:{agg.column}", "n", agg.column))
            if agg.kind == "count":
                continue
            assert agg.column is not None  # only count(*) has none
            dtype = input_schema.field(agg.column).type
            kind = "sum" if agg.kind in ("sum", "mean") else agg.kind
            self.value_kind[f"{kind}:{agg.column}"] = value_kind(agg.column, dtype, agg.kind)
            fields.setdefault(f"{kind}:{agg.column}", PartialField(f"{kind}:{agg.column}", kind, agg.column))
        self.fields = list(fields.values())

    def __setstate__(self, state: dict) -> None:
        # udaf_field is keyed by the identity of each UDAF aggregate, and an unpickled
        # layout (shipped to Spark's workers inside its kernel) holds new objects
        self.__dict__.update(state)
        self.udaf_field = {id(f.udaf): f.name for f in self.fields if f.kind == "udaf"}

    # -- types ------------------------------------------------------------------------

    def numpy_dtype(self, f: PartialField) -> Any:
        if f.kind in _INT_KINDS:
            return np.int64
        if f.kind == "udaf":
            return object
        return np.int64 if self.value_kind[f.name] == "int" else np.float64

    def arrow_type(self, f: PartialField) -> pa.DataType:
        if f.kind == "udaf":
            return pa.binary()
        return pa.int64() if self.numpy_dtype(f) is np.int64 else pa.float64()

    def identity(self, f: PartialField) -> Any:
        """The neutral element of a field's combine (fills null inputs)."""
        if f.kind in ("rows", "n", "sum"):
            return 0
        dtype = self.numpy_dtype(f)
        big = np.iinfo(np.int64).max if dtype is np.int64 else np.inf
        return big if f.kind == "min" else (np.iinfo(np.int64).min if dtype is np.int64 else -np.inf)

    # -- from records ------------------------------------------------------------------

    def field_values(self, f: PartialField, rows: pa.Table) -> np.ndarray:
        """Per-record contribution to a numeric field, nulls replaced by the identity."""
        if f.kind == "rows":
            return np.ones(rows.num_rows, dtype=np.int64)
        col = rows[f.column]
        if f.kind == "n":
            return np.asarray(pc.is_valid(col), dtype=np.int64) if col.null_count else np.ones(rows.num_rows, np.int64)
        dtype = self.numpy_dtype(f)
        arrow_type = col.type
        if pa.types.is_decimal(arrow_type):  # exactly, as unscaled integers (value_kind: precision <= 18)
            col = pc.cast(pc.multiply(col, pa.scalar(10**arrow_type.scale, pa.int64())), pa.int64())
        elif not (pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type)):
            col = pc.cast(col, pa.int64()) if not pa.types.is_boolean(arrow_type) else pc.cast(col, pa.int8())
        col = pc.cast(col, pa.int64() if dtype is np.int64 else pa.float64())
        if col.null_count:
            col = pc.fill_null(col, self.identity(f))
        return np.asarray(col.to_numpy(), dtype=dtype)


@dataclass
class PaneTable:
    """Partial aggregates, one row per (key id, pane), sorted by (key, pane).

    For sessions ``pane`` holds the session start and ``end`` its end; UDAF fields hold
    pickled accumulators (bytes) in an object array, with freshly computed accumulators
    cached in ``live`` so they are not unpickled again in the same batch.
    """

    key: np.ndarray
    pane: np.ndarray
    parts: dict[str, np.ndarray]
    end: np.ndarray | None = None
    live: dict[str, dict[int, Any]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.key)

    def take(self, index: np.ndarray) -> PaneTable:
        """The rows ``index`` (distinct), with their live accumulators."""
        live = {}
        if self.live:
            position = np.full(len(self), -1, dtype=np.int64)
            position[index] = np.arange(len(index))
            live = {
                name: {int(position[i]): acc for i, acc in cache.items() if position[i] >= 0} for name, cache in self.live.items()
            }
        return PaneTable(
            self.key[index],
            self.pane[index],
            {name: values[index] for name, values in self.parts.items()},
            None if self.end is None else self.end[index],
            live,
        )

    def accumulator(self, name: str, i: int) -> Any:
        """The live UDAF accumulator of row ``i`` (unpickled on first use). Do not mutate it."""
        cache = self.live.setdefault(name, {})
        acc = cache.get(i)
        if acc is None:
            acc = cache[i] = pickle.loads(self.parts[name][i])
        return acc


def empty_pane_table(layout: PartialLayout, sessions: bool = False) -> PaneTable:
    return PaneTable(
        np.zeros(0, np.int64),
        np.zeros(0, np.int64),
        {f.name: np.zeros(0, layout.numpy_dtype(f)) for f in layout.fields},
        np.zeros(0, np.int64) if sessions else None,
    )


# ---------------------------------------------------------------------------------------
# Sorting and grouping on (key, pane) pairs


def sort_codes(codes: np.ndarray, bound: int) -> np.ndarray:
    """A stable permutation sorting non-negative int64 ``codes`` below ``bound``.

    Codes that are all distinct have exactly one sorting permutation, so any algorithm gives
    the stable one: a counting sort when the codes are dense (a third of the time of numpy's
    sort at 60,000 codes), else numpy's fastest sort. Repeated codes take the stable sort.
    """
    n = len(codes)
    if n == 0:
        return np.zeros(0, np.int64)
    if bound <= 4 * n:
        present = np.zeros(bound, dtype=bool)
        present[codes] = True
        ordered = np.flatnonzero(present)
        if len(ordered) == n:  # distinct: each code's row, read in code order
            row_of = np.empty(bound, np.int64)
            row_of[codes] = np.arange(n)
            return row_of[ordered]
        return np.argsort(codes, kind="stable")
    order = np.argsort(codes)
    ordered = codes[order]
    if (ordered[1:] != ordered[:-1]).all():
        return order
    return np.argsort(codes, kind="stable")


def sort_pairs(key: np.ndarray, pane: np.ndarray) -> np.ndarray:
    """A stable permutation sorting rows by (key, pane)."""
    if len(key) == 0:
        return np.zeros(0, np.int64)
    lo, hi = int(pane.min()), int(pane.max())
    span = hi - lo + 1
    n_keys = int(key.max()) + 1
    if n_keys * span < 2**62:  # one int64 composite sorts faster than a lexsort
        return sort_codes(key * span + (pane - lo), n_keys * span)
    return np.lexsort((pane, key))


def group_starts(key: np.ndarray, pane: np.ndarray) -> np.ndarray:
    """Start positions of runs of equal (key, pane) in sorted arrays."""
    if len(key) == 0:
        return np.zeros(0, np.int64)
    change = np.empty(len(key), dtype=bool)
    change[0] = True
    change[1:] = (key[1:] != key[:-1]) | (pane[1:] != pane[:-1])
    return np.flatnonzero(change)


def pair_searchsorted(key: np.ndarray, pane: np.ndarray, q_key: np.ndarray, q_pane: np.ndarray) -> np.ndarray:
    """``searchsorted`` (left) of (q_key, q_pane) pairs in arrays sorted by (key, pane)."""
    if len(q_key) == 0:
        return np.zeros(0, np.int64)
    if len(pane):
        lo = min(int(pane.min()), int(q_pane.min()))
        span = max(int(pane.max()), int(q_pane.max())) - lo + 1
        n_keys = max(int(key.max()), int(q_key.max())) + 1
        if n_keys * span < 2**62:  # one int64 composite, as in sort_pairs
            return np.searchsorted(key * span + (pane - lo), q_key * span + (q_pane - lo), side="left")
    values = np.unique(np.concatenate([pane, q_pane]))
    m = len(values)
    table = key * m + np.searchsorted(values, pane)
    query = q_key * m + np.searchsorted(values, q_pane)
    return np.searchsorted(table, query, side="left")


# ---------------------------------------------------------------------------------------
# Combining partials over ranges of panes


def reduce_ranges(values: np.ndarray, lo: np.ndarray, hi: np.ndarray, ufunc: np.ufunc) -> np.ndarray:
    """``ufunc.reduce(values[lo[i]:hi[i]])`` for every i, in one vectorized pass.

    Requires lo < hi and ranges sorted by lo (so the cost is O(len(values) + sum of range
    lengths)). Interleaving starts and ends in one ``reduceat`` index array yields each
    range at the even positions (the odd positions, the gaps, are discarded).
    """
    if len(lo) == 0:
        return np.zeros(0, values.dtype)
    index = np.empty(2 * len(lo), dtype=np.int64)
    index[0::2] = lo
    index[1::2] = hi
    padded = np.concatenate([values, values[:1]])  # hi may be len(values)
    return ufunc.reduceat(padded, index)[0::2]


def combine_ranges(layout: PartialLayout, table: PaneTable, lo: np.ndarray, hi: np.ndarray) -> dict[str, np.ndarray]:
    """Combine the numeric partials of panes ``[lo, hi)`` for each window.

    Counts and integer sums use prefix sums: the window total is prefix[hi] - prefix[lo],
    the vectorized form of C-MR-style "add the entering pane, subtract the leaving one"
    (exact in int64). Float sums are not combined by subtraction, which would accumulate
    rounding error; they, min and max combine the window's pane partials with one
    ``reduceat`` (never the raw records).
    """
    out = {}
    for f in layout.fields:
        if f.kind == "udaf":
            continue
        values = table.parts[f.name]
        if values.dtype == np.int64 and f.kind in ("rows", "n", "sum"):
            prefix = np.zeros(len(values) + 1, dtype=np.int64)
            np.cumsum(values, out=prefix[1:])
            out[f.name] = prefix[hi] - prefix[lo]
        else:
            out[f.name] = reduce_ranges(values, lo, hi, f.combine)
    return out


def sliding_udaf(table: PaneTable, name: str, agg: UserAggregate, lo: np.ndarray, hi: np.ndarray) -> list[Any]:
    """UDAF accumulators of windows ``[lo, hi)`` with the two-stacks sliding aggregation.

    Windows come sorted, so lo and hi never decrease: the panes in play form a FIFO queue.
    The queue is kept as two stacks (front: suffix aggregates of the oldest panes; back: the
    running aggregate of the newest), so each pane is merged a constant number of times
    however many windows it belongs to, instead of size/slide times (Tangwongsan et al.'s
    two-stacks, as in Scotty's aggregate store).

    Contract on merge: ``merge(a, b)`` may update and return ``a`` but must not modify ``b``.
    So the first argument is always an accumulator this function owns (fresh from create()
    or returned by such a merge).
    """
    create, merge = agg.create, agg.merge
    results: list[Any] = []
    front: list[Any] = []  # suffix aggregates; front[-1] covers [q_lo, flip point)
    back = create()  # aggregate of panes [flip point, q_hi)
    q_lo = q_hi = 0
    for window_lo, window_hi in zip(lo.tolist(), hi.tolist()):
        if window_lo >= q_hi:  # disjoint from the queue (another key or a gap): restart
            front, back = [], create()
            q_lo = q_hi = window_lo
        while q_hi < window_hi:
            back = merge(back, table.accumulator(name, q_hi))
            q_hi += 1
        while q_lo < window_lo:
            if not front:  # flip: move the back stack to the front as suffix aggregates
                suffix = None
                for i in range(q_hi - 1, q_lo - 1, -1):
                    own = merge(create(), table.accumulator(name, i))
                    suffix = own if suffix is None else merge(own, suffix)
                    front.append(suffix)
                back = create()
            front.pop()
            q_lo += 1
        acc = merge(create(), front[-1]) if front else create()
        results.append(merge(acc, back))
    return results


# ---------------------------------------------------------------------------------------
# Final values


def finalize(
    agg: Aggregate,
    layout: PartialLayout,
    combined: dict[str, np.ndarray],
    udaf_accs: dict[str, list[Any]],
) -> pa.Array:
    """The output column of one aggregate from combined partials (one entry per window)."""
    if agg.kind == "count":
        return pa.array(combined["rows" if agg.column is None else f"n:{agg.column}"], pa.int64())
    if isinstance(agg, UserAggregate):
        name = layout.udaf_field[id(agg)]
        results = [agg.result(acc) for acc in udaf_accs[name]]
        return pa.array(results, type=agg.output_type(layout.input_schema.field(agg.column).type))
    n = combined[f"n:{agg.column}"]
    empty = n == 0
    original = layout.input_schema.field(agg.column).type
    if agg.kind == "mean":
        total = combined[f"sum:{agg.column}"].astype(np.float64)
        if pa.types.is_decimal(original):
            total = total / 10**original.scale
        with np.errstate(divide="ignore", invalid="ignore"):
            return pa.array(total / np.where(empty, 1, n), pa.float64(), mask=empty)
    kind = "sum" if agg.kind == "sum" else agg.kind
    values = combined[f"{kind}:{agg.column}"]
    if pa.types.is_decimal(original):
        out_type = pa.decimal128(38, original.scale) if agg.kind == "sum" else original
        return decimal_from_unscaled(values, empty, out_type)
    array = pa.array(values, mask=empty)
    if agg.kind in ("min", "max") and original != array.type:
        array = pc.cast(array, original) if not pa.types.is_boolean(original) else pc.not_equal(array, 0)
    return array


def decimal_from_unscaled(values: np.ndarray, null: np.ndarray, dtype: pa.Decimal128Type) -> pa.Array:
    """Decimals of ``dtype`` from their unscaled int64 values, without a Python loop: a
    decimal128 is a 16-byte little-endian two's complement integer, the int64 and its sign."""
    words = np.empty(2 * len(values), np.int64)
    words[0::2] = values
    words[1::2] = values >> 63
    array = pa.Array.from_buffers(dtype, len(values), [None, pa.py_buffer(words)])
    return pc.if_else(pa.array(null), pa.scalar(None, dtype), array) if null.any() else array


# ---------------------------------------------------------------------------------------
# Building partials from records


def partials_from_rows(
    layout: PartialLayout,
    rows: pa.Table,
    key: np.ndarray,
    pane: np.ndarray,
    base: Callable[[str, int], Any] | None = None,
) -> tuple[PaneTable, np.ndarray, np.ndarray]:
    """Group records by (key, pane) and compute each group's numeric partials.

    Returns the table of groups (sorted), the permutation sorting the records and the start
    of each group in it, so UDAF values can be sliced per group.
    """
    order = sort_pairs(key, pane)
    sorted_key, sorted_pane = key[order], pane[order]
    starts = group_starts(sorted_key, sorted_pane)
    parts = {}
    for f in layout.fields:
        if f.kind == "udaf":
            parts[f.name] = np.empty(len(starts), dtype=object)
            continue
        values = layout.field_values(f, rows)[order]
        parts[f.name] = f.combine.reduceat(values, starts) if len(starts) else values[:0]
    return PaneTable(sorted_key[starts], sorted_pane[starts], parts), order, starts


def add_udafs(
    layout: PartialLayout,
    table: PaneTable,
    targets: np.ndarray,
    rows: pa.Table,
    order: np.ndarray,
    starts: np.ndarray,
    previous: list[Any | None] | None = None,
) -> None:
    """Apply each group's new UDAF values to ``table`` rows ``targets`` (one per group).

    ``add`` gets one pyarrow Array per group (vectorizable); it starts from the row's
    existing accumulator when the pane already had one, else from ``create()``.
    """
    if not layout.udaf_field:
        return
    ends = np.append(starts[1:], len(order)).tolist()
    for f in layout.fields:
        if f.kind != "udaf":
            continue
        values = udaf_values(rows, f.udaf).take(pa.array(order))
        cache = table.live.setdefault(f.name, {})
        stored = table.parts[f.name]
        for g, (start, end) in enumerate(zip(starts.tolist(), ends)):
            i = int(targets[g])
            acc = pickle.loads(stored[i]) if stored[i] is not None else f.udaf.create()
            acc = f.udaf.add(acc, values.slice(start, end - start))
            cache[i] = acc
            stored[i] = pickle.dumps(acc)


def merge_tables(layout: PartialLayout, old: PaneTable, new: PaneTable) -> tuple[PaneTable, np.ndarray]:
    """Merge new partials into old ones (both sorted, each (key, pane) at most once in each).

    Returns the merged table and, per row of ``new``, its row in the merged table. Numeric
    partials are combined with their ufunc (old, new); UDAF cells of ``new`` are left empty
    (None) so the caller adds the new values into the old accumulator (see :func:`add_udafs`).
    """
    n_old = len(old)
    key = np.concatenate([old.key, new.key])
    pane = np.concatenate([old.pane, new.pane])
    if len(key) == 0:
        return PaneTable(
            key, pane, {f.name: np.concatenate([old.parts[f.name], new.parts[f.name]]) for f in layout.fields}
        ), np.zeros(0, np.int64)
    lo = int(pane.min())
    span = int(pane.max()) - lo + 1
    if (int(key.max()) + 1) * span < 2**62:
        codes = key * span + (pane - lo)
        # two sorted runs: the stable sort (a timsort) merges them in one pass
        order = np.argsort(codes, kind="stable")
        ordered = codes[order]
        first = np.empty(len(order), dtype=bool)
        first[0] = True
        np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    else:
        order = np.lexsort((pane, key))
        first = np.zeros(len(order), dtype=bool)
        first[group_starts(key[order], pane[order])] = True
    group = np.cumsum(first) - 1
    at = np.empty(len(order), dtype=np.int64)
    at[order] = group
    old_at, target = at[:n_old], at[n_old:]
    size = int(group[-1]) + 1
    # a pair in both tables sorts as (old row, new row): the second of the two is a repeat
    repeats = np.flatnonzero(~first)
    both_old, both_new, both_at = order[repeats - 1], order[repeats] - n_old, group[repeats]

    def place(old_values: np.ndarray, new_values: np.ndarray) -> np.ndarray:
        out = np.empty(size, np.result_type(old_values, new_values))
        out[old_at] = old_values
        out[target] = new_values
        return out

    parts = {}
    for f in layout.fields:
        if f.kind == "udaf":
            # a merged row keeps the accumulator of its old member (None for new panes)
            cells = np.empty(size, dtype=object)
            cells[old_at] = old.parts[f.name]
            parts[f.name] = cells
        else:
            values = place(old.parts[f.name], new.parts[f.name])
            values[both_at] = f.combine(old.parts[f.name][both_old], new.parts[f.name][both_new])
            parts[f.name] = values
    merged = PaneTable(place(old.key, new.key), place(old.pane, new.pane), parts)
    if old.live:
        merged.live = {name: {int(old_at[i]): acc for i, acc in cache.items()} for name, cache in old.live.items()}
    return merged, target
