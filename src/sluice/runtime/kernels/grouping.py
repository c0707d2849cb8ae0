"""Splitting a table into its keys' rows, vectorized (one sort, no per-record Python), and
which key types hashing groups exactly."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def groups(table: pa.Table, keys: list[str]) -> Iterator[tuple[tuple, pa.Table]]:
    """Yield (key tuple, rows of that key) in key order, rows in their original order."""
    if table.num_rows == 0:
        return
    order = pc.sort_indices(table, sort_keys=[(k, "ascending") for k in keys] + [])
    ordered = table.take(order)
    key_cols = [ordered.column(k).to_numpy(zero_copy_only=False) for k in keys]
    change = np.zeros(ordered.num_rows, dtype=bool)
    change[0] = True
    for col in key_cols:
        change[1:] |= col[1:] != col[:-1]
    starts = np.flatnonzero(change)
    ends = np.append(starts[1:], ordered.num_rows)
    for start, end in zip(starts, ends):
        key = tuple(col[start].item() if hasattr(col[start], "item") else col[start] for col in key_cols)
        yield key, ordered.slice(int(start), int(end - start))


def dense_ids(columns: list[pa.Array | pa.ChunkedArray]) -> np.ndarray:
    """Dense ids of the rows' keys, given one column per key field: rows with equal keys
    (nulls included) share an id, ids are numbered in order of first appearance and stay
    below the row count. One dictionary encoding per column, no sort."""
    ids = None
    for column in columns:
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        encoded = pc.dictionary_encode(column, null_encoding="encode")
        codes = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
        if ids is None:
            ids = codes
        else:  # mixed radix, then re-densify so that ids stay below the row count
            combined = ids * (len(encoded.dictionary) + 1) + codes
            ids = np.asarray(pc.dictionary_encode(pa.array(combined)).indices.to_numpy(zero_copy_only=False), np.int64)
    return ids


def exact_key_type(dtype: pa.DataType) -> bool:
    """Key types whose dictionary encoding tells keys apart exactly as Arrow's group-by and
    join do: not floats (-0.0 and NaN), nor nested or decimal types."""
    return (pa.types.is_integer(dtype) or pa.types.is_string(dtype) or pa.types.is_large_string(dtype)
            or pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype) or pa.types.is_boolean(dtype)
            or pa.types.is_timestamp(dtype) or pa.types.is_date(dtype))
