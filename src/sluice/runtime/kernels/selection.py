"""Keyed operators that select records: ``deduplicate(within=...)`` and ``top(n, by=...)``,
vectorized over a batch (one key encoding, numpy masks and one sort; no Python per record).

**Deduplicate** (Spark's ``dropDuplicatesWithinWatermark``): the first record of a key
passes and opens the key's window ``[t, t + within)``, t its time (event time, or the
batch's processing time); every later record of the key is dropped while the window is
open, i.e. until the watermark (the clock) reaches ``t + within``; then the key's state is
gone and its next record passes again. Among a new key's records of one batch the earliest
passes (ties: the first delivered; duplicates are usually identical records). A record whose
own window would already be closed (``t + within <= watermark``) cannot be judged, since
the state that would have dropped it may be gone: it is late, counted and sent to the
``late`` side output, as windows do.

**Top-N**: per key, the ``n`` records with the largest ``by`` (``ascending=True``: the
smallest) seen so far. Each batch emits the current top ``n`` of every key whose top it
changed, with their ``rank`` (1 = first); ties keep the record that came first. The state
per key is its top ``n`` records as one list of structs.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.graph.windows import EventTime, ProcessingTime
from sluice.runtime.kernels.grouping import state_and_row_ids
from sluice.runtime.kernels.keyed import KEY_GROUP, BatchContext, KeyedKernel, KeyedResult
from sluice.runtime.kernels.window_state import LATE, late_table

EXPIRES = "__expires"  # dedup: when the key's window closes (microseconds)
TOP = "__top"  # top-N: the key's top records, a list of structs
RANK = "rank"


def _times(rows: pa.Table, time: EventTime | ProcessingTime, ctx: BatchContext) -> tuple[np.ndarray, np.ndarray]:
    """(time in microseconds, has-time mask) per record."""
    if isinstance(time, ProcessingTime):
        return np.full(rows.num_rows, ctx.processing_time, np.int64), np.ones(rows.num_rows, bool)
    column = rows[time.column]
    if pa.types.is_timestamp(column.type):
        column = pc.cast(pc.cast(column, pa.timestamp("us", tz=column.type.tz)), pa.int64())
    valid = np.asarray(pc.is_valid(column).to_numpy(zero_copy_only=False), bool)
    return np.asarray(pc.fill_null(column.cast(pa.int64()), 0).to_numpy(), np.int64), valid


class DeduplicateKernel(KeyedKernel):
    wants_timers = True  # a key's window closes on the watermark alone

    def __init__(self, key_columns: list[str], within_us: int, time: EventTime | ProcessingTime):
        super().__init__(key_columns)
        self.within = within_us
        self.time = time

    def state_schema(self, input_schema: pa.Schema) -> pa.Schema:
        return pa.schema([*(input_schema.field(k) for k in self.key_columns), pa.field(EXPIRES, pa.int64())])

    def output_schema(self, input_schema: pa.Schema) -> pa.Schema:
        return pa.schema([f for f in input_schema if f.name != KEY_GROUP])

    def _now(self, ctx: BatchContext) -> int | None:
        if isinstance(self.time, ProcessingTime):
            return int(ctx.processing_time)
        return None if ctx.watermark is None else int(ctx.watermark)

    def process(self, rows: pa.Table, state: pa.Table, ctx: BatchContext) -> KeyedResult:
        out_schema = self.output_schema(rows.schema)
        now = self._now(ctx)
        # 1. windows the watermark closed: their keys' state goes
        expires = np.asarray(state.column(EXPIRES).to_numpy(), np.int64) if state.num_rows else np.zeros(0, np.int64)
        closed = expires <= now if now is not None else np.zeros(len(expires), bool)
        key_cols = [*self.key_columns, KEY_GROUP]
        deletes = state.filter(pa.array(closed)).select(key_cols) if closed.any() else None
        if rows.num_rows == 0:
            return KeyedResult(out_schema.empty_table(), self._upserts(rows.schema, None), deletes)
        # 2. records too late to judge
        times, has_time = _times(rows, self.time, ctx)
        late = ~has_time
        if now is not None:
            late |= times <= now - self.within
        # 3. per key: is its window open (state), else the earliest on-time record passes
        ids, _, _ = state_and_row_ids(state, rows, self.key_columns)
        n_state = state.num_rows
        row_ids = ids[n_state:]
        open_ids = np.zeros(int(ids.max(initial=-1)) + 1, bool)
        open_ids[np.flatnonzero(~closed)] = True  # state row i has id i
        candidate = ~late & ~open_ids[row_ids]
        order = np.lexsort((np.arange(rows.num_rows), times, row_ids))  # by key, then time, then arrival
        order = order[candidate[order]]
        first = np.ones(len(order), bool)
        first[1:] = row_ids[order][1:] != row_ids[order][:-1]
        passed = np.sort(order[first])  # in arrival order
        output = rows.take(pa.array(passed)).select(out_schema.names)
        new_state = rows.take(pa.array(passed)).select(key_cols)
        new_state = new_state.append_column(EXPIRES, pa.array(times[passed] + self.within, pa.int64()))
        if deletes is not None and len(passed):  # a closed key that opened again is written, not deleted
            reopened = np.zeros(len(open_ids), bool)
            reopened[row_ids[passed]] = True
            gone = closed & ~reopened[:n_state]
            deletes = state.filter(pa.array(gone)).select(key_cols) if gone.any() else None
        side = {}
        if late.any():
            side[LATE] = late_table(rows, late, "deduplicate", NO_TIME if now is None else now)
        return KeyedResult(
            output,
            self._upserts(rows.schema, new_state),
            deletes,
            side_outputs=side,
            metrics={"duplicates": int(rows.num_rows - len(passed) - late.sum())},
        )

    def _upserts(self, schema: pa.Schema, new_state: pa.Table | None) -> pa.Table:
        upsert_schema = self.state_schema(schema).append(pa.field(KEY_GROUP, pa.int32()))
        if new_state is None:
            return upsert_schema.empty_table()
        return new_state.select(upsert_schema.names).cast(upsert_schema)


NO_TIME = -(2**63)


class TopKernel(KeyedKernel):
    def __init__(self, key_columns: list[str], n: int, by: list[str], ascending: bool = False):
        super().__init__(key_columns)
        self.n = n
        self.by = list(by)
        self.ascending = ascending

    def _record(self, input_schema: pa.Schema) -> pa.StructType:
        return pa.struct([f for f in input_schema if f.name != KEY_GROUP and f.name not in self.key_columns])

    def state_schema(self, input_schema: pa.Schema) -> pa.Schema:
        return pa.schema(
            [*(input_schema.field(k) for k in self.key_columns), pa.field(TOP, pa.list_(self._record(input_schema)))]
        )

    def output_schema(self, input_schema: pa.Schema) -> pa.Schema:
        return pa.schema([f for f in input_schema if f.name != KEY_GROUP] + [pa.field(RANK, pa.int32())])

    def process(self, rows: pa.Table, state: pa.Table, ctx: BatchContext) -> KeyedResult:
        out_schema = self.output_schema(rows.schema)
        upsert_schema = self.state_schema(rows.schema).append(pa.field(KEY_GROUP, pa.int32()))
        if rows.num_rows == 0:
            return KeyedResult(out_schema.empty_table(), upsert_schema.empty_table())
        record_type = self._record(rows.schema)
        fields = [f.name for f in record_type]
        # the candidates: every key's kept records (state, flattened), then the batch's rows
        n_state = state.num_rows
        ids, first, all_keys = state_and_row_ids(state, rows, self.key_columns)
        kept = state.column(TOP).combine_chunks() if n_state else pa.array([], pa.list_(record_type))
        kept_records = pc.list_flatten(kept)
        kept_owner = np.asarray(pc.list_parent_indices(kept).to_numpy(), np.int64) if len(kept_records) else np.zeros(0, np.int64)
        flat = {
            name: pa.chunked_array([kept_records.field(name), *rows.column(name).chunks], type=rows.schema.field(name).type)
            for name in fields
        }
        key_id = np.concatenate([ids[:n_state][kept_owner], ids[n_state:]])
        from_batch = np.concatenate([np.zeros(len(kept_records), bool), np.ones(rows.num_rows, bool)])
        touched = np.unique(ids[n_state:])
        mask = np.isin(key_id, touched)  # only keys with new records can change
        positions = np.flatnonzero(mask)
        # sort by key, then by (the by columns), then arrival (kept records before new ones)
        sort_keys: list = [("__key", "ascending", "at_end")]
        order_table = pa.table({"__key": pa.array(key_id[positions]), "__pos": pa.array(positions)})
        for i, column in enumerate(self.by):
            order_table = order_table.append_column(f"__by{i}", flat[column].take(pa.array(positions)))
            sort_keys.append((f"__by{i}", "ascending" if self.ascending else "descending", "at_end"))
        sort_keys.append(("__pos", "ascending", "at_end"))
        order = np.asarray(pc.sort_indices(order_table, sort_keys=sort_keys).to_numpy(), np.int64)
        sorted_pos = positions[order]
        sorted_key = key_id[sorted_pos]
        starts = np.ones(len(sorted_key), bool)
        starts[1:] = sorted_key[1:] != sorted_key[:-1]
        group_start = np.maximum.accumulate(np.where(starts, np.arange(len(sorted_key)), 0))
        rank = np.arange(len(sorted_key)) - group_start
        top = rank < self.n
        chosen, chosen_rank, chosen_key = sorted_pos[top], rank[top], sorted_key[top]
        # a key's top changed when one of the batch's records entered it
        changed_keys = np.unique(chosen_key[from_batch[chosen]])
        emit = np.isin(chosen_key, changed_keys)
        chosen, chosen_rank, chosen_key = chosen[emit], chosen_rank[emit], chosen_key[emit]
        take = pa.array(chosen)
        records = {name: flat[name].take(take) for name in fields}
        key_rows = all_keys.take(pa.array(first[chosen_key]))
        kg_all = pa.chunked_array(
            (state.column(KEY_GROUP).chunks if n_state else []) + rows.column(KEY_GROUP).chunks, type=pa.int32()
        )
        kg = kg_all.take(pa.array(first[chosen_key]))
        columns = {**{k: key_rows[k] for k in self.key_columns}, **records, RANK: pa.array(chosen_rank + 1, pa.int32())}
        output = pa.table([columns[f.name] for f in out_schema], schema=out_schema)
        # the new state of the changed keys: their chosen records, one list per key
        bounds = np.flatnonzero(np.r_[True, chosen_key[1:] != chosen_key[:-1]]) if len(chosen_key) else np.zeros(0, int)
        offsets = pa.array(np.r_[bounds, len(chosen_key)].astype(np.int32))
        values = pa.StructArray.from_arrays([records[name].combine_chunks() for name in fields], fields=list(record_type))
        lists = pa.ListArray.from_arrays(offsets, values, type=pa.list_(record_type))
        heads = pa.array(bounds)
        key_heads = key_rows.take(heads)
        upserts = pa.table([*(key_heads[k] for k in self.key_columns), lists, kg.take(heads)], schema=upsert_schema)
        return KeyedResult(output, upserts)
