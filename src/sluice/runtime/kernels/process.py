"""``KeyedStream.process(fn)``: a user function with per-key state.

``fn(key, rows, state)`` is called once per key and batch with all of the key's records of
the batch as a ``pyarrow.Table`` (so it can be vectorized), and a :class:`KeyState`.
State values are pickled into the key-group store.
"""

from __future__ import annotations

import pickle
from typing import Any

import pyarrow as pa

from sluice.runtime.kernels.grouping import groups
from sluice.runtime.kernels.keyed import KEY_GROUP, BatchContext, DeadRecord, KeyedKernel, KeyedResult

_STATE = "__state"
_MISSING = object()


class KeyState:
    """The state of one key: read ``value``, change it with ``update``, drop it with ``clear``."""

    def __init__(self, value: Any = None):
        self.value = value
        self.changed = False
        self.cleared = False

    def update(self, value: Any) -> None:
        self.value, self.changed, self.cleared = value, True, False

    def clear(self) -> None:
        self.value, self.changed, self.cleared = None, True, True


def _as_table(out: Any, schema: pa.Schema) -> pa.Table:
    if out is None:
        return schema.empty_table()
    if isinstance(out, pa.Table):
        return out.select(schema.names).cast(schema)
    if isinstance(out, pa.RecordBatch):
        return pa.Table.from_batches([out]).select(schema.names).cast(schema)
    if isinstance(out, dict):
        out = [out]
    return pa.Table.from_pylist(list(out), schema=schema)


class ProcessKernel(KeyedKernel):
    def __init__(self, key_columns: list[str], fn, schema: pa.Schema | None):
        super().__init__(key_columns)
        self.fn = fn
        self.schema = schema

    def state_schema(self, input_schema: pa.Schema) -> pa.Schema:
        return pa.schema([input_schema.field(k) for k in self.key_columns] + [pa.field(_STATE, pa.binary())])

    def output_schema(self, input_schema: pa.Schema) -> pa.Schema:
        return self.schema or pa.schema([f for f in input_schema if f.name != KEY_GROUP])

    def process(self, rows: pa.Table, state: pa.Table, ctx: BatchContext) -> KeyedResult:
        """Call ``fn`` once per key of the batch.

        The unit of failure is that call: when ``fn`` raises (or returns what does not fit
        the output schema, or a state that cannot be pickled), every record of the key in
        this batch is a dead letter with the error, its output is dropped, and the key's
        state stays as it was before the batch (none of its records of the batch is
        applied: ``fn`` saw them together, so Sluice cannot tell which one was to blame).
        Other keys go on.
        """
        out_schema = self.output_schema(rows.schema)
        blobs = state.column(_STATE).to_pylist() if state.num_rows else []
        outputs, upserts, deletes, dead = [], [], [], []
        for key, state_row, key_rows in groups(state, rows, self.key_columns):
            kg = key_rows.column(KEY_GROUP)[0].as_py()
            key_state = KeyState(pickle.loads(blobs[state_row]) if state_row is not None else None)
            records = key_rows.drop_columns([KEY_GROUP])
            try:
                out = _as_table(self.fn(key, records, key_state), out_schema)
                blob = pickle.dumps(key_state.value) if key_state.changed and not key_state.cleared else None
            except Exception as exc:  # the key's records are dead letters; its state is untouched
                dead += [DeadRecord(record, exc, key) for record in records.to_pylist()]
                continue
            outputs.append(out)
            record = dict(zip(self.key_columns, key), **{KEY_GROUP: kg})
            if key_state.cleared:
                deletes.append(record)
            elif key_state.changed:
                upserts.append({**record, _STATE: blob})
        state_schema = self.state_schema(rows.schema).append(pa.field(KEY_GROUP, pa.int32()))
        delete_schema = pa.schema([rows.schema.field(k) for k in self.key_columns] + [pa.field(KEY_GROUP, pa.int32())])
        return KeyedResult(
            output=pa.concat_tables(outputs) if outputs else out_schema.empty_table(),
            upserts=pa.Table.from_pylist(upserts, schema=state_schema),
            deletes=pa.Table.from_pylist(deletes, schema=delete_schema) if deletes else None,
            dead_letters=dead,
        )
