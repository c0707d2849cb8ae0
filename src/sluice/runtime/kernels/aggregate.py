"""Running aggregates per key, vectorized: one Arrow group-by per batch, then a lookup of the
key's previous partial aggregate by the key's id (``kernels.grouping``: NULL is one key).
Only user-defined aggregates call Python, and then once per key and batch (with all of the
key's new values as one array), never once per record.

When every aggregate is a built-in and the keys group exactly (:meth:`AggregateKernel.combinable`),
the fused Python chain before the exchange can run the first step itself, per map task
(:meth:`AggregateKernel.combine`, ``runtime.batch.compile``): one row of partials per key and map
task crosses the exchange instead of every record, and :meth:`AggregateKernel.process`
merges those rows as it merges records. Spark's own partial aggregate did the same work
slower (docs/runtime.md section 5): it needs a second pass over the records in the JVM,
where the chain has them in Arrow already.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.graph.aggregates import Aggregate, UserAggregate
from sluice.graph.kinds import aggregate_output_schema, sum_type
from sluice.runtime.kernels.grouping import state_and_row_ids
from sluice.runtime.kernels.keyed import KEY_GROUP, BatchContext, DeadRecord, KeyedKernel, KeyedResult, TakesCombinedRows
from sluice.runtime.kernels.window_state import COMBINE_TASK, INGEST, PARTIAL_PREFIX, RECORDS


def _state_fields(name: str, agg: Aggregate, input_schema: pa.Schema) -> list[pa.Field]:
    """The columns that hold one aggregate's partial state."""
    col_type = input_schema.field(agg.column).type if agg.column else None
    if agg.kind == "count":
        return [pa.field(name, pa.int64())]
    if agg.kind == "sum":
        return [pa.field(name, sum_type(col_type))]
    if agg.kind in ("min", "max"):
        return [pa.field(name, col_type)]
    if agg.kind == "mean":
        return [pa.field(f"{name}__sum", pa.float64()), pa.field(f"{name}__count", pa.int64())]
    return [pa.field(f"{name}__acc", pa.binary())]  # udaf: pickled accumulator


def _combine(kind: str, old: pa.ChunkedArray, new: pa.ChunkedArray) -> pa.ChunkedArray:
    """Merge a key's previous partial (null for a new key) with this batch's partial."""
    if kind in ("count", "sum"):
        if pa.types.is_decimal(old.type) or pa.types.is_decimal(new.type):
            # decimal sums add exactly, in 256 bits so that two 38-digit sums have room
            # (the caller casts back to the state's decimal128(38, s), checked)
            wide = pa.decimal256(60, max(old.type.scale, new.type.scale))
            zero = pa.scalar(0, pa.int64()).cast(wide)
            return pc.add(pc.fill_null(old.cast(wide), zero), pc.fill_null(new.cast(wide), zero))
        return pc.add(pc.fill_null(old, 0), pc.fill_null(new, 0))
    fn = pc.min_element_wise if kind == "min" else pc.max_element_wise
    if old.type != new.type:
        old = old.cast(new.type)
    if pa.types.is_timestamp(new.type) and new.type.tz is not None:
        # Arrow's element-wise min/max have no kernel for time-zoned timestamps: compare their
        # instants as integers in their unit
        return fn(old.cast(pa.int64()), new.cast(pa.int64()), skip_nulls=True).cast(new.type)
    return fn(old, new, skip_nulls=True)


_KEY_ID = "__key_id"  # the key's id in the batch's numbering of keys
# how a partial of each Arrow aggregate merges with the others of its key
_MERGE = {"count_all": "sum", "count": "sum", "sum": "sum", "min": "min", "max": "max"}


def _paired(values: pa.ListArray, by: pa.ListArray) -> pa.ListArray:
    """Two list columns of one group-by (same lists, same lengths) as one list of (value, by)
    structs, without copying the values."""
    pairs = pa.StructArray.from_arrays([values.flatten(), by.flatten()], names=["value", "by"])
    offsets = np.asarray(values.offsets.to_numpy(), np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets - offsets[0]), pairs)


def _groups_exactly(dtype: pa.DataType) -> bool:
    """Key types that Arrow's group-by in the map task groups exactly as the keyed stage's
    key encoding does (``kernels.grouping``); float keys (NaN, -0.0), decimals and nested
    types are left to the records."""
    return (
        pa.types.is_string(dtype)
        or pa.types.is_large_string(dtype)
        or pa.types.is_integer(dtype)
        or pa.types.is_boolean(dtype)
        or pa.types.is_binary(dtype)
        or pa.types.is_date32(dtype)
    )


def _in_task_order(rows: pa.Table) -> pa.Table:
    """Combined rows ordered by the map task that made them (stably): the exchange mostly
    delivers them so already, and then they are not copied."""
    tasks = rows[COMBINE_TASK].combine_chunks()
    if len(tasks) < 2 or pc.all(pc.greater_equal(tasks[1:], tasks[:-1])).as_py():
        return rows
    return rows.take(pc.sort_indices(tasks))


class AggregateKernel(TakesCombinedRows, KeyedKernel):
    combined_marker = COMBINE_TASK

    def __init__(self, key_columns: list[str], aggregates: dict[str, Aggregate]):
        super().__init__(key_columns)
        self.aggregates = aggregates

    # -- the batch's partial aggregates per key: in the keyed stage, or combined before ----

    def _batch_specs(self) -> tuple[list[tuple[Any, str]], list[str]]:
        """The Arrow aggregates of one batch's records per key, and their labels."""
        specs: list[tuple[Any, str]] = []  # (column, or [] for count(*); Arrow aggregate function)
        labels: list[str] = []
        for name, agg in self.aggregates.items():
            if agg.kind == "count":
                specs.append(([], "count_all") if agg.column is None else (agg.column, "count"))
                labels.append(name)
            elif agg.kind in ("sum", "min", "max"):
                specs.append((agg.column, agg.kind))
                labels.append(name)
            elif agg.kind == "mean":
                specs += [(agg.column, "sum"), (agg.column, "count")]
                labels += [f"{name}__sum", f"{name}__count"]
            else:
                specs.append((agg.column, "list"))
                labels.append(f"{name}__values")
                if isinstance(agg, UserAggregate) and agg.by:  # arg_max / arg_min: the by values alongside
                    specs.append((agg.by, "list"))
                    labels.append(f"{name}__by")
        return specs, labels

    def combinable(self, input_schema: pa.Schema) -> bool:
        """Whether records of ``input_schema`` can be combined per map task before the
        exchange: built-in aggregates only, keys that group exactly."""
        return (
            bool(self.key_columns)
            and all(
                not isinstance(agg, UserAggregate) and agg.kind in ("count", "sum", "min", "max", "mean")
                for agg in self.aggregates.values()
            )
            and all(k in input_schema.names and _groups_exactly(input_schema.field(k).type) for k in self.key_columns)
        )

    def _partials(self) -> list[tuple[str, tuple[Any, str]]]:
        """(label, Arrow aggregate) of each partial a combined row carries: count(*) is not
        among them, since the row's record count (``__records``) is that number already."""
        specs, labels = self._batch_specs()
        return [(label, spec) for label, spec in zip(labels, specs) if spec != ([], "count_all")]

    def combined_schema(self, input_schema: pa.Schema) -> pa.Schema:
        """Rows of partials: the keys, the map task, the records each stands for, one column
        per partial aggregate (typed as Arrow's group-by gives it over the records)."""
        records = self.record_schema(input_schema)
        partials = self._partials()
        sample = records.empty_table().group_by(self.key_columns, use_threads=False).aggregate([spec for _, spec in partials])
        types = [sample.schema.field(i).type for i in range(sample.num_columns) if sample.column_names[i] not in self.key_columns]
        fields = [records.field(k) for k in self.key_columns]
        fields += [pa.field(COMBINE_TASK, pa.int32()), pa.field(RECORDS, pa.int64())]
        fields += [pa.field(PARTIAL_PREFIX + label, dtype) for (label, _), dtype in zip(partials, types)]
        return pa.schema(fields)

    def combine(self, rows: pa.Table, task: int) -> pa.Table:
        """One map task's records (with their ingest times) as one row of partials per key,
        with the oldest ingest time of its records."""
        partials = self._partials()
        grouped = rows.group_by(self.key_columns, use_threads=False).aggregate(
            [*(spec for _, spec in partials), ([], "count_all"), (INGEST, "min")]
        )
        names = grouped.column_names
        aggregates = [i for i in range(len(names)) if names[i] not in self.key_columns]
        n = grouped.num_rows
        columns = [grouped.column(k) for k in self.key_columns]
        columns += [pa.array(np.full(n, task, np.int32)), grouped.column(aggregates[-2])]
        columns += [grouped.column(i) for i in aggregates[:-2]]
        out_names = [*self.key_columns, COMBINE_TASK, RECORDS, *(PARTIAL_PREFIX + label for label, _ in partials)]
        out = pa.table(columns, names=out_names)
        return out.append_column(INGEST, grouped.column(aggregates[-1]))

    # -- the kernel ---------------------------------------------------------------------

    def state_schema(self, input_schema: pa.Schema) -> pa.Schema:
        input_schema = self.record_schema(input_schema)
        fields = [input_schema.field(k) for k in self.key_columns]
        for name, agg in self.aggregates.items():
            fields += _state_fields(name, agg, input_schema)
        return pa.schema(fields)

    def input_columns(self, input_schema: pa.Schema) -> list[str]:
        """The keys and the aggregated columns, in the input's order."""
        read = set(self.key_columns) | {agg.column for agg in self.aggregates.values() if agg.column}
        read |= {agg.by for agg in self.aggregates.values() if isinstance(agg, UserAggregate) and agg.by}
        return [name for name in input_schema.names if name in read]

    def output_schema(self, input_schema: pa.Schema) -> pa.Schema:
        input_schema = self.record_schema(input_schema)
        schema = aggregate_output_schema(self.key_columns, self.aggregates, input_schema)  # the kind's one rule
        assert schema is not None
        return schema

    def process(self, rows: pa.Table, state: pa.Table, ctx: BatchContext) -> KeyedResult:
        """One batch of records, or of rows of partials (:meth:`combine`)."""
        input_schema = self.record_schema(rows.schema)
        out_schema = self.output_schema(input_schema)
        state_schema = self.state_schema(input_schema)
        if rows.num_rows == 0:
            return KeyedResult(out_schema.empty_table(), state_schema.append(pa.field(KEY_GROUP, pa.int32())).empty_table())
        keys = [*self.key_columns, KEY_GROUP]
        # the keys of the state and of the rows in one numbering (nulls one key, as in SQL):
        # state row i has id i, so a key's committed state is found by its id, not by a join
        # on the key columns (a join never matches a null key)
        ids, first, all_keys = state_and_row_ids(state, rows, self.key_columns)
        n_state = state.num_rows

        # 1. this batch's partial aggregates per key, in one vectorized group-by (of records,
        #    or of rows of partials combined per map task: merged in map task order, so that
        #    float sums add in the same order whatever order the exchange delivered them in)
        specs, labels = self._batch_specs()
        group_keys = [_KEY_ID, KEY_GROUP]
        by_key = rows.append_column(_KEY_ID, pa.array(ids[n_state:]))
        if COMBINE_TASK in rows.column_names:
            # each partial merges from its column; count(*) from the rows' record counts
            sources = [RECORDS if spec == ([], "count_all") else PARTIAL_PREFIX + label for label, spec in zip(labels, specs)]
            by_key = _in_task_order(by_key.select([*group_keys, COMBINE_TASK, *dict.fromkeys(sources)]))
            specs = [(source, _MERGE[fn]) for source, (_, fn) in zip(sources, specs)]
        grouped = by_key.group_by(group_keys, use_threads=False).aggregate(specs)
        # the grouping columns keep their names; the aggregates are the other columns, in
        # order (pyarrow has put them before the keys in some versions and after in others)
        names = grouped.column_names
        key_positions = [names.index(k) for k in group_keys]
        agg_positions = [i for i in range(len(names)) if i not in key_positions]
        key_id = np.asarray(grouped.column(_KEY_ID).to_numpy(), np.int64)
        key_values = all_keys.take(pa.array(first[key_id]))
        partial = pa.table(
            [key_values.column(k) for k in self.key_columns]
            + [grouped.column(KEY_GROUP)]
            + [grouped.column(i) for i in agg_positions],
            names=keys + [f"__new__{label}" for label in labels],
        )

        # 2. the committed state of those keys, aligned row by row with ``partial``: a key's
        #    state row is its id, when the id is one of the state's
        state_cols = [f.name for f in state_schema if f.name not in keys]
        in_state = key_id < n_state
        if in_state.any():
            old = state.select(state_cols).take(pa.array(np.where(in_state, key_id, 0), mask=~in_state))
        else:
            old = pa.table({f.name: pa.nulls(partial.num_rows, f.type) for f in state_schema if f.name not in keys})
        joined = partial
        for name in state_cols:
            joined = joined.append_column(name, old.column(name))
        columns = {k: joined.column(k) for k in keys}
        results = {k: joined.column(k) for k in self.key_columns}
        failed: dict[int, BaseException] = {}  # group (row of ``partial``) -> what a UDAF raised
        for name, agg in self.aggregates.items():
            if agg.kind in ("count", "sum", "min", "max"):
                merged = _combine(agg.kind, joined.column(name), joined.column(f"__new__{name}"))
                columns[name] = merged.cast(state_schema.field(name).type)
                results[name] = columns[name]
            elif agg.kind == "mean":
                s = _combine("sum", joined.column(f"{name}__sum"), joined.column(f"__new__{name}__sum").cast(pa.float64()))
                c = _combine("count", joined.column(f"{name}__count"), joined.column(f"__new__{name}__count"))
                columns[f"{name}__sum"], columns[f"{name}__count"] = s, c
                results[name] = pc.divide(s, pc.cast(c, pa.float64()))
            else:
                assert isinstance(agg, UserAggregate)
                accs: list[bytes | None] = []
                values: list[pa.Scalar | None] = []
                out_type = out_schema.field(name).type
                new_lists = joined.column(f"__new__{name}__values").combine_chunks()
                if agg.by:  # (value, by) pairs, as add() of a two-column aggregate takes them
                    new_lists = _paired(new_lists, joined.column(f"__new__{name}__by").combine_chunks())
                for g, (acc_bytes, new_values) in enumerate(zip(joined.column(f"{name}__acc").to_pylist(), new_lists)):
                    try:
                        acc = pickle.loads(acc_bytes) if acc_bytes is not None else agg.create()
                        acc = agg.add(acc, new_values.values)  # one key's new values, as an Arrow array
                        accs.append(pickle.dumps(acc))
                        values.append(pa.scalar(agg.result(acc), out_type))
                    except Exception as exc:  # this key's batch is rejected (see _reject)
                        failed.setdefault(g, exc)
                        accs.append(None)
                        values.append(None)
                columns[f"{name}__acc"] = pa.array(accs, pa.binary())
                results[name] = pa.array(values, out_type)
        upserts = pa.table(
            [columns[f.name] for f in state_schema] + [columns[KEY_GROUP]],
            schema=state_schema.append(pa.field(KEY_GROUP, pa.int32())),
        )
        output = pa.table([results[f.name] for f in out_schema], schema=out_schema)
        row_ids = ids[n_state:]
        if failed:
            return self._reject(failed, output, upserts, key_id, row_ids, rows)
        return KeyedResult(output=output, upserts=upserts, key_ids=(key_id, row_ids))

    def _reject(
        self,
        failed: dict[int, BaseException],
        output: pa.Table,
        upserts: pa.Table,
        key_id: np.ndarray,
        row_ids: np.ndarray,
        rows: pa.Table,
    ) -> KeyedResult:
        """Drop the keys on which a user-defined aggregate raised from the batch's result.

        The unit of failure is a key's records of the batch, as ``add`` saw them together:
        they are all dead letters with the error, the key emits nothing, and its state (of
        every aggregate of the operator, so that they keep agreeing) stays as it was before
        the batch. Other keys go on.
        """
        keep = np.ones(len(key_id), dtype=bool)
        keep[list(failed)] = False
        error_of = {int(key_id[g]): exc for g, exc in failed.items()}
        bad = np.flatnonzero(np.isin(row_ids, list(error_of)))
        records = rows.take(pa.array(bad)).drop_columns([KEY_GROUP])
        dead = [
            DeadRecord(record, error_of[int(row_ids[i])], tuple(record[k] for k in self.key_columns))
            for i, record in zip(bad.tolist(), records.to_pylist())
        ]
        mask = pa.array(keep)
        return KeyedResult(
            output=output.filter(mask), upserts=upserts.filter(mask), key_ids=(key_id[keep], row_ids), dead_letters=dead
        )
