"""A keyed operator's initial state from a table (``aggregate(..., initial_state=)``,
``process(..., initial_state=)``), like ``transformWithState``'s initial state: prime running
counts from a backfill, or a process function's state from a table of the keys' last values.

When a job starts on a checkpoint whose store for the operator holds nothing yet (no commit,
no snapshot, no initial state: the checkpoint never ran it), the driver writes the table into
the operator's store as its initial state (``KeyGroupStore.write_initial``), before the first
batch: each row under its key's key group (Spark's own ``xxhash64``, as the records are
routed), so it moves with its key group like any state. Every batch reads it through the
store's index until a snapshot holds it. A crash in the first batch replays that batch on
the same initial state, which is not written again: it is applied exactly once. A restart,
even with another table, leaves the state as it is; ``reset_state=[name]`` drops the state
and the next run seeds it again.

The table: a ``pyarrow.Table``, a pandas DataFrame or the path of a Parquet file or
directory, with the key columns (the names and types the operator is keyed by) and

* ``aggregate``: one column per stored partial, as ``sluice.state.read`` shows them (``n``
  for ``n=agg.count()``, ``total`` for a sum, ``m__sum`` and ``m__count`` for ``m=agg.mean``);
* ``process`` with a ``state_schema``: the state's fields (a field left out is null);
* ``process`` without one: any columns; a key's state is the dict of its row's non-key
  columns.

A key may appear once. A table that does not fit raises a ``PipelineError`` naming the
operator and the columns, before anything runs.
"""

from __future__ import annotations

import pickle

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sluice.core.columns import KEY_GROUP
from sluice.errors import PipelineError
from sluice.graph.operators import Operator
from sluice.graph.specs import AggregateOp, ProcessOp
from sluice.runtime.kernels.factory import keyed_kernel
from sluice.runtime.kernels.process import EVENT_TIMERS, PICKLED_STATE, PROCESSING_TIMERS
from sluice.runtime.kernels.ttl import STAMP
from sluice.runtime.state.store import KeyGroupStore

_KINDS = (AggregateOp, ProcessOp)  # the kinds whose spec takes an initial_state
_FILLED = (STAMP, EVENT_TIMERS, PROCESSING_TIMERS)  # the runtime's own state columns: start empty


def initial_state_of(op: Operator):
    """The operator's ``initial_state`` (None: it starts from nothing)."""
    return op.spec.initial_state if isinstance(op.spec, _KINDS) else None


def seed_initial_state(spark, graph, checkpoint) -> list[str]:
    """Write the initial state of every keyed operator of ``graph`` that has one and whose
    store holds nothing yet; returns the ids of the operators seeded."""
    seeded = []
    for op in graph.operators:
        if not op.is_keyed or initial_state_of(op) is None:
            continue
        in_schema = graph[op.inputs[0]].schema
        kernel = keyed_kernel(op, [in_schema])
        store = KeyGroupStore(checkpoint.uri, op.id, kernel.key_columns)
        if store.has_history():
            continue  # applied once: the checkpoint already ran this operator
        table = state_rows(op, kernel, in_schema)
        groups = key_groups(spark, table.select(kernel.key_columns), graph.max_parallelism)
        store.write_initial(table.append_column(KEY_GROUP, pa.array(groups, pa.int32())))
        seeded.append(op.id)
    return seeded


def load_table(value, where: str) -> pa.Table:
    """A ``pyarrow.Table`` of ``value``: a table, a pandas DataFrame or a Parquet path."""
    if isinstance(value, pa.Table):
        return value
    if isinstance(value, pa.RecordBatch):
        return pa.Table.from_batches([value])
    if isinstance(value, str):
        try:
            return pq.read_table(value)
        except (OSError, pa.ArrowInvalid) as exc:
            raise PipelineError(f"{where}: initial_state {value!r} is not a readable Parquet file or directory: {exc}") from None
    if type(value).__module__.startswith("pandas"):
        return pa.Table.from_pandas(value, preserve_index=False)
    raise PipelineError(f"{where}: initial_state must be a pyarrow.Table, a pandas DataFrame or a Parquet path, got {value!r}")


def state_rows(op: Operator, kernel, in_schema: pa.Schema) -> pa.Table:
    """The initial table as state rows of ``kernel`` (key columns, then its state columns)."""
    where = f"{op.kind} {op.name!r}"
    if not isinstance(op.spec, _KINDS):
        kinds = " and ".join(k.kind for k in _KINDS)
        raise PipelineError(f"{where}: initial_state is available for {kinds}, not for {op.kind}")
    table = load_table(initial_state_of(op), where)
    schema = kernel.state_schema(in_schema)
    keys = kernel.key_columns
    missing = [k for k in keys if k not in table.column_names]
    if missing:
        raise PipelineError(f"{where}: initial_state lacks the key column(s) {missing}; it has {table.column_names}")
    _check_unique(table, keys, where)
    if PICKLED_STATE in schema.names:  # process without a state_schema: each row's other columns, pickled
        others = [c for c in table.column_names if c not in keys]
        blobs = [pickle.dumps(r) for r in table.select(others).to_pylist()]
        table = table.select(keys).append_column(PICKLED_STATE, pa.array(blobs, pa.binary()))
    state_columns = [f.name for f in schema if f.name not in keys]
    unknown = [c for c in table.column_names if c not in schema.names]
    if unknown:
        raise PipelineError(
            f"{where}: initial_state has column(s) {unknown} the operator's state lacks; its state columns: "
            f"{[c for c in state_columns if c not in _FILLED]}"
        )
    if isinstance(op.spec, AggregateOp):
        absent = [c for c in state_columns if c not in table.column_names and c not in _FILLED]
        if absent:
            raise PipelineError(f"{where}: initial_state lacks the aggregate state column(s) {absent}")
    columns = []
    for field in schema:
        if field.name not in table.column_names:
            columns.append(pa.nulls(table.num_rows, field.type))
            continue
        try:
            columns.append(table.column(field.name).cast(field.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            got = table.schema.field(field.name).type
            raise PipelineError(
                f"{where}: initial_state column {field.name!r} is {got}, the state needs {field.type}: {exc}"
            ) from None
    return pa.Table.from_arrays(columns, schema=pa.schema([f.with_nullable(True) for f in schema]))


def _check_unique(table: pa.Table, keys: list[str], where: str) -> None:
    counts = table.group_by(keys, use_threads=False).aggregate([([], "count_all")])
    repeated = counts.filter(pc.greater(counts.column("count_all"), 1))
    if repeated.num_rows:
        raise PipelineError(f"{where}: initial_state has more than one row for key {repeated.select(keys).to_pylist()[0]}")


def key_groups(spark, keys: pa.Table, max_parallelism: int) -> np.ndarray:
    """The key group of every row of ``keys``, by Spark's own hash (as records are routed)."""
    from sluice.runtime.exchange.routing import key_group_sql

    if keys.num_rows == 0:
        return np.zeros(0, np.int32)
    numbered = keys.append_column("__row", pa.array(np.arange(keys.num_rows, dtype=np.int64)))
    frame = spark.createDataFrame(numbered).selectExpr("__row", f"{key_group_sql(keys.column_names, max_parallelism)} AS kg")
    result = frame.toArrow()
    groups = np.zeros(keys.num_rows, np.int32)
    groups[np.asarray(result.column("__row").to_numpy(), np.int64)] = np.asarray(result.column("kg").to_numpy(), np.int32)
    return groups
