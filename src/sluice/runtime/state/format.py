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

from sluice.errors import StateError

KEY_GROUP = "__kg"
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


def build_state_table(
    upserts: pa.Table | None, deletes: pa.Table | None, key_columns: list[str], where: str
) -> pa.Table:
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
    return table.take(order).combine_chunks()


def row_ranges(sorted_kg: pa.ChunkedArray | pa.Array) -> dict[int, tuple[int, int]]:
    """kg -> (start, stop) for a column sorted by key group."""
    kg = np.asarray(sorted_kg.to_numpy() if isinstance(sorted_kg, pa.Array) else sorted_kg.to_numpy())
    if kg.size == 0:
        return {}
    starts = np.flatnonzero(np.r_[True, kg[1:] != kg[:-1]])
    stops = np.r_[starts[1:], kg.size]
    return {int(kg[s]): (int(s), int(e)) for s, e in zip(starts, stops)}


def serialize(table: pa.Table) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


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
        row = pa.array(np.arange(n, dtype=np.int64))
        groups = (
            table.select([KEY_GROUP, *key_columns])
            .append_column("__row", row)
            .group_by([KEY_GROUP, *key_columns], use_threads=False)
            .aggregate([("__row", "max")])
        )
        last = np.sort(groups.column("__row_max").to_numpy())
        if last.size != n:
            table = table.take(pa.array(last))
        table = table.filter(pc.invert(table.column(DELETED)))
    table = table.drop_columns([DELETED])
    state_cols = [c for c in table.column_names if c not in (KEY_GROUP, *key_columns)]
    return table.select([KEY_GROUP, *key_columns, *state_cols]).combine_chunks()


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
