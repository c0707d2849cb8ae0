"""One key encoding for every keyed operator: which rows share a key, vectorized.

Keys compare as in SQL's GROUP BY: a NULL is one key (also as one part of a multi-column
key), every NaN is one key, and -0.0 is the key 0.0. Arrow alone does not agree: its joins
never match nulls, and its hash tables tell -0.0 from 0.0. So every kernel numbers keys
here, through :func:`dense_ids`, and finds a key's committed state by its number
(:func:`state_and_row_ids`), never through a join on the key columns. Spark's side agrees:
its hashes (``xxhash64`` of the key group, ``hash`` of the combine's exchange) skip nulls,
hash -0.0 as 0.0 and every NaN alike, and its GROUP BY normalizes floats the same way.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def canonical_key(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``column`` as one array, with -0.0 as 0.0 and every NaN as one NaN (float keys); other
    types as they are."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_floating(column.type):
        zero = pa.scalar(0, column.type)
        column = pc.if_else(pc.equal(column, zero), zero, column)  # -0.0 == 0.0: null stays null
        column = pc.if_else(pc.is_nan(column), pa.scalar(float("nan"), column.type), column)
    return column


def dense_ids(columns: list[pa.Array | pa.ChunkedArray]) -> np.ndarray:
    """Dense ids of the rows' keys, given one column per key field: rows with equal keys
    (as SQL's GROUP BY compares them: nulls are one key, NaN one key, -0.0 = 0.0) share an
    id; ids are numbered in order of first appearance and stay below the row count. One
    dictionary encoding per column, no sort."""
    ids: np.ndarray | None = None
    for column in columns:
        encoded = pc.dictionary_encode(canonical_key(column), null_encoding="encode")
        codes = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
        if ids is None:
            ids = codes
        else:  # mixed radix, then re-densify so that ids stay below the row count
            combined = ids * (len(encoded.dictionary) + 1) + codes
            ids = np.asarray(pc.dictionary_encode(pa.array(combined)).indices.to_numpy(zero_copy_only=False), np.int64)
    if ids is None:  # no key columns: every row is one key
        raise ValueError("dense_ids needs at least one key column")
    return ids


def state_and_row_ids(state: pa.Table, rows: pa.Table, key_columns: list[str]) -> tuple[np.ndarray, np.ndarray, pa.Table]:
    """Dense ids for the keys of the state rows followed by the batch rows.

    Returns (id per row of state then rows, position of each id's first row, the key
    columns of state then rows). Ids are numbered in order of first appearance, so state row
    i (one row per key) has id i: a batch row's key has committed state exactly when its id
    is below ``state.num_rows``, and then that id is its state row.
    """
    n = state.num_rows + rows.num_rows
    keys = pa.table({c: concat_column(state, rows, c) for c in key_columns}) if key_columns else pa.table({})
    ids = dense_ids([keys[c] for c in key_columns]) if key_columns else np.zeros(n, dtype=np.int64)
    if n == 0:
        return ids, np.zeros(0, np.int64), keys
    running_max = np.maximum.accumulate(ids)
    is_first = np.empty(n, dtype=bool)
    is_first[0] = True
    is_first[1:] = running_max[1:] > running_max[:-1]
    return ids, np.flatnonzero(is_first), keys


def concat_column(state: pa.Table, rows: pa.Table, name: str) -> pa.ChunkedArray:
    target = rows.schema.field(name).type
    parts = []
    if state.num_rows:
        column = state[name]
        parts += (column.cast(target) if column.type != target else column).chunks
    parts += rows[name].chunks
    return pa.chunked_array(parts, type=target)


def groups(state: pa.Table, rows: pa.Table, keys: list[str]) -> Iterator[tuple[tuple, int | None, pa.Table]]:
    """Yield (key tuple, the key's state row or None, rows of that key) per key of ``rows``,
    in order of the keys' first rows, rows in their original order. The key tuple holds the
    key's Python values (None for a null part), read at its first row."""
    if rows.num_rows == 0:
        return
    ids, first, all_keys = state_and_row_ids(state, rows, keys)
    n_state = state.num_rows
    row_ids = ids[n_state:]
    order = np.argsort(row_ids, kind="stable")
    ordered = rows.take(pa.array(order))
    sorted_ids = row_ids[order]
    starts = np.flatnonzero(np.r_[True, sorted_ids[1:] != sorted_ids[:-1]])
    ends = np.append(starts[1:], len(order))
    # keys by first appearance in the batch: sort the groups by their first row
    by_first = np.argsort(order[starts], kind="stable")
    key_values = all_keys.take(pa.array(first[sorted_ids[starts]])).to_pylist() if keys else [{}] * len(starts)
    for g in by_first.tolist():
        key_id = int(sorted_ids[starts[g]])
        key = tuple(key_values[g][k] for k in keys)
        yield key, (key_id if key_id < n_state else None), ordered.slice(int(starts[g]), int(ends[g] - starts[g]))


def exact_key_type(dtype: pa.DataType) -> bool:
    """Key types :func:`dense_ids` tells apart exactly as SQL does: not nested or decimal
    types (whose encodings may tell equal values apart)."""
    return (
        pa.types.is_integer(dtype)
        or pa.types.is_string(dtype)
        or pa.types.is_large_string(dtype)
        or pa.types.is_binary(dtype)
        or pa.types.is_large_binary(dtype)
        or pa.types.is_boolean(dtype)
        or pa.types.is_timestamp(dtype)
        or pa.types.is_date(dtype)
        or pa.types.is_floating(dtype)
    )


_ROW = "__row"  # a table's row positions, aggregated per key below


def last_rows(table: pa.Table, keys: list[str]) -> np.ndarray:
    """Positions of the last row of each key (each distinct tuple of the ``keys`` columns),
    ascending: one Arrow group-by over the row numbers."""
    numbered = table.select(keys).append_column(_ROW, pa.array(np.arange(table.num_rows, dtype=np.int64)))
    last = numbered.group_by(keys, use_threads=False).aggregate([(_ROW, "max")])
    return np.sort(last.column(f"{_ROW}_max").to_numpy())  # Arrow names an aggregate <column>_<function>
