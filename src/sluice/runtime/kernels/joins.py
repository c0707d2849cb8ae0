"""Join kernels: a windowed or interval stream-stream join, and a table lookup, over Arrow.

Both read the tagged union of ``sluice.graph.joins`` (key columns, ``__side``, each side's
columns under a prefixed name) routed by key group, and keep their state in the key-group
store: one state row per key, holding each side's buffered records as lists.

**Stream-stream join** (:class:`StreamJoinKernel`). A record of a window join is an *entry*
per window it belongs to (coordinate: the window's index j); a record of an interval join
is one entry (coordinate: its event time). Two entries match when their keys are equal and
not null (SQL: NULL never equals NULL; NaN equals NaN and -0.0 equals 0.0, as in Spark and
PostgreSQL) and their coordinates are equal (window) or ``right.t - left.t`` is within
``[lower, upper]`` (interval). For a batch with watermark W and allowed lateness L:

1. An entry lives while ``W < horizon``: window ``end + L``; interval, left ``t + upper +
   L + 1``, right ``t - lower + L + 1`` (after that no record that is not late can match it).
2. A record is *late* when it has no live entry to make: window, every window it belongs to
   has ``end + L <= W``; interval, ``t + L < W``; a null event time is late. Late records go
   to the ``late`` side output, with the side in ``late_for``.
3. In a batch: (A) entries from before the batch that no longer live are evicted, and an
   outer join emits the unmatched ones padded with nulls; (B) the batch's entries are
   matched against the live entries and each other, and every new pair is emitted at once
   (as Spark emits an inner join's matches); (C) new entries that live are buffered, the
   others (and records with a null key) are emitted padded with nulls if unmatched and
   their side is kept.

Every pair of records that are not late meets (whichever arrives second finds the first
still buffered), so with records out of order by less than the watermark's delay the
output is exactly the join of the whole streams (``tests/joins/test_joins_kernel.py`` checks it
against a brute-force join). Matching is a sort and two binary searches over (key,
coordinate), vectorized in numpy; no loop runs per record.

**Table lookup** (:class:`TableLookupKernel`). The right side is a changelog; its latest row
per key (by the version column) is the key's state. A batch first applies the table's
rows, then enriches the left records with the table's row of their key (inner: records
without one are dropped; left: padded with nulls).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.graph.joins import LEFT, RIGHT, SIDE, JoinSides, StreamJoin, TableLookup, side_column
from sluice.graph.windows import WINDOW_END, WINDOW_START
from sluice.runtime.kernels.grouping import state_and_row_ids
from sluice.runtime.kernels.keyed import KEY_GROUP, BatchContext, KeyedKernel, KeyedResult
from sluice.runtime.kernels.panes import END_OF_TIME, NO_WATERMARK, pair_searchsorted, sort_pairs

LATE = "late"
LATE_FOR = "late_for"
LATE_WATERMARK = "watermark"
SIDE_NAMES = ("left", "right")
# per side, in a state row: lists of the buffered entries' event time, coordinate, matched flag
TIME, COORD, MATCHED = "#time", "#coord", "#matched"


def event_micros(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(microseconds since the epoch, is-valid) of an event-time column."""
    if pa.types.is_timestamp(column.type):
        column = pc.cast(pc.cast(column, pa.timestamp("us", tz=column.type.tz)), pa.int64())
    elif column.type != pa.int64():
        column = pc.cast(column, pa.int64())
    n = len(column)
    valid = np.asarray(pc.is_valid(column), dtype=bool) if column.null_count else np.ones(n, dtype=bool)
    values = np.asarray(pc.fill_null(column, 0).to_numpy(), dtype=np.int64) if n else np.zeros(0, np.int64)
    return values, valid


def key_is_valid(rows: pa.Table, keys: list[str]) -> np.ndarray:
    """True for rows whose key has no null part: only those can ever match."""
    valid = np.ones(rows.num_rows, dtype=bool)
    for k in keys:
        if rows[k].null_count:
            valid &= np.asarray(pc.is_valid(rows[k]), dtype=bool)
    return valid


def key_groups(state: pa.Table, rows: pa.Table) -> np.ndarray:
    """The key group of every row of state then rows (one numpy array: a cast per chunk of a
    many-chunk state cost more than the rest of the state update)."""
    parts = [np.asarray(t[KEY_GROUP].to_numpy(), np.int32) for t in (state, rows) if t.num_rows]
    return np.concatenate(parts) if parts else np.zeros(0, np.int32)


def watermark_of(ctx: BatchContext) -> int:
    wm = NO_WATERMARK if ctx.watermark is None else int(ctx.watermark)
    return min(max(wm, NO_WATERMARK), END_OF_TIME)


def matching_pairs(
    left_key: np.ndarray, left_coord: np.ndarray, right_key: np.ndarray, right_coord: np.ndarray, lower: int, upper: int
) -> tuple[np.ndarray, np.ndarray]:
    """Every (left index, right index) with equal keys and ``right_coord - left_coord`` in
    ``[lower, upper]``: a sort of the right side by (key, coordinate) and two binary
    searches per left entry, then the ranges expanded (no loop per entry)."""
    if len(left_key) == 0 or len(right_key) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = sort_pairs(right_key, right_coord)
    key, coord = right_key[order], right_coord[order]
    bounds = pair_searchsorted(
        key, coord, np.concatenate([left_key, left_key]), np.concatenate([left_coord + lower, left_coord + upper + 1])
    )
    lo, hi = bounds[: len(left_key)], bounds[len(left_key) :]
    counts = np.maximum(hi - lo, 0)
    total = int(counts.sum())
    left = np.repeat(np.arange(len(left_key)), counts)
    offsets = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    return left, order[np.repeat(lo, counts) + offsets]


@dataclass
class Entries:
    """One side's buffered entries (or a batch's new ones), column-wise."""

    key: np.ndarray  # key id (state_and_row_ids' numbering)
    coord: np.ndarray  # window index (window join) or event time (interval join)
    time: np.ndarray  # event time, microseconds
    matched: np.ndarray  # matched at least once
    payload: pa.Table  # the side's columns, under their union names

    def __len__(self) -> int:
        return len(self.key)

    def take(self, at: np.ndarray) -> Entries:
        return Entries(self.key[at], self.coord[at], self.time[at], self.matched[at], self.payload.take(pa.array(at)))

    @staticmethod
    def concat(a: Entries, b: Entries) -> Entries:
        return Entries(
            np.concatenate([a.key, b.key]),
            np.concatenate([a.coord, b.coord]),
            np.concatenate([a.time, b.time]),
            np.concatenate([a.matched, b.matched]),
            pa.concat_tables([a.payload, b.payload]),
        )


class JoinKernelBase(KeyedKernel):
    """What both join kernels share: the tagged union's schemas and the output's naming."""

    def __init__(self, spec: StreamJoin | TableLookup, left: pa.Schema, right: pa.Schema):
        super().__init__(list(spec.sides.left_keys))
        self.spec = spec
        self.sides: JoinSides = spec.sides
        self.left_schema, self.right_schema = left, right
        self.union = self.sides.union_schema(left, right)
        self.out_schema = spec.output_schema(left, right)
        extra = spec.window_columns() if isinstance(spec, StreamJoin) else ()
        lout, rout = self.sides.output_names(left, right, extra)
        self.payload = [
            [side_column(s, f.name) for f in self.sides.payload(s, schema)] for s, schema in ((LEFT, left), (RIGHT, right))
        ]
        self.renames = [dict(zip(self.payload[LEFT], lout)), dict(zip(self.payload[RIGHT], rout))]

    def output_schema(self, input_schema: pa.Schema) -> pa.Schema:
        return self.out_schema

    def _emit(
        self, keys: pa.Table, extra: dict[str, pa.Array], left: pa.Table | None, right: pa.Table | None, n: int
    ) -> pa.Table:
        """Output rows: key columns, extra (window) columns, both sides' columns (a missing
        side is all nulls)."""
        columns: dict[str, pa.Array | pa.ChunkedArray] = {k: keys[k] for k in self.key_columns}
        columns.update(extra)
        for side, table in ((LEFT, left), (RIGHT, right)):
            for name in self.payload[side]:
                out = self.renames[side][name]
                columns[out] = table[name] if table is not None else pa.nulls(n, self.out_schema.field(out).type)
        return pa.table(columns).select(self.out_schema.names).cast(self.out_schema)

    def _late(self, rows: pa.Table, mask: np.ndarray, side: int, wm: int) -> pa.Table | None:
        """The side's late records as the user wrote them (own column names)."""
        if not mask.any():
            return None
        picked = rows.filter(pa.array(mask))
        keys = self.sides.left_keys if side == LEFT else self.sides.right_keys
        columns = {k: picked[lk] for k, lk in zip(keys, self.sides.left_keys)}
        schema = self.left_schema if side == LEFT else self.right_schema
        for f in self.sides.payload(side, schema):
            columns[f.name] = picked[side_column(side, f.name)]
        columns[LATE_FOR] = pa.array([SIDE_NAMES[side]] * picked.num_rows, pa.string())
        columns[LATE_WATERMARK] = pa.array(np.full(picked.num_rows, wm, np.int64))
        return pa.table(columns)


class StreamJoinKernel(JoinKernelBase):
    """A windowed (tumbling, sliding) or interval join of two keyed streams on event time."""

    wants_timers = True  # entries expire, and outer rows are emitted, on the watermark alone

    def __init__(self, spec: StreamJoin, left: pa.Schema, right: pa.Schema):
        super().__init__(spec, left, right)
        self.join = spec
        self.times = (side_column(LEFT, str(spec.sides.left_time)), side_column(RIGHT, str(spec.sides.right_time)))
        self.wtype = self.out_schema.field(WINDOW_START).type if spec.window is not None else None

    # -- schemas ----------------------------------------------------------------------
    def state_schema(self, input_schema: pa.Schema) -> pa.Schema:
        fields = [self.union.field(k) for k in self.key_columns]
        for side in (LEFT, RIGHT):
            prefix = side_column(side, "")
            fields += [
                pa.field(prefix + TIME, pa.list_(pa.int64())),
                pa.field(prefix + COORD, pa.list_(pa.int64())),
                pa.field(prefix + MATCHED, pa.list_(pa.bool_())),
            ]
            fields += [pa.field(name, pa.list_(self.union.field(name).type)) for name in self.payload[side]]
        return pa.schema(fields)

    # -- the time condition -------------------------------------------------------------
    def _horizon(self, side: int, coord: np.ndarray, time: np.ndarray) -> np.ndarray:
        """Rule 1: an entry lives while the watermark is below its horizon."""
        late = self.join.allowed_lateness
        if self.join.window is not None:
            return coord * self.join.window.slide + self.join.window.size + late
        lower, upper = self.join.between or (0, 0)
        return time + (upper if side == LEFT else -lower) + late + 1

    def _entries_of(self, times: np.ndarray, ok: np.ndarray, wm: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row of each entry, its coordinate, is-late per row) for records ``ok`` with ``times``."""
        late = self.join.allowed_lateness
        if self.join.window is None:  # interval: one entry per record
            is_late = ~ok | (times + late < wm)
            rows = np.flatnonzero(~is_late)
            return rows, times[rows], is_late
        size, slide = self.join.window.size, self.join.window.slide
        first = np.floor_divide(times - size, slide) + 1  # windows [j*slide, j*slide + size) holding t
        last = np.floor_divide(times, slide)
        # only windows still open: end + L > W
        first = np.maximum(first, np.floor_divide(wm - late - size, slide) + 1)
        count = np.where(ok, np.maximum(last - first + 1, 0), 0)
        rows = np.repeat(np.arange(len(times)), count)
        offsets = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
        return rows, np.repeat(first, count) + offsets, ok & (count == 0) | ~ok

    # -- one batch --------------------------------------------------------------------
    def process(self, rows: pa.Table, state: pa.Table, ctx: BatchContext) -> KeyedResult:
        wm = watermark_of(ctx)
        ids, first, all_keys = state_and_row_ids(state, rows, self.key_columns)
        n_state = state.num_rows
        row_ids = ids[n_state:]
        side_of = np.asarray(rows[SIDE].to_numpy(), np.int64) if rows.num_rows else np.zeros(0, np.int64)
        has_key = key_is_valid(rows, self.key_columns)
        outputs: list[pa.Table] = []
        late_parts: list[pa.Table] = []
        changed = np.zeros(n_state + rows.num_rows, dtype=bool)
        live: list[Entries] = []
        n_old: list[int] = []
        news: list[Entries] = []
        new_lives: list[np.ndarray] = []
        for side in (LEFT, RIGHT):
            old = self._state_entries(state, side)
            # (A) evict what no longer lives; an outer join emits the unmatched
            alive = self._horizon(side, old.coord, old.time) > wm
            if not alive.all():
                changed[old.key[~alive]] = True
                self._unmatched(old.take(np.flatnonzero(~alive & ~old.matched)), side, all_keys, first, outputs)
                old = old.take(np.flatnonzero(alive))
            # the batch's records of this side: entries, late ones, null keys
            mine = side_of == side
            times, valid_time = (
                event_micros(rows[self.times[side]]) if rows.num_rows else (np.zeros(0, np.int64), np.zeros(0, bool))
            )
            at, coord, is_late = self._entries_of(times, mine & valid_time, wm)
            late = mine & is_late
            part = self._late(rows, late, side, wm)
            if part is not None:
                late_parts.append(part)
            # a record whose key has a null part never matches: padded at once, never buffered
            null_key = at[~has_key[at]]
            if len(null_key) and self.join.keeps_unmatched(side):
                nulls = Entries(
                    row_ids[null_key],
                    coord[~has_key[at]],
                    times[null_key],
                    np.zeros(len(null_key), bool),
                    rows.select(self.payload[side]).take(pa.array(null_key)),
                )
                self._unmatched(nulls, side, all_keys, first, outputs)
            keep = has_key[at]
            at, coord = at[keep], coord[keep]
            new = Entries(
                row_ids[at], coord, times[at], np.zeros(len(at), bool), rows.select(self.payload[side]).take(pa.array(at))
            )
            live.append(Entries.concat(old, new))
            n_old.append(len(old))
            news.append(new)
            new_lives.append(self._horizon(side, new.coord, new.time) > wm)
        # (B) new pairs: new left against all right, old left against new right
        left, right = live
        lower, upper = self.join.between or (0, 0)  # a window join matches on equal windows
        li1, ri1 = matching_pairs(news[LEFT].key, news[LEFT].coord, right.key, right.coord, lower, upper)
        new_right = news[RIGHT]
        li2, ri2 = matching_pairs(
            left.key[: n_old[LEFT]], left.coord[: n_old[LEFT]], new_right.key, new_right.coord, lower, upper
        )
        li = np.concatenate([li1 + n_old[LEFT], li2])
        ri = np.concatenate([ri1, ri2 + n_old[RIGHT]])
        if len(li):
            outputs.append(self._pairs(left, right, li, ri, all_keys, first))
            for entries, hit in ((left, li), (right, ri)):
                flips = hit[~entries.matched[hit]]
                changed[entries.key[flips]] = True
                entries.matched[flips] = True
        # (C) buffer new entries that live; the others, if unmatched, padded now
        kept = []  # per side: which of its entries stay buffered
        for side, entries in ((LEFT, left), (RIGHT, right)):
            keep = np.ones(len(entries), dtype=bool)
            keep[n_old[side] :] = new_lives[side]
            gone = np.flatnonzero(~keep & ~entries.matched)
            self._unmatched(entries.take(gone), side, all_keys, first, outputs)
            changed[entries.key[n_old[side] :][new_lives[side]]] = True
            kept.append(keep)
        upserts, deletes = self._state_changes(live, kept, changed, n_state, all_keys, first, state, rows)
        output = pa.concat_tables(outputs) if outputs else self.out_schema.empty_table()
        side_outputs = {}
        if late_parts:
            side_outputs[LATE] = pa.concat_tables(late_parts, promote_options="permissive")
        late_n = sum(t.num_rows for t in late_parts)
        return KeyedResult(
            output,
            upserts,
            deletes,
            side_outputs,
            {"late_seen": late_n, "buffered": int(sum(k.sum() for k in kept))}
            if late_n
            else {"buffered": int(sum(k.sum() for k in kept))},
        )

    # -- pieces -----------------------------------------------------------------------
    def _state_entries(self, state: pa.Table, side: int) -> Entries:
        prefix = side_column(side, "")
        if state.num_rows == 0:
            empty = np.zeros(0, np.int64)
            return Entries(
                empty, empty, empty, np.zeros(0, bool), pa.schema([self.union.field(n) for n in self.payload[side]]).empty_table()
            )
        times = state[prefix + TIME].combine_chunks()
        key = np.asarray(pc.list_parent_indices(times).to_numpy(), np.int64)

        def flat(name: str) -> pa.Array:
            return pc.list_flatten(state[name].combine_chunks())

        payload = pa.table(
            {n: flat(n) for n in self.payload[side]}, schema=pa.schema([self.union.field(n) for n in self.payload[side]])
        )
        return Entries(
            key,
            np.asarray(flat(prefix + COORD).to_numpy(), np.int64),
            np.asarray(flat(prefix + TIME).to_numpy(), np.int64),
            np.asarray(flat(prefix + MATCHED).to_numpy(zero_copy_only=False), bool),
            payload,
        )

    def _window_columns(self, coord: np.ndarray) -> dict[str, pa.Array]:
        if self.join.window is None:
            return {}
        start = coord * self.join.window.slide
        return {
            WINDOW_START: pa.array(start).cast(self.wtype),
            WINDOW_END: pa.array(start + self.join.window.size).cast(self.wtype),
        }

    def _pairs(
        self, left: Entries, right: Entries, li: np.ndarray, ri: np.ndarray, all_keys: pa.Table, first: np.ndarray
    ) -> pa.Table:
        keys = all_keys.take(pa.array(first[left.key[li]]))
        return self._emit(
            keys, self._window_columns(left.coord[li]), left.payload.take(pa.array(li)), right.payload.take(pa.array(ri)), len(li)
        )

    def _unmatched(self, entries: Entries, side: int, all_keys: pa.Table, first: np.ndarray, outputs: list[pa.Table]) -> None:
        if len(entries) == 0 or not self.join.keeps_unmatched(side):
            return
        keys = all_keys.take(pa.array(first[entries.key]))
        left, right = (entries.payload, None) if side == LEFT else (None, entries.payload)
        outputs.append(self._emit(keys, self._window_columns(entries.coord), left, right, len(entries)))

    def _state_changes(
        self,
        entries_of: list[Entries],
        kept: list[np.ndarray],
        changed: np.ndarray,
        n_state: int,
        all_keys: pa.Table,
        first: np.ndarray,
        state: pa.Table,
        rows: pa.Table,
    ) -> tuple[pa.Table, pa.Table | None]:
        """New state rows of changed keys with buffered entries (``kept`` of ``entries_of``);
        deletes for the others."""
        n_keys = len(changed)
        counts = [np.bincount(e.key[k], minlength=n_keys) for e, k in zip(entries_of, kept)]
        remaining = counts[LEFT] + counts[RIGHT]
        upsert_ids = np.flatnonzero(changed & (remaining > 0))
        delete_ids = np.flatnonzero(changed & (remaining == 0) & (np.arange(n_keys) < n_state))
        kg = key_groups(state, rows)
        state_schema = self.state_schema(self.union).append(pa.field(KEY_GROUP, pa.int32()))
        upserts = state_schema.empty_table()
        if len(upsert_ids):
            at = pa.array(first[upsert_ids])
            keys = all_keys.take(at)
            columns: dict[str, pa.Array] = {k: keys[k] for k in self.key_columns}
            wanted = np.zeros(n_keys, dtype=bool)
            wanted[upsert_ids] = True
            for side, entries in enumerate(entries_of):
                prefix = side_column(side, "")
                pick = np.flatnonzero(kept[side] & wanted[entries.key])
                order = pick[np.argsort(entries.key[pick], kind="stable")]
                offsets = np.zeros(len(upsert_ids) + 1, np.int32)
                np.cumsum(counts[side][upsert_ids], out=offsets[1:])
                bounds = pa.array(offsets, pa.int32())
                columns[prefix + TIME] = pa.ListArray.from_arrays(bounds, pa.array(entries.time[order], pa.int64()))
                columns[prefix + COORD] = pa.ListArray.from_arrays(bounds, pa.array(entries.coord[order], pa.int64()))
                columns[prefix + MATCHED] = pa.ListArray.from_arrays(bounds, pa.array(entries.matched[order], pa.bool_()))
                taken = entries.payload.take(pa.array(order))
                for name in self.payload[side]:
                    columns[name] = pa.ListArray.from_arrays(bounds, taken[name].combine_chunks())
            columns[KEY_GROUP] = pa.array(kg[first[upsert_ids]], pa.int32())
            upserts = pa.table(columns).cast(state_schema)
        deletes = None
        if len(delete_ids):
            at = pa.array(first[delete_ids])
            keys = all_keys.take(at)
            deletes = pa.table({**{k: keys[k] for k in self.key_columns}, KEY_GROUP: pa.array(kg[first[delete_ids]], pa.int32())})
        return upserts, deletes


class TableLookupKernel(JoinKernelBase):
    """Left records enriched with the latest row of their key in a table given as a changelog."""

    def __init__(self, spec: TableLookup, left: pa.Schema, right: pa.Schema):
        super().__init__(spec, left, right)
        self.lookup = spec
        self.version = side_column(RIGHT, spec.version)
        self.deleted = side_column(RIGHT, spec.deleted) if spec.deleted else None

    def state_schema(self, input_schema: pa.Schema) -> pa.Schema:
        """One row per key: the table's row (its columns under their union names)."""
        return pa.schema([self.union.field(k) for k in self.key_columns] + [self.union.field(n) for n in self.payload[RIGHT]])

    def process(self, rows: pa.Table, state: pa.Table, ctx: BatchContext) -> KeyedResult:
        ids, first, all_keys = state_and_row_ids(state, rows, self.key_columns)
        n_state, n_keys = state.num_rows, len(first)
        row_ids = ids[n_state:]
        side_of = np.asarray(rows[SIDE].to_numpy(), np.int64) if rows.num_rows else np.zeros(0, np.int64)
        has_key = key_is_valid(rows, self.key_columns)
        # the table: committed rows, then the batch's changelog, the highest version per key winning
        changes = np.flatnonzero((side_of == RIGHT) & has_key)
        table_rows = pa.concat_tables(
            [
                state.select(self.payload[RIGHT]).cast(self._payload_schema()),
                rows.select(self.payload[RIGHT]).take(pa.array(changes)),
            ]
        )
        key = np.concatenate([np.arange(n_state), row_ids[changes]])
        version, has_version = event_micros(table_rows[self.version])
        version = np.where(has_version, version, np.iinfo(np.int64).min)
        # stable order by (key, version): the last row of each key is its newest (ties: the
        # committed row first, then the changelog's order)
        order = np.lexsort((version, key))
        last = order[np.r_[key[order][1:] != key[order][:-1], True]] if len(order) else order
        winner = np.full(n_keys, -1, np.int64)
        winner[key[last]] = last
        exists = winner >= 0
        if self.deleted is not None and len(table_rows):
            gone = np.asarray(pc.fill_null(table_rows[self.deleted], False).to_numpy(zero_copy_only=False), bool)
            exists &= ~np.where(winner >= 0, gone[np.maximum(winner, 0)], False)
        # the state of keys whose row the changelog replaced; a deleted key keeps its row as a
        # tombstone, so that an older version arriving later cannot bring it back
        touched = np.zeros(n_keys, dtype=bool)
        touched[key[n_state:][np.isin(np.arange(n_state, len(key)), winner)]] = True
        kg = key_groups(state, rows)
        state_schema = self.state_schema(self.union).append(pa.field(KEY_GROUP, pa.int32()))
        up_ids = np.flatnonzero(touched)
        upserts = state_schema.empty_table()
        if len(up_ids):
            keys = all_keys.take(pa.array(first[up_ids]))
            body = table_rows.take(pa.array(winner[up_ids]))
            columns = {
                **{k: keys[k] for k in self.key_columns},
                **{n: body[n] for n in self.payload[RIGHT]},
                KEY_GROUP: pa.array(kg[first[up_ids]], pa.int32()),
            }
            upserts = pa.table(columns).cast(state_schema)
        # the lookups
        probes = np.flatnonzero(side_of == LEFT)
        probe_key = row_ids[probes]
        found = has_key[probes] & exists[probe_key]
        if self.lookup.how == "inner":
            probes, probe_key, found = probes[found], probe_key[found], found[found]
        left = rows.select(self.payload[LEFT]).take(pa.array(probes))
        # a null index takes a row of nulls: the miss of a left join
        right = table_rows.take(pa.array(np.where(found, winner[probe_key], 0), pa.int64(), mask=~found))
        keys = rows.select(self.key_columns).take(pa.array(probes))
        output = self._emit(keys, {}, left, right, len(probes)) if len(probes) else self.out_schema.empty_table()
        return KeyedResult(output, upserts, None, metrics={"lookups": len(probes), "misses": int((~found).sum())})

    def _payload_schema(self) -> pa.Schema:
        return pa.schema([self.union.field(n) for n in self.payload[RIGHT]])


def join_kernel(spec: StreamJoin | TableLookup, left: pa.Schema, right: pa.Schema) -> JoinKernelBase:
    if isinstance(spec, TableLookup):
        return TableLookupKernel(spec, left, right)
    return StreamJoinKernel(spec, left, right)
