"""``KeyedStream.process(fn)``: a user function with per-key state, and timers.

``fn(key, rows, state)`` is called once per key and batch with all of the key's records of
the batch as a ``pyarrow.Table`` (so it can be vectorized), and a :class:`KeyState`.
State values are pickled into the key-group store, or, with ``state_schema``, kept as typed
columns: the value is then a dict of those fields, stored one column per field, so a
restart whose state schema added nullable fields or removed fields reads the old state
migrated (added fields null, removed ones gone; ``graph.state_schema`` says which changes
are compatible).

With ``on_timer(key, timestamp, state)``, ``fn`` (and ``on_timer`` itself) may register and
delete timers on the key's state: event-time timers fire in the first batch whose watermark
has reached their time, processing-time timers in the first batch processed at or after it,
also for keys without records in that batch (Flink's ``KeyedProcessFunction``). Timers are
state: they are stored with the key in the key-group store, committed with the batch (a
replay fires exactly what its first execution fired, a restart loses none), and move with
their key group. Per batch, finding the due timers is one vectorized pass over the timer
lists; only due timers call Python. Due timers fire before the batch's records are given
to ``fn`` (the watermark that makes them due comes from earlier batches), in time order,
event-time timers before processing-time timers at equal times; a timer a call registers
at or before the current time fires in the next batch.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.runtime.kernels.grouping import groups
from sluice.runtime.kernels.keyed import KEY_GROUP, BatchContext, DeadRecord, KeyedKernel, KeyedResult

PICKLED_STATE = "__state"  # a key's pickled state, when its operator has no state_schema
EVENT_TIMERS = "__event_timers"
PROCESSING_TIMERS = "__processing_timers"
NEXT_TIMER_NEG = "next_processing_timer_neg_us"
"""Peak figure (``KeyedResult.peaks``): minus the earliest processing-time timer left in a
partition (combined by maximum, so the driver reads minus the earliest of all): the executor
plans a batch for it on a quiet stream."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_micros(ts) -> int:
    """A timer's time as microseconds since the epoch (from a datetime or an integer)."""
    if isinstance(ts, datetime):
        if ts.tzinfo is None:
            ts = ts.replace(tzinfo=UTC)
        delta = ts - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if isinstance(ts, (int, np.integer)) and not isinstance(ts, bool):
        return int(ts)
    raise TypeError(f"a timer's time must be a datetime or integer microseconds since the epoch, got {ts!r}")


class KeyState:
    """The state of one key: read ``value``, change it with ``update``, drop it with ``clear``;
    register and delete timers (with ``on_timer``)."""

    def __init__(self, value: Any = None, event_timers=(), processing_timers=(), timers: bool = False):
        self.value = value
        self.changed = False
        self.cleared = False
        self._timers = timers
        self.event_timers: set[int] = set(event_timers)
        self.processing_timers: set[int] = set(processing_timers)

    def update(self, value: Any) -> None:
        self.value, self.changed, self.cleared = value, True, False

    def clear(self) -> None:
        """Drop the value (timers stay: delete them one by one)."""
        self.value, self.changed, self.cleared = None, True, True

    def _check_timers(self) -> None:
        if not self._timers:
            raise TypeError("timers need process(..., on_timer=...): the function that runs when one fires")

    def register_event_timer(self, ts) -> None:
        """Fire ``on_timer`` once the watermark reaches ``ts`` (a datetime or microseconds)."""
        self._check_timers()
        self.event_timers.add(to_micros(ts))
        self.changed = True

    def register_processing_timer(self, ts) -> None:
        """Fire ``on_timer`` in the first batch processed at or after ``ts``."""
        self._check_timers()
        self.processing_timers.add(to_micros(ts))
        self.changed = True

    def delete_event_timer(self, ts) -> None:
        self._check_timers()
        self.event_timers.discard(to_micros(ts))
        self.changed = True

    def delete_processing_timer(self, ts) -> None:
        self._check_timers()
        self.processing_timers.discard(to_micros(ts))
        self.changed = True

    @property
    def empty(self) -> bool:
        return self.value is None and not self.event_timers and not self.processing_timers


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


def _due(lists: pa.ChunkedArray, now: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(state row, time) of every timer in ``lists`` (one list per state row) due by ``now``."""
    array = lists.combine_chunks()
    if now is None or len(array) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    times = np.asarray(pc.list_flatten(array).to_numpy(), np.int64)
    owners = np.asarray(pc.list_parent_indices(array).to_numpy(), np.int64)
    due = times <= now
    return owners[due], times[due]


class ProcessKernel(KeyedKernel):
    def __init__(
        self, key_columns: list[str], fn, schema: pa.Schema | None, on_timer=None, state_schema: pa.Schema | None = None
    ):
        super().__init__(key_columns)
        self.fn = fn
        self.schema = schema
        self.on_timer = on_timer
        self.wants_timers = on_timer is not None  # a key's timer fires without its records
        # typed state: one nullable column per field (a field added later reads as null)
        self.typed = None if state_schema is None else pa.schema([f.with_nullable(True) for f in state_schema])
        self.required = [] if state_schema is None else [f.name for f in state_schema if not f.nullable]

    def state_schema(self, input_schema: pa.Schema) -> pa.Schema:
        fields = [input_schema.field(k) for k in self.key_columns]
        fields += list(self.typed) if self.typed is not None else [pa.field(PICKLED_STATE, pa.binary())]
        if self.on_timer is not None:
            fields += [pa.field(EVENT_TIMERS, pa.list_(pa.int64())), pa.field(PROCESSING_TIMERS, pa.list_(pa.int64()))]
        return pa.schema(fields)

    def output_schema(self, input_schema: pa.Schema) -> pa.Schema:
        return self.schema or pa.schema([f for f in input_schema if f.name != KEY_GROUP])

    def _key_state(self, state: pa.Table, blobs: list, row: int | None) -> KeyState:
        if row is None:
            return KeyState(timers=self.on_timer is not None)
        value = self._value(blobs[row])
        if self.on_timer is None:
            return KeyState(value)
        return KeyState(
            value, state.column(EVENT_TIMERS)[row].as_py() or (), state.column(PROCESSING_TIMERS)[row].as_py() or (), timers=True
        )

    def process(self, rows: pa.Table, state: pa.Table, ctx: BatchContext) -> KeyedResult:
        """Fire the due timers, then call ``fn`` once per key of the batch.

        The unit of failure is a call: when ``fn`` raises (or returns what does not fit the
        output schema, or a state that cannot be pickled), every record of the key in this
        batch is a dead letter with the error, its output is dropped, and the key's state
        stays as it was before the call (none of its records of the batch is applied:
        ``fn`` saw them together, so Sluice cannot tell which one was to blame). A timer
        whose ``on_timer`` raises is a dead letter (``{"timer": time}``), is not fired
        again, and leaves the state as it was before it. Other keys go on.
        """
        out_schema = self.output_schema(rows.schema)
        blobs = self._stored(state)
        outputs: list[pa.Table] = []
        dead: list[DeadRecord] = []
        states: dict[int | tuple, tuple[tuple, int, KeyState]] = {}  # state row (or new key) -> its state now
        metrics: dict[str, int] = {}
        peaks: dict[str, int] = {}
        if self.on_timer is not None and state.num_rows:
            self._fire(state, blobs, ctx, out_schema, outputs, dead, states)
        for key, state_row, key_rows in groups(state, rows, self.key_columns):
            kg = key_rows.column(KEY_GROUP)[0].as_py()
            slot: int | tuple = state_row if state_row is not None else key
            key_state = states[slot][2] if slot in states else self._key_state(state, blobs, state_row)
            before = _snapshot(key_state)
            records = key_rows.drop_columns([KEY_GROUP])
            try:
                out = _as_table(self.fn(key, records, key_state), out_schema)
                if key_state.changed and not key_state.cleared:
                    self._encode(key_state.value)  # fails here, inside the unit, if it cannot be stored
            except Exception as exc:  # the key's records are dead letters; its state is as before the call
                dead += [DeadRecord(record, exc, key) for record in records.to_pylist()]
                key_state = _restore(before, key_state)
                if slot in states:
                    states[slot] = (key, kg, key_state)
                continue
            outputs.append(out)
            states[slot] = (key, kg, key_state)
        upserts, deletes = [], []
        for key, kg, key_state in states.values():
            if not key_state.changed:
                continue
            record = dict(zip(self.key_columns, key), **{KEY_GROUP: kg})
            if key_state.empty or (key_state.cleared and self.on_timer is None):
                deletes.append(record)
                continue
            row = {**record, **self._encode(key_state.value)}
            if self.on_timer is not None:
                row[EVENT_TIMERS] = sorted(key_state.event_timers)
                row[PROCESSING_TIMERS] = sorted(key_state.processing_timers)
            upserts.append(row)
        if self.on_timer is not None:
            pending = [t for _, _, s in states.values() for t in s.processing_timers]
            untouched = _untouched_first_timer(state, states)
            first = min([*pending, *([untouched] if untouched is not None else [])], default=None)
            if first is not None:
                peaks[NEXT_TIMER_NEG] = -first
        state_schema = self.state_schema(rows.schema).append(pa.field(KEY_GROUP, pa.int32()))
        delete_schema = pa.schema([rows.schema.field(k) for k in self.key_columns] + [pa.field(KEY_GROUP, pa.int32())])
        return KeyedResult(
            output=pa.concat_tables(outputs) if outputs else out_schema.empty_table(),
            upserts=pa.Table.from_pylist(upserts, schema=state_schema),
            deletes=pa.Table.from_pylist(deletes, schema=delete_schema) if deletes else None,
            dead_letters=dead,
            metrics=metrics,
            peaks=peaks,
        )

    def _stored(self, state: pa.Table) -> list:
        """Each state row's stored value: pickled bytes, or the typed fields as a dict."""
        if not state.num_rows:
            return []
        if self.typed is None:
            return state.column(PICKLED_STATE).to_pylist()
        return state.select(self.typed.names).to_pylist()

    def _value(self, stored: Any) -> Any:
        if self.typed is None:
            return pickle.loads(stored) if stored is not None else None
        # a typed state whose fields are all null is no state
        return stored if any(v is not None for v in stored.values()) else None

    def _encode(self, value: Any) -> dict[str, Any]:
        """The state columns of ``value``; raises (inside the key's unit of failure) when it
        cannot be stored: not picklable, or not a record of the state schema."""
        if self.typed is None:
            return {PICKLED_STATE: None if value is None else pickle.dumps(value)}
        if value is None:
            return dict.fromkeys(self.typed.names)
        if not isinstance(value, Mapping):
            raise TypeError(f"process state with a state_schema must be a dict of its fields {self.typed.names}, got {value!r}")
        unknown = [k for k in value if k not in self.typed.names]
        if unknown:
            raise TypeError(f"process state has fields {unknown} its state_schema lacks; its fields: {self.typed.names}")
        missing = [k for k in self.required if value.get(k) is None]
        if missing:
            raise TypeError(f"process state leaves the not-null field(s) {missing} of its state_schema empty")
        try:
            row = pa.Table.from_pylist([dict(value)], schema=self.typed).to_pylist()[0]
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
            raise TypeError(f"process state {value!r} does not fit its state_schema ({_describe(self.typed)}): {exc}") from exc
        return row

    def _fire(
        self, state: pa.Table, blobs: list, ctx: BatchContext, out_schema: pa.Schema, outputs: list, dead: list, states: dict
    ) -> None:
        """Every due timer of the state, in time order per key (found in one numpy pass)."""
        event_rows, event_times = _due(state.column(EVENT_TIMERS), ctx.watermark)
        proc_rows, proc_times = _due(state.column(PROCESSING_TIMERS), int(ctx.processing_time))
        if not len(event_rows) and not len(proc_rows):
            return
        owners = np.concatenate([event_rows, proc_rows])
        times = np.concatenate([event_times, proc_times])
        kinds = np.concatenate([np.zeros(len(event_rows), np.int8), np.ones(len(proc_rows), np.int8)])
        order = np.lexsort((kinds, times, owners))
        keys = state.select(self.key_columns).take(pa.array(np.unique(owners))).to_pylist()
        key_of = dict(zip(np.unique(owners).tolist(), keys))
        kgs = state.column(KEY_GROUP)
        for i in order.tolist():
            row, ts, kind = int(owners[i]), int(times[i]), int(kinds[i])
            key = tuple(key_of[row][k] for k in self.key_columns)
            if row not in states:
                states[row] = (key, kgs[row].as_py(), self._key_state(state, blobs, row))
            key_state: KeyState = states[row][2]
            (key_state.event_timers if kind == 0 else key_state.processing_timers).discard(ts)
            key_state.changed = True  # the fired timer is gone, whatever the call does
            before = _snapshot(key_state)
            try:
                out = _as_table(self.on_timer(key, _as_datetime(ts), key_state), out_schema)
                if key_state.changed and not key_state.cleared:
                    self._encode(key_state.value)
            except Exception as exc:
                dead.append(DeadRecord({"timer": ts, "domain": "event" if kind == 0 else "processing"}, exc, key))
                states[row] = (key, states[row][1], _restore(before, key_state))
                continue
            outputs.append(out)


def _describe(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name} {f.type}" for f in schema)


def _as_datetime(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


def _snapshot(key_state: KeyState) -> tuple:
    return (
        pickle.dumps(key_state.value),
        key_state.changed,
        key_state.cleared,
        set(key_state.event_timers),
        set(key_state.processing_timers),
    )


def _restore(snapshot: tuple, key_state: KeyState) -> KeyState:
    value, changed, cleared, event, processing = snapshot
    restored = KeyState(pickle.loads(value), event, processing, timers=key_state._timers)
    restored.changed, restored.cleared = changed, cleared
    return restored


def _untouched_first_timer(state: pa.Table, states: dict) -> int | None:
    """The earliest processing-time timer of the state rows this batch did not touch."""
    if not state.num_rows:
        return None
    lists = state.column(PROCESSING_TIMERS).combine_chunks()
    if not len(lists):
        return None
    times = np.asarray(pc.list_flatten(lists).to_numpy(), np.int64)
    owners = np.asarray(pc.list_parent_indices(lists).to_numpy(), np.int64)
    touched = np.array([k for k in states if isinstance(k, int)], np.int64)
    keep = ~np.isin(owners, touched)
    return int(times[keep].min()) if keep.any() else None
