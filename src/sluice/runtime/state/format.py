"""How state rows are laid out in one file, and how a file's bytes are checked.

A state file is an Arrow IPC *file* (random access, zero-copy from a buffer) holding
``__kg`` (int32), the key columns, the state columns and ``__deleted`` (bool, a tombstone
flag), sorted by ``__kg`` so each key group is one contiguous row range. Deletions and upserts
share the file: a deletion row has its state columns null. Within one key group the rows are
in the order they must be applied: a later row overrides an earlier row of the same key.

The file is checksummed as a whole (SHA-256 of its bytes) and the checksum travels in the
``DeltaFile`` descriptor, never inside the file it protects.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.core.columns import KEY_GROUP
from sluice.errors import StateError
from sluice.runtime.kernels.grouping import canonical_key, exact_key_type, last_rows

DELETED = "__deleted"
CHECKSUM_ALGORITHM = "sha256"


def checksum(data: bytes | memoryview | pa.Buffer) -> str:
    return f"{CHECKSUM_ALGORITHM}:{hashlib.sha256(memoryview(data)).hexdigest()}"


def _require_columns(table: pa.Table, needed: list[str], what: str) -> None:
    missing = [c for c in needed if c not in table.column_names]
    if missing:
        raise StateError(
            f"{what} lacks column(s) {missing}; it has {table.column_names} "
            f"(a state table needs {KEY_GROUP!r} and the key columns)"
        )


def build_state_table(upserts: pa.Table | None, deletes: pa.Table | None, key_columns: list[str], where: str) -> pa.Table:
    """One table of tombstones and upserts, sorted by ``__kg``, ready to be written.

    If a task both deletes and upserts one key in the same batch, the upsert wins (the key is
    reset to its new state); of two upserts of one key the later (in input order) wins.
    """
    parts: list[pa.Table] = []
    needed = [KEY_GROUP, *key_columns]
    if deletes is not None and deletes.num_rows > 0:
        _require_columns(deletes, needed, f"deletes of {where}")
        tombstones = deletes.select(needed)
        tombstones = tombstones.append_column(DELETED, pa.array(np.ones(tombstones.num_rows, bool)))
        parts.append(tombstones)
    if upserts is not None and upserts.num_rows > 0:
        _require_columns(upserts, needed, f"upserts of {where}")
        if DELETED in upserts.column_names:
            raise StateError(f"upserts of {where} use the reserved column name {DELETED!r}")
        state_cols = [c for c in upserts.column_names if c not in needed]
        rows = upserts.select([*needed, *state_cols])
        rows = rows.append_column(DELETED, pa.array(np.zeros(rows.num_rows, bool)))
        parts.append(rows)
    if not parts:
        return pa.table({KEY_GROUP: pa.array([], pa.int32()), DELETED: pa.array([], pa.bool_())})
    try:
        parts = [p.set_column(0, KEY_GROUP, p.column(KEY_GROUP).cast(pa.int32())) for p in parts]
        table = pa.concat_tables(parts, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise StateError(f"deletes and upserts of {where} have incompatible key columns: {exc}") from exc
    if table.column(KEY_GROUP).null_count:
        raise StateError(f"{KEY_GROUP} of {where} has nulls; every state row needs its key group")
    # Canonical order: by key group, then key, tombstone before upsert (the sort is stable,
    # so duplicates of one key keep their input order). The bytes then depend only on the
    # set of changes, not on the order a shuffle delivered the rows in: a retried task
    # writes the very file (and checksum) its earlier attempt wrote.
    sort_keys = [(KEY_GROUP, "ascending"), *[(k, "ascending") for k in key_columns]]
    try:
        order = pc.sort_indices(table, sort_keys=[*sort_keys, (DELETED, "descending")])
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):  # keys of an unsortable type
        order = pc.sort_indices(table, sort_keys=[(KEY_GROUP, "ascending")])
    order = order.to_numpy()
    if (order[1:] > order[:-1]).all():  # a kernel's upserts often come sorted: skip copying them
        return table.combine_chunks()
    return table.take(order).combine_chunks()


def row_ranges(sorted_kg: pa.ChunkedArray | pa.Array) -> dict[int, tuple[int, int]]:
    """kg -> (start, stop) for a column sorted by key group."""
    kg = np.asarray(sorted_kg.to_numpy())
    if kg.size == 0:
        return {}
    starts = np.flatnonzero(np.r_[True, kg[1:] != kg[:-1]])
    stops = np.r_[starts[1:], kg.size]
    return {int(kg[s]): (int(s), int(e)) for s, e in zip(starts, stops)}


def serialize(table: pa.Table) -> pa.Buffer:
    # measure first, then write into a buffer of the exact size: a growing output stream
    # reallocates and copies the file several times (the measuring pass copies nothing)
    size = pa.MockOutputStream()
    _write_file(size, table)
    buffer = pa.allocate_buffer(size.size())
    _write_file(pa.FixedSizeBufferWriter(buffer), table)
    return buffer


def _write_file(sink, table: pa.Table) -> None:
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


def deserialize(data: pa.Buffer | bytes) -> pa.Table:
    buf = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
    return pa.ipc.open_file(buf).read_all()


def merge_latest(pieces: list[pa.Table], key_columns: list[str]) -> pa.Table:
    """Apply rows in order: for each (kg, key) keep the last row; drop tombstones.

    ``pieces`` are row ranges of state files, oldest first for every key group. Result rows
    keep the order of their last occurrence, so the result is a deterministic function of
    the pieces (a replayed task sees the same state in the same order).
    """
    table = pa.concat_tables(pieces, promote_options="permissive") if len(pieces) > 1 else pieces[0]
    n = table.num_rows
    if n:
        last = _last_rows(table, key_columns)
        deleted = table.column(DELETED)
        if deleted.null_count or pc.any(deleted).as_py():
            # a null flag counts as a tombstone, as the filter on its negation always did
            live = ~np.asarray(pc.fill_null(deleted, True).to_numpy(zero_copy_only=False), bool)
            last = last[live[last]]
        table = _rows_at(table, last)
    table = table.drop_columns([DELETED])
    state_cols = [c for c in table.column_names if c not in (KEY_GROUP, *key_columns)]
    return table.select([KEY_GROUP, *key_columns, *state_cols]).combine_chunks()


def _codes(values: pa.ChunkedArray | np.ndarray) -> tuple[np.ndarray, int]:
    """Dense codes of the values, keys compared as kernels compare them (nulls are one value,
    NaN one value, -0.0 = 0.0), and how many there are."""
    array = values if isinstance(values, pa.ChunkedArray) else pa.array(values)
    encoded = pc.dictionary_encode(canonical_key(array), null_encoding="encode")
    return np.asarray(encoded.indices.to_numpy(zero_copy_only=False), np.int64), len(encoded.dictionary)


def _last_rows(table: pa.Table, key_columns: list[str]) -> np.ndarray:
    """Positions of the last row of each (kg, key), ascending."""
    n = table.num_rows
    kg = np.asarray(table.column(KEY_GROUP).to_numpy(), np.int64)
    if not all(exact_key_type(table.schema.field(c).type) for c in key_columns):
        return last_rows(table, [KEY_GROUP, *key_columns])
    codes, m = None, 1
    for c in key_columns:
        column_codes, size = _codes(table.column(c))
        if codes is None:
            codes, m = column_codes, size
        else:  # mixed radix, re-densified so that codes stay below n
            codes, m = _codes(codes * size + column_codes)
    if codes is None:
        codes, m = _codes(kg)
    else:
        # a key hashes to one key group, so the key alone nearly always tells the group;
        # combine the two only when some key shows up in two key groups
        kg_of = np.empty(m, np.int64)
        kg_of[codes] = kg
        if not (kg_of[codes] == kg).all():
            codes, m = _codes(codes * (int(kg.max() - kg.min()) + 1) + (kg - kg.min()))
    if m == n:  # every row is the only row of its key
        return np.arange(n, dtype=np.int64)
    last = np.zeros(m, np.int64)  # every code 0..m-1 occurs
    np.maximum.at(last, codes, np.arange(n, dtype=np.int64))
    return np.sort(last)


def _rows_at(table: pa.Table, positions: np.ndarray) -> pa.Table:
    """``table.take(positions)`` (ascending positions); as slices when they form few runs,
    as after a full rewrite of a key group, which copies list columns far faster than a take."""
    if len(positions) == table.num_rows:
        return table
    if len(positions) == 0:
        return table.slice(0, 0)
    breaks = np.flatnonzero(np.diff(positions) != 1) + 1
    if len(breaks) >= max(256, len(positions) // 64):  # a slice costs some microseconds
        return table.take(pa.array(positions))
    starts = np.concatenate([[0], breaks]).tolist()
    ends = np.concatenate([breaks, [len(positions)]]).tolist()
    return pa.concat_tables([table.slice(int(positions[a]), b - a) for a, b in zip(starts, ends)])


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with exactly ``__kg`` + ``schema``'s columns (missing ones null), cast to it."""
    fields = [pa.field(KEY_GROUP, pa.int32())]
    fields += [f for f in schema if f.name != KEY_GROUP]
    target = pa.schema(fields)
    arrays = []
    for f in target:
        if f.name in table.column_names:
            arrays.append(table.column(f.name).cast(f.type))
        else:
            arrays.append(pa.chunked_array([pa.nulls(table.num_rows, f.type)], f.type))
    return pa.Table.from_arrays(arrays, schema=target)
