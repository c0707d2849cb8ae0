"""DataFrame stages of a Plan: a fused Python chain, and a keyed stage (exchange by key
group, then a stateful kernel over the key-group store).

The functions returned here run inside Spark's Python workers; everything they need is in
their closure (pickled once per task), and they never touch the driver.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.errors import StateError
from sluice.graph.operators import Operator
from sluice.plan.physical import KeyedStagePlan
from sluice.runtime.batch.task_env import TaskEnv
from sluice.runtime.batch.task_metrics import COMBINE, SparseCounts, TaskMetrics
from sluice.runtime.kernels.aggregate import AggregateKernel
from sluice.runtime.kernels.factory import keyed_kernel, python_kernel
from sluice.runtime.kernels.grouping import dense_ids, exact_key_type
from sluice.runtime.kernels.keyed import KEY_GROUP, BatchContext, KeyedKernel, KeyedResult
from sluice.runtime.kernels.stateless import Kernel, KernelContext, run_chain
from sluice.runtime.kernels.window_state import RECORDS
from sluice.runtime.reporting import reporting_to
from sluice.runtime.schemas import INGEST, partition_id, to_arrow, to_spark, with_hidden
from sluice.runtime.side_outputs import DEAD_LETTER, SideOutputWriter
from sluice.runtime.sources.splits import read_splits
from sluice.runtime.state import KeyGroupStore


# ---- fused Python chains ---------------------------------------------------------------------
def chain_schemas(ops: list[Operator], in_schema: pa.Schema | None) -> list:
    """The schema before each operator of a chain and after the last (an operator without a
    schema of its own keeps its input's)."""
    schemas = [in_schema]
    for op in ops:
        schemas.append(op.schema or schemas[-1])
    return schemas


def python_chain(
    df,
    ops: list[Operator],
    in_schema: pa.Schema,
    env: TaskEnv,
    fused: Sequence[Kernel] = (),
    combine: tuple[str, AggregateKernel] | None = None,
    splits_reader=None,
):
    """One mapInArrow pass running every operator of the chain in turn.

    ``splits_reader``: ``df`` holds a source's splits, not its records: the pass reads them
    with this reader first (``sources.splits``).

    ``env.source_stats``: the statistics of the source whose records are the chain's input,
    to measure on them (``batch.source_stats.SourceStats``). ``fused``: kernels of native operators run
    after the chain's own, in the same pass (a filter evaluated in Arrow). ``combine``: the
    keyed aggregate operator after the chain (its id and kernel, bound to the records'
    schema): each task's records leave combined into one row of partials per key
    (``AggregateKernel.combine``)."""
    schemas = chain_schemas(ops, in_schema)
    kernels = [python_kernel(op, schemas[i]) for i, op in enumerate(ops)] + list(fused)
    out_schema = with_hidden(schemas[-1], INGEST)
    if combine is not None:
        out_schema = with_hidden(combine[1].combined_schema(schemas[-1]), INGEST)
    stage = ops[0].id
    source_stats = env.source_stats

    def run(batches):
        metrics = TaskMetrics(env.accumulator)
        dead = SideOutputWriter(env.root, DEAD_LETTER, env.batch_id, stage, partition_id())
        ctx = KernelContext(dead=dead, metrics=metrics)
        if splits_reader is not None:
            batches = read_splits(splits_reader, batches)
        if source_stats is not None:
            batches = source_stats.measuring(batches, metrics, partition_id())
        if combine is None:
            yield from run_chain(kernels, batches, ctx)
        else:
            yield from _combined(run_chain(kernels, batches, ctx), combine, out_schema, metrics)
        metrics.add(stage, "tasks", 1)  # the chaining policy weighs work per task
        errors = dead.flush()
        if errors:
            metrics.add(stage, "dead_letters", errors)
        metrics.flush()

    return df.mapInArrow(run, to_spark(out_schema))


def _combined(batches, combine: tuple[str, AggregateKernel], out_schema: pa.Schema, metrics: TaskMetrics):
    """The task's records, all of them, combined per key (one row of partials each)."""
    received = list(batches)
    if not received:
        return
    start = time.perf_counter()
    op_id, kernel = combine
    rows = pa.Table.from_batches(received)
    combined = kernel.combine(rows, partition_id())
    metrics.op_timing(op_id, rows.num_rows, combined.num_rows, time.perf_counter() - start, COMBINE)
    yield from combined.select(out_schema.names).cast(out_schema).to_batches()


# ---- keyed stages ----------------------------------------------------------------------------
HOLDING = "holding_state"
"""Metric of a keyed operator whose state time alone can change (``wants_timers``): the
partitions that hold state after the batch (the executor plans batches without input only
for operators that hold some)."""


def keyed_stage(
    df,
    op: Operator,
    in_schema: pa.Schema,
    stage: KeyedStagePlan,
    store_args: tuple,
    index,
    env: TaskEnv,
    kernel: KeyedKernel | None = None,
    traffic_from: str | None = None,
):
    """Run a keyed operator over routed rows, reading and writing the key-group store: one
    :class:`KeyedTask` per partition.

    ``env.source_stats``: the statistics of the source whose records Spark combined into
    these rows, to measure here (``batch.source_stats.SourceStats``). ``kernel``: the operator's
    kernel, as the exchange before saw it (default: made from the operator). ``traffic_from``:
    the keyed operator before, when the rows' key group column also holds their key group
    there (``exchange.routing.with_key_group``): the rows per (its key group, this one's) are
    counted, ALBIC's traffic between key groups."""
    task = KeyedTask(op, kernel or keyed_kernel(op), in_schema, stage, store_args, index, env, traffic_from)
    return df.mapInArrow(task, to_spark(task.out_schema))


class KeyedTask:
    """One task of a keyed stage (the ``mapInArrow`` function, pickled to the executors): the
    rows of the key groups routed to its partition, through the operator's kernel over
    their state, in named steps:

    1. ``receive`` the partition's rows (measuring the source's statistics if asked);
    2. ``check_routing``: every row's key group is routed here (and count the traffic);
    3. ``read_state`` of the key groups the task runs;
    4. ``run_kernel`` on the rows and that state;
    5. ``write_delta``: the changed state, one delta file for (batch, partition);
    6. ``side_outputs``: the kernel's side outputs and dead letters, its metrics;
    7. ``output``: each output row charged its ingest time, in the stage's schema.
    """

    def __init__(
        self,
        op: Operator,
        kernel: KeyedKernel,
        in_schema: pa.Schema,
        stage: KeyedStagePlan,
        store_args: tuple,
        index,
        env: TaskEnv,
        traffic_from: str | None = None,
    ):
        self.op = op
        self.kernel = kernel
        self.store_args = store_args
        self.index = index
        self.env = env
        self.traffic_from = traffic_from
        self.routing = stage.routing
        self.routed_schema = with_hidden(in_schema, INGEST, KEY_GROUP)
        self.out_schema = with_hidden(kernel.output_schema(in_schema.append(pa.field(KEY_GROUP, pa.int32()))), INGEST)
        self.kernel_state = kernel.state_schema(in_schema)
        self.state_schema = self.kernel_state.append(pa.field(KEY_GROUP, pa.int32()))
        self.with_state = set(index.key_groups_with_state()) if index is not None else set()

    def __call__(self, batches):
        start = time.perf_counter()
        partition = partition_id()
        metrics = TaskMetrics(self.env.accumulator)
        rows = self.receive(batches, metrics, start)
        kg_values, kg_counts = _counts(rows)
        self.check_routing(kg_values, partition)
        kgs = self.key_groups(kg_values, partition)
        if not kgs:
            metrics.flush()
            return
        store = KeyGroupStore(*self.store_args)
        state = self.read_state(store, kgs, metrics)
        step = time.perf_counter()
        # where the rest of the stage's time goes, step by step (keyed_throughput's profile)
        result = self.run_kernel(rows, state, partition, metrics)
        step = _timed(metrics, self.op.id, "kernel_s", step)
        self.write_delta(store, result, state, partition, metrics)
        step = _timed(metrics, self.op.id, "delta_write_s", step)
        self.side_outputs(result, partition, metrics)
        output = self.output(result, rows, kg_values, kg_counts, metrics)
        _timed(metrics, self.op.id, "output_s", step)
        # records in, also when they came combined into fewer rows
        metrics.op_timing(self.op.id, sum(kg_counts), output.num_rows, time.perf_counter() - start)
        metrics.flush()
        yield from output.to_batches()

    def receive(self, batches, metrics: TaskMetrics, start: float) -> pa.Table:
        """1. The partition's rows, all of them, in the routed schema (the traffic from the
        keyed operator before counted and its key group unpacked)."""
        received = list(batches)
        # the wait for the input includes the upstream work Spark runs in the same task
        metrics.add(self.op.id, "input_wait_s", time.perf_counter() - start)
        # columns arrive in the DataFrame's order (a with_columns may put some after the
        # hidden ones): select by name, then conform the types
        rows = pa.Table.from_batches(received) if received else self.routed_schema.empty_table()
        if self.env.source_stats is not None:
            self.env.source_stats.measure(rows, metrics)
        rows = rows.select(self.routed_schema.names).cast(self.routed_schema)
        if self.traffic_from is not None:
            rows = _count_traffic(rows, self.traffic_from, self.op.id, len(self.routing), metrics)
        return rows

    def check_routing(self, kg_values: list, partition: int) -> None:
        """2. State is owned by one partition per key group: never merge rows routed elsewhere."""
        strays = [kg for kg in kg_values if self.routing[kg] != partition]
        if strays:
            raise StateError(
                f"keyed operator {self.op.name!r}: partition {partition} received rows of key groups "
                f"{strays[:5]} routed to other partitions; Spark re-partitioned them after the "
                f"exchange by key group"
            )

    def key_groups(self, kg_values: list, partition: int) -> set[int]:
        """The key groups the task runs: those of its rows, and for a kernel with timers every
        key group of the partition that holds state (time alone may change it)."""
        kgs = set(kg_values)
        if self.kernel.wants_timers:
            kgs |= {kg for kg in self.with_state if self.routing[kg] == partition}
        return kgs

    def read_state(self, store: KeyGroupStore, kgs: set[int], metrics: TaskMetrics) -> pa.Table:
        """3. The committed state of ``kgs`` as the batch reads it."""
        read_started = time.perf_counter()
        index = self.index
        state = store.read(index, sorted(kgs), schema=self.kernel_state) if index is not None else None
        if state is None:
            state = self.state_schema.empty_table()
        # what loading state costs: the balancer's migration cost per byte
        metrics.add(self.op.id, "state_read_s", time.perf_counter() - read_started)
        if index is not None:  # in the unit the balancer sees: bytes of the key groups' files
            metrics.add(self.op.id, "state_read_bytes", sum(f.kg_bytes(kg) for kg in kgs for f in index.files_by_kg.get(kg, ())))
        return state

    def run_kernel(self, rows: pa.Table, state: pa.Table, partition: int, metrics: TaskMetrics) -> KeyedResult:
        """4. The operator's kernel over the rows and their state."""
        context = self.env.context
        ctx = BatchContext(context.batch_id, partition, context.watermark, context.processing_time)
        data = rows.drop_columns([INGEST])
        with reporting_to(metrics, self.op.id):  # sluice.report inside the user's function
            return self.kernel.process(data, state.select(self.state_schema.names), ctx)

    def write_delta(
        self, store: KeyGroupStore, result: KeyedResult, state: pa.Table, partition: int, metrics: TaskMetrics
    ) -> None:
        """5. The changed state, as one delta file for (batch, partition)."""
        if self.kernel.wants_timers:  # whether time alone may still change this partition's state
            deleted = result.deletes.num_rows if result.deletes is not None else 0
            metrics.add(self.op.id, HOLDING, int(result.upserts.num_rows > 0 or state.num_rows > deleted))
        if result.upserts.num_rows or (result.deletes is not None and result.deletes.num_rows):
            store.write_delta(self.env.batch_id, partition, result.upserts, result.deletes)

    def side_outputs(self, result: KeyedResult, partition: int, metrics: TaskMetrics) -> None:
        """6. The kernel's metrics, its side outputs and its dead letters."""
        op, root, batch_id = self.op, self.env.root, self.env.batch_id
        for name, n in result.metrics.items():
            metrics.add(op.id, name, n)
        for name, n in result.peaks.items():
            metrics.peak(op.id, name, n)
        for name, side in result.side_outputs.items():
            writer = SideOutputWriter(root, f"side/{op.id}/{name}", batch_id, op.id, partition)
            writer.add_table(op.name, side, name)
            metrics.add(op.id, f"side_{name}", writer.flush())
        # one file per (batch, operator, partition): a replayed task replaces it, never adds to it
        dead = SideOutputWriter(root, DEAD_LETTER, batch_id, op.id, partition)
        for letter in result.dead_letters:
            dead.dead(op.name, letter.record, letter.error, op.location, key=letter.key)
        if result.dead_letters:
            metrics.add(op.id, "dead_letters", dead.flush())

    def output(self, result: KeyedResult, rows: pa.Table, kg_values: list, kg_counts: list, metrics: TaskMetrics) -> pa.Table:
        """7. The kernel's output, each row charged the ingest time of its key's oldest input
        record, in the stage's schema; the records per key group counted."""
        output = _attach_ingest(result.output, rows, self.kernel.key_columns, self.env.context.processing_time, result.key_ids)
        metrics.key_group_rows(self.op.id, kg_values, kg_counts)
        return output.select(self.out_schema.names).cast(self.out_schema)


def _timed(metrics: TaskMetrics, op_id: str, metric: str, since: float) -> float:
    """Add the seconds since ``since`` to ``metric``; return now (the start of the next step)."""
    now = time.perf_counter()
    metrics.add(op_id, metric, now - since)
    return now


def _count_traffic(rows: pa.Table, upstream: str, op_id: str, max_parallelism: int, metrics: TaskMetrics) -> pa.Table:
    """Count the rows per (upstream key group, key group) pair, coded ``up * K + kg`` as the
    exchange packed them into the key group column, into the operator's traffic from
    ``upstream``; return the rows with the key group alone. One bincount over the task's rows
    (K = 128: 16,384 bins, about 2 ms for 100,000 rows)."""
    if not rows.num_rows:
        return rows
    packed = rows.column(KEY_GROUP).to_numpy().astype(np.int64)
    metrics.traffic(op_id, upstream, SparseCounts.of(packed, max_parallelism * max_parallelism))
    index = rows.schema.get_field_index(KEY_GROUP)
    return rows.set_column(index, rows.schema.field(index), pa.array((packed % max_parallelism).astype(np.int32)))


def _counts(rows: pa.Table):
    """The key groups of ``rows`` and the records of each: rows combined before the exchange
    count the records they stand for, so that the balancer sees a hot key as hot also when
    its records arrive as one row per map task."""
    if rows.num_rows == 0:
        return [], []
    if RECORDS in rows.column_names:
        sums = rows.group_by(KEY_GROUP, use_threads=False).aggregate([(RECORDS, "sum")])
        return sums[KEY_GROUP].to_pylist(), sums[f"{RECORDS}_sum"].to_pylist()
    vc = pc.value_counts(rows.column(KEY_GROUP))
    return vc.field("values").to_pylist(), vc.field("counts").to_pylist()


def _attach_ingest(
    output: pa.Table, rows: pa.Table, keys: list[str], processing_time: int, key_ids: tuple[np.ndarray, np.ndarray] | None = None
) -> pa.Table:
    """Charge each output row the ingest time of the oldest input record of its key in this
    batch; rows fired by time alone (no input this batch) get the batch's processing time.

    ``key_ids``: the kernel's key id of each output row and of each input row, if it has them.
    Keys match as the kernels group them (``kernels.grouping``: a null key is one key). Rows
    stay in the order the kernel emitted them."""
    ts_type = pa.timestamp("us", tz="UTC")
    if output.num_rows == 0:
        return output.append_column(INGEST, pa.array([], ts_type))
    if rows.num_rows and all(k in output.column_names for k in keys):
        if keys and all(exact_key_type(output.schema.field(k).type) for k in keys):
            if key_ids is None or len(key_ids[0]) != output.num_rows or len(key_ids[1]) != rows.num_rows:
                key_ids = _key_ids(output, rows, keys)
            if key_ids is not None:
                return output.append_column(INGEST, pa.array(_oldest(rows, keys, key_ids, processing_time), ts_type))
        # keys a dictionary encoding may tell apart although equal (decimals, nested types)
        oldest = rows.group_by(keys, use_threads=False).aggregate([(INGEST, "min")])  # -> "__ingest_ts_min"
        joined = output.join(oldest, keys=keys, join_type="left outer", use_threads=False)
        ingest = pc.fill_null(joined.column(f"{INGEST}_min").cast(ts_type), pa.scalar(processing_time, ts_type))
        return joined.drop_columns([f"{INGEST}_min"]).append_column(INGEST, ingest)
    if rows.num_rows:
        fill = pc.min(rows.column(INGEST)).cast(ts_type)
    else:
        fill = pa.scalar(processing_time, ts_type)
    if not fill.is_valid:
        return output.append_column(INGEST, pa.nulls(output.num_rows, ts_type))
    return output.append_column(INGEST, pa.array(np.full(output.num_rows, fill.value, np.int64), ts_type))


def _key_ids(output: pa.Table, rows: pa.Table, keys: list[str]) -> tuple[np.ndarray, np.ndarray] | None:
    """Dense ids of the keys of the output rows and of the input rows, from one dictionary
    encoding of both (a group-by and a hash join cost several times more); None when the
    two tables type a key column differently."""
    if any(output.schema.field(k).type != rows.schema.field(k).type for k in keys):
        return None
    ids = dense_ids(
        [pa.chunked_array(output.column(k).chunks + rows.column(k).chunks, type=output.schema.field(k).type) for k in keys]
    )
    return ids[: output.num_rows], ids[output.num_rows :]


def _oldest(rows: pa.Table, keys: list[str], key_ids: tuple[np.ndarray, np.ndarray], processing_time: int) -> np.ndarray:
    """Per output row, in microseconds: the oldest ingest time of the input rows of its key,
    else the processing time."""
    out_ids, row_ids = key_ids
    ingest = rows.column(INGEST)
    valid = np.ones(len(row_ids), dtype=bool)
    if ingest.null_count:  # min() skips nulls
        valid &= np.asarray(ingest.is_valid().to_numpy(zero_copy_only=False), bool)
    micros = np.asarray(pc.fill_null(pc.cast(ingest, pa.int64()), 0).to_numpy(), np.int64)
    size = int(max(out_ids.max(initial=-1), row_ids.max(initial=-1))) + 1
    oldest = np.full(size, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(oldest, row_ids[valid], micros[valid])
    has = np.zeros(size, dtype=bool)
    has[row_ids[valid]] = True
    return np.where(has[out_ids], oldest[out_ids], processing_time)


def arrow_schema_of(df) -> pa.Schema:
    return to_arrow(df.schema)
