"""State TTL around any keyed kernel (``graph.ttl``): a key whose state no record has
written for the TTL is gone, and its next record starts it fresh.

The wrapper keeps one more state column, ``__ttl_ts``: when a record last wrote the key's
state (the batch's watermark, or its processing time). Every batch it sees the state of
every key group its partition owns (``wants_timers``) and runs one expiry pass over it in
numpy: ``stamp + ttl <= now`` marks the expired keys, which the wrapped kernel never sees
(so a record of such a key starts from no state) and which are deleted from the store unless
that record wrote them again. Expiry is exact at the boundary: a key written at ``t``
lives while ``now < t + ttl``. The stamp is state like any other, so it is committed with
the batch, survives restarts and moves with its key group.

A key written in a batch with no watermark yet (event time, first batch) gets no stamp; the
first batch that has one stamps it (a write of its state as it is), so no key escapes expiry.
Writes without records (a window closing on the watermark) keep the key's stamp: the TTL
counts from the last record.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.graph.ttl import StateTTL
from sluice.runtime.kernels.grouping import dense_ids
from sluice.runtime.kernels.keyed import KEY_GROUP, BatchContext, KeyedKernel, KeyedResult
from sluice.runtime.kernels.panes import END_OF_TIME

STAMP = "__ttl_ts"


class TTLKernel(KeyedKernel):
    """``inner`` with its keys' state expiring after ``ttl``."""

    wants_timers = True  # expiry needs every key group's state, also without new rows

    def __init__(self, inner: KeyedKernel, ttl: StateTTL):
        super().__init__(inner.key_columns)
        self.inner = inner
        self.ttl = ttl

    def state_schema(self, input_schema: pa.Schema) -> pa.Schema:
        return self.inner.state_schema(input_schema).append(pa.field(STAMP, pa.int64()))

    def output_schema(self, input_schema: pa.Schema) -> pa.Schema:
        return self.inner.output_schema(input_schema)

    def input_columns(self, input_schema: pa.Schema) -> list[str]:
        return self.inner.input_columns(input_schema)

    def now(self, ctx: BatchContext) -> int | None:
        """The batch's time on the TTL's clock (None: unknown, before the first watermark)."""
        if self.ttl.time == "processing":
            return int(ctx.processing_time)
        if ctx.watermark is None:
            return None
        return min(int(ctx.watermark), END_OF_TIME)

    def expired(self, stamps: pa.ChunkedArray | pa.Array, now: int | None) -> np.ndarray:
        """Which stamps have expired by ``now`` (a null stamp never has)."""
        values = np.asarray(pc.fill_null(stamps, 0).to_numpy(), np.int64) if len(stamps) else np.zeros(0, np.int64)
        if now is None or len(values) == 0:
            return np.zeros(len(values), dtype=bool)
        valid = np.asarray(pc.is_valid(stamps).to_numpy(zero_copy_only=False), bool)
        return valid & (values <= now - self.ttl.ttl_us)  # stamp + ttl <= now, without overflow

    def process(self, rows: pa.Table, state: pa.Table, ctx: BatchContext) -> KeyedResult:
        now = self.now(ctx)
        stamps = state.column(STAMP) if state.num_rows else pa.array([], pa.int64())
        expired = self.expired(stamps, now)
        live = state.filter(pa.array(~expired)) if expired.any() else state
        inner_state = live.drop_columns([STAMP])
        if not self.inner.wants_timers and inner_state.num_rows:
            # the wrapped kernel reads only the key groups of its rows, as it would unwrapped
            groups_with_rows = (
                np.unique(np.asarray(rows.column(KEY_GROUP).to_numpy(), np.int32)) if rows.num_rows else np.zeros(0, np.int32)
            )
            mine = np.isin(np.asarray(inner_state.column(KEY_GROUP).to_numpy(), np.int32), groups_with_rows)
            inner_state = inner_state.filter(pa.array(mine))
        result = self.inner.process(rows, inner_state, ctx)

        upserts = self._stamped(result.upserts, rows, live, now)
        restamped = self._restamp(live, upserts, now)
        if restamped is not None:
            upserts = pa.concat_tables([upserts, restamped])
        deletes = self._deletes(state.filter(pa.array(expired)), upserts, result.deletes) if expired.any() else result.deletes
        metrics = dict(result.metrics)
        side_outputs = result.side_outputs
        if expired.any():
            metrics["ttl_expired"] = int(expired.sum())
            if self.ttl.on_expiry is not None:
                side_outputs = {**side_outputs, self.ttl.on_expiry: self._expiry_records(state.filter(pa.array(expired)), now)}
        return KeyedResult(
            output=result.output,
            upserts=upserts,
            deletes=deletes,
            side_outputs=side_outputs,
            metrics=metrics,
            peaks=result.peaks,
            key_ids=result.key_ids,
            dead_letters=result.dead_letters,
        )

    def _expiry_records(self, expired: pa.Table, now: int | None) -> pa.Table:
        """One record per expired key: its key and last state (as the store holds it),
        ``last_write`` and ``expired_at`` on the TTL's clock (null at the end of input, whose
        watermark is the end of time and expires every key)."""
        stamps = expired.column(STAMP).cast(pa.timestamp("us", tz="UTC"))
        table = expired.drop_columns([KEY_GROUP, STAMP])
        # the end of input moves the watermark to the end of time: no date to give there
        known = now is not None and now < END_OF_TIME
        at = pa.array(
            np.full(expired.num_rows, now if known else 0, np.int64), mask=None if known else np.ones(expired.num_rows, bool)
        )
        at = at.cast(pa.timestamp("us", tz="UTC"))
        return table.append_column("last_write", stamps).append_column("expired_at", at)

    def _stamped(self, upserts: pa.Table, rows: pa.Table, live: pa.Table, now: int | None) -> pa.Table:
        """The wrapped kernel's upserts with their stamps: now for keys a record of the batch
        wrote; the key's stamp before for keys written by time alone (windows)."""
        n = upserts.num_rows
        if n == 0:
            return upserts.append_column(STAMP, pa.array([], pa.int64()))
        fresh = pa.array(np.full(n, now if now is not None else 0, np.int64), mask=None if now is not None else np.ones(n, bool))
        if not self.inner.wants_timers:  # every write comes from a record of the batch
            return upserts.append_column(STAMP, fresh)
        keys = self.key_columns
        ids = dense_ids([_concat([upserts[k], rows[k], live[k]], upserts.schema.field(k).type) for k in keys])
        up_ids, row_ids, live_ids = ids[:n], ids[n : n + rows.num_rows], ids[n + rows.num_rows :]
        had_rows = np.isin(up_ids, row_ids)
        old = np.full(int(ids.max(initial=-1)) + 1, -1, np.int64)
        old_valid = np.zeros(len(old), bool)
        if live.num_rows:
            live_stamps = live.column(STAMP)
            old[live_ids] = np.asarray(pc.fill_null(live_stamps, 0).to_numpy(), np.int64)
            old_valid[live_ids] = np.asarray(pc.is_valid(live_stamps).to_numpy(zero_copy_only=False), bool)
        keep_old = ~had_rows & old_valid[up_ids]
        values = np.where(keep_old, old[up_ids], now if now is not None else 0)
        valid = keep_old | (now is not None)
        return upserts.append_column(STAMP, pa.array(values, pa.int64(), mask=~valid))

    def _restamp(self, live: pa.Table, upserts: pa.Table, now: int | None) -> pa.Table | None:
        """Keys written before the first watermark, not written again now: stamped with the
        first watermark (their state as it is)."""
        if now is None or not live.num_rows or live.column(STAMP).null_count == 0:
            return None
        unstamped = np.asarray(pc.is_null(live.column(STAMP)).to_numpy(zero_copy_only=False), bool)
        if upserts.num_rows:
            n = live.num_rows
            ids = dense_ids([_concat([live[k], upserts[k]], live.schema.field(k).type) for k in self.key_columns])
            unstamped &= ~np.isin(ids[:n], ids[n:])
        if not unstamped.any():
            return None
        rows = live.filter(pa.array(unstamped))
        rows = rows.set_column(rows.schema.get_field_index(STAMP), STAMP, pa.array(np.full(rows.num_rows, now, np.int64)))
        return rows.select(upserts.column_names).cast(upserts.schema)

    def _deletes(self, expired: pa.Table, upserts: pa.Table, inner_deletes: pa.Table | None) -> pa.Table | None:
        """Expired keys to delete from the store: those no record wrote again in this batch."""
        columns = [*self.key_columns, KEY_GROUP]
        gone = expired.select(columns)
        if upserts.num_rows:
            n = gone.num_rows
            ids = dense_ids([_concat([gone[k], upserts[k]], gone.schema.field(k).type) for k in self.key_columns])
            gone = gone.filter(pa.array(~np.isin(ids[:n], ids[n:])))
        if inner_deletes is not None and inner_deletes.num_rows:
            gone = pa.concat_tables([gone, inner_deletes.select(columns).cast(gone.schema)])
        return gone if gone.num_rows else inner_deletes


def _concat(columns: list, dtype: pa.DataType) -> pa.ChunkedArray:
    chunks: list[pa.Array] = []
    for column in columns:
        typed = column.cast(dtype) if column.type != dtype else column
        chunks += typed.chunks if isinstance(typed, pa.ChunkedArray) else [typed]
    return pa.chunked_array(chunks, type=dtype)
