"""One batch's physical graph, named: (graph, plan, batch) -> :class:`BatchLineage`.

docs/runtime.md, section 3, step 2: build the DataFrame lineage of the Plan. :func:`compile_batch`
turns the job graph, the batch's Plan and what the batch knows (its id, context, the
state it reads) into stages, in topological order, each owning what it measures:

* :class:`SourceStage`: the batch's records of one source; its statistics (rows, latest
  event time), observed by Spark or, when a keyed stage's Spark combine sees exactly its
  records, measured there on the combined rows, or when a keyed stage receives exactly its
  records uncombined, measured there on them, or when a Python chain reads exactly its
  records, measured there on their Arrow batches (``batch.source_stats.SourceStats``). A source
  opened by splits (``sources.splits``) hands the chain after it its splits, whose records
  the chain reads itself; anything else gets the records;
* :class:`NativeStage`: a Spark expression (filter, select, with_columns), a key_by or a union;
* :class:`ChainStage`: consecutive Python operators fused into one ``mapInArrow`` pass;
* :class:`KeyedStage`: the exchange by key group (``runtime.exchange``; none for an operator
  collocated with the keyed operator before it) and the keyed stage over the key-group
  store (``runtime.batch.stages``); after the job, its late records.

``BatchLineage.build(df)`` builds every stage's frame (persisting at fan-out points, so no
branch recomputes its upstream) and returns the frames by operator id; once the sinks have run
the job, ``finish`` lets each stage do its driver-side work and ``source_statistics`` hands
over the sources' statistics. Sinks are not stages: the executor writes them (step 3).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from typing import Any

from sluice.graph import JobGraph
from sluice.graph.alternates import with_alternate
from sluice.graph.operators import Operator
from sluice.graph.specs import KeyByOp, UnionOp
from sluice.plan.collocation import traffic_source
from sluice.plan.physical import KeyedStagePlan, Plan
from sluice.runtime.batch.source_stats import SourceStats
from sluice.runtime.batch.stages import chain_schemas, keyed_stage, python_chain
from sluice.runtime.batch.task_env import TaskEnv
from sluice.runtime.batch.task_metrics import MetricKey, TaskFigures
from sluice.runtime.checkpoint import Checkpoint
from sluice.runtime.exchange import collocated_input, combined_by_spark, exchange, receives_records
from sluice.runtime.joins import tagged_union
from sluice.runtime.kernels.aggregate import AggregateKernel
from sluice.runtime.kernels.factory import keyed_kernel
from sluice.runtime.kernels.joins import JoinKernelBase
from sluice.runtime.kernels.keyed import BatchContext, KeyedKernel
from sluice.runtime.kernels.predicates import fused_filter
from sluice.runtime.kernels.stateless import Kernel
from sluice.runtime.kernels.ttl import TTLKernel
from sluice.runtime.schemas import INGEST, SOURCE_ID, apply_native, quote, with_hidden
from sluice.runtime.sources.native_files import records_of_files
from sluice.runtime.sources.splits import records_of_splits
from sluice.runtime.state import KeyGroupStore
from sluice.runtime.state.transaction import StateTransaction

BATCH_INPUT = "__batch__"  # the frames' entry of the batch's input DataFrame


@dataclass
class SourceInfo:
    op: Operator
    index: int  # value of the hidden __src column when several sources are unioned
    event_time: str | None
    watermark_delay_us: int
    # the source's stream reader when it is opened by splits (``sources.splits``): the
    # batch's rows are then its splits, and this reader reads their records in a task
    splits_reader: Any = None
    # its splits are Parquet files that Spark's own reader reads (``sources.native_files``):
    # where the driver finds each batch's files (a ``BatchFiles``)
    native_files: Any = None
    # without records this long (microseconds), the source stops holding the watermark back
    idle_timeout_us: int | None = None
    # Sluice reads it (not a Spark source of the user's): it can plan batches without input
    ticks: bool = False


@dataclass(frozen=True)
class BatchInputs:
    """What a batch's stages need besides the graph and the Plan."""

    batch_id: int
    context: BatchContext  # its processing time and watermark (fixed for any replay)
    checkpoint: Checkpoint
    accumulator: Any  # the job's task-metrics accumulator (task_metrics.MetricsParam)
    sources: list[SourceInfo]
    stores: dict[str, KeyGroupStore]  # keyed operator id -> its store
    state: StateTransaction  # the batch's state: the index each keyed stage reads
    kernel_of: Any  # Callable[[Operator], KeyedKernel]: the executor's kernel per planned operator


class Stage(ABC):
    """One node of a batch's physical graph; its frame is ``frames[op.id]``."""

    op: Operator

    @abstractmethod
    def build(self, frames: dict) -> Any:
        """The stage's DataFrame, from the frames of the stages before it."""

    def finish(self) -> dict[str, float]:
        """Driver-side work once the batch's job has run; returns metrics of ``op`` to add."""
        return {}


@dataclass
class SourceStage(Stage):
    op: Operator
    source: SourceInfo
    n_sources: int
    batch_id: int
    # the statistics as a keyed stage's Spark combine measures them, or None: Spark observes them
    measured: SourceStats | None
    # opened by splits: the chain after reads them (its frame is the splits), else their records
    splits_to_chain: bool = False
    observation: Any = None  # the pyspark Observation, set by build

    def build(self, frames: dict) -> Any:
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        op = self.op
        assert op.schema is not None  # a source declares its schema
        df = frames[BATCH_INPUT]
        reader = self.source.splits_reader
        if reader is not None:  # the job's one source, opened by splits
            if self.splits_to_chain:
                return df
            schema = with_hidden(op.schema, INGEST)
            native = self.source.native_files
            frame = (
                records_of_splits(df, reader, schema)
                if native is None
                else records_of_files(df, reader, schema, native.slices(self.batch_id))
            )
        else:
            frame = df if self.n_sources == 1 else df.filter(F.col(SOURCE_ID) == self.source.index)
        if frame.columns != [*op.schema.names, INGEST]:  # each transformation costs an analysis
            frame = frame.select(*op.schema.names, INGEST)
        if self.measured is not None:  # measured after Spark's combine, or by the chain reading it
            return frame
        self.observation = Observation(f"src_{op.id}_{self.batch_id}")
        # SQL text: each F function would cost Py4J round trips, every batch
        exprs = [F.expr("count(1) AS rows")]
        if self.source.event_time:
            exprs.append(F.expr(f"max(unix_micros({quote(self.source.event_time)})) AS max_event_us"))
        return frame.observe(self.observation, *exprs)

    def statistics(self, figures: TaskFigures) -> dict:
        """Rows and latest event time of the batch's records (from the task metrics'
        ``figures`` when a keyed stage measured them)."""
        if self.measured is not None:
            return self.measured.take(figures)
        return self.observation.get


@dataclass
class NativeStage(Stage):
    op: Operator

    def build(self, frames: dict) -> Any:
        op = self.op
        frame = frames[op.inputs[0]]
        if isinstance(op.spec, KeyByOp):  # the exchange happens in the keyed stage
            return frame
        if isinstance(op.spec, UnionOp):
            for other in op.inputs[1:]:
                frame = frame.unionByName(frames[other])
            return frame
        return apply_native(op, frame)


@dataclass
class ChainFusion:
    """What a fused Python chain also runs in its pass (:func:`chain_fusions`): the native
    filters after it that Arrow evaluates as Spark does, and the map-side combine of the
    running aggregate after those."""

    end: str  # the id of the last operator the pass stands for (the chain's tail or a filter)
    filters: list[Kernel] = field(default_factory=list)
    combine: tuple[str, AggregateKernel] | None = None  # the keyed operator's id and kernel

    @property
    def absorbed(self) -> set[str]:
        return {k.op.id for k in self.filters}


@dataclass
class ChainStage(Stage):
    op: Operator  # the last operator its pass runs: the chain's tail, or a filter fused after it
    chain: list[Operator]  # as planned (alternates, threads)
    upstream: Operator
    rebalance: int | None  # partitions a costly chain spreads its input over
    env: TaskEnv  # its tasks' batch (``env.source_stats``: of the source it reads directly, to measure)
    fusion: ChainFusion | None = None  # native operators and a combine run in the same pass
    splits_reader: Any = None  # its input is a source's splits: their reader (``sources.splits``)

    def build(self, frames: dict) -> Any:
        frame = frames[self.upstream.id]
        if self.rebalance is not None:  # a costly chain gets more tasks than its input has
            frame = frame.repartition(self.rebalance)
        fusion = self.fusion or ChainFusion(self.chain[-1].id)
        return python_chain(
            frame,
            self.chain,
            self.upstream.schema,
            self.env,
            fusion.filters,
            fusion.combine,
            self.splits_reader,
        )


@dataclass
class KeyedStage(Stage):
    op: Operator  # as planned (its active alternate)
    kernel: KeyedKernel
    key_by: Operator
    plan: KeyedStagePlan
    store: KeyGroupStore
    state: StateTransaction
    env: TaskEnv  # its tasks' batch (``env.source_stats``: of the source whose records it combines)
    # False when collocated with the keyed operator before it (plan.collocation): its rows
    # are in their key group's partition already, so no exchange
    exchanges: bool = True
    # the keyed operator before and its keys, whose key groups' traffic to this one's is
    # counted (plan.collocation.traffic_source), or None
    upstream: tuple[str, list[str]] | None = None
    # the fused chain before combined the records per map task (ChainFusion.combine)
    combined: bool = False
    _finish: Any = field(default=None, repr=False)

    def build(self, frames: dict) -> Any:
        op, kernel = self.op, self.kernel
        keyed_input, keyed_schema = frames[self.key_by.id], self.key_by.schema
        join = kernel.inner if isinstance(kernel, TTLKernel) else kernel  # a join's buffers may expire
        if isinstance(join, JoinKernelBase):  # both sides, as one tagged union (sluice.runtime.joins)
            keyed_input = tagged_union(keyed_input, frames[op.inputs[1]], join)
            keyed_schema = join.union
        if self.combined:
            assert isinstance(kernel, AggregateKernel)  # chain_fusions combines for these alone
            keyed_schema = kernel.combined_schema(keyed_schema)
        if self.exchanges:
            routed = exchange(
                keyed_input,
                op,
                kernel,
                keyed_schema,
                self.plan,
                self.env,
                self.upstream[1] if self.upstream else None,
                precombined=self.combined,
            )
            frame, schema, self._finish = routed.frame, routed.schema, routed.finish
            traffic_from = self.upstream[0] if self.upstream and routed.traffic else None
        else:
            traffic_from = None
            frame, schema = collocated_input(keyed_input, op, kernel, keyed_schema, self.plan, self.env)
        return keyed_stage(
            frame,
            op,
            schema,
            self.plan,
            (self.store.root, op.id, kernel.key_columns),
            self.state.index(op.id),
            self.env,
            kernel=kernel,
            traffic_from=traffic_from,
        )

    def finish(self) -> dict[str, float]:
        return self._finish() if self._finish is not None else {}


@dataclass
class BatchLineage:
    """The stages of one batch, in topological order, and the frames they built."""

    graph: JobGraph
    stages: list[Stage]
    frames: dict = field(default_factory=dict)
    persisted: list = field(default_factory=list)

    def build(self, df) -> dict:
        """Every stage's frame by operator id; outputs with several consumers are persisted."""
        self.frames = {BATCH_INPUT: df}
        for stage in self.stages:
            frame = stage.build(self.frames)
            if len(self.graph.consumers(stage.op.id)) > 1:
                frame = frame.persist()  # fan-out: no branch recomputes the shared upstream
                self.persisted.append(frame)
            self.frames[stage.op.id] = frame
        return self.frames

    def finish(self, accumulator) -> None:
        """Each stage's driver-side work after the job; its metrics join the tasks'."""
        for stage in self.stages:
            metrics = stage.finish()
            accumulator.add({MetricKey(stage.op.id, metric): n for metric, n in metrics.items() if n})

    def source_statistics(self, figures: TaskFigures) -> dict[str, dict]:
        """Source id -> its batch statistics (rows, max_event_us)."""
        return {s.op.id: s.statistics(figures) for s in self.stages if isinstance(s, SourceStage)}

    def release(self) -> None:
        for frame in self.persisted:
            frame.unpersist()
        self.persisted = []


def compile_batch(graph: JobGraph, plan: Plan, batch: BatchInputs) -> BatchLineage:
    """The batch's stages, from the graph and its Plan (chains, routing, alternates)."""
    stages: list[Stage] = []
    chain_of = {chain[-1]: chain for chain in plan.chains}
    fusions = chain_fusions(graph, plan, batch.kernel_of)
    absorbed = {i for f in fusions.values() for i in f.absorbed}
    combined = {f.combine[0] for f in fusions.values() if f.combine is not None}
    # keyed operator or chain (by its last operator's id) -> the source statistics it measures
    measured: dict[str, SourceStats] = {}
    splits_read_by: dict[str, Any] = {}  # chain (by its last operator's id) -> the reader of its splits
    env = TaskEnv(batch.context, batch.checkpoint, batch.accumulator, plan.max_parallelism)
    for op in graph.topological_order():
        if op.is_source:
            info = next(s for s in batch.sources if s.op.id == op.id)
            reading = chain_reading(graph, op, plan)
            received = received_directly(graph, op, plan, info.event_time, batch.kernel_of)
            measurer = combined_directly(graph, op, batch.kernel_of) or reading or received
            stats = None
            if measurer is not None:
                stats = measured[measurer] = SourceStats(op.id, info.event_time, records=measurer == received)
            # a chain the plan spreads over more tasks gets records: two splits make two tasks
            if (
                info.splits_reader is not None
                and info.native_files is None
                and reading is not None
                and plan.rebalance.get(graph.consumers(op.id)[0].id) is None
            ):
                splits_read_by[reading] = info.splits_reader
            stages.append(SourceStage(op, info, len(batch.sources), batch.batch_id, stats, reading in splits_read_by))
        elif op.is_sink:
            continue  # written by the executor, step 3
        elif op.id in absorbed:
            continue  # a filter run by the chain before it, in its pass
        elif op.is_native:
            stages.append(NativeStage(op))
        elif op.is_python:
            if op.id not in chain_of:
                continue  # inside a fused chain: runs in its tail's pass
            chain = [as_planned(graph[i], plan) for i in chain_of[op.id]]
            fusion = fusions.get(op.id)
            # the stage's frame stands for the last operator it runs (consumers look it up by id)
            end = graph[fusion.end] if fusion is not None else op
            stages.append(
                ChainStage(
                    end,
                    chain,
                    graph[chain[0].inputs[0]],
                    plan.rebalance.get(chain[0].id),
                    env.measuring(measured.get(op.id)),
                    fusion,
                    splits_read_by.get(op.id),
                )
            )
        else:  # keyed
            planned = as_planned(op, plan)  # the active alternate's function
            stages.append(
                KeyedStage(
                    planned,
                    batch.kernel_of(planned),
                    graph[op.inputs[0]],
                    plan.keyed[op.id],
                    batch.stores[op.id],
                    batch.state,
                    env.measuring(measured.get(op.id)),
                    exchanges=plan.exchanges_before(op.id),
                    upstream=traffic_source(graph, op.id),
                    combined=op.id in combined,
                )
            )
    return BatchLineage(graph, stages)


def chain_fusions(graph: JobGraph, plan: Plan, kernel_of) -> dict[str, ChainFusion]:
    """Chain tail id -> what its pass also runs, for the chains that fuse something.

    After a chain's tail, as long as the only consumer is a native filter that Arrow
    evaluates exactly as Spark does (``kernels.predicates``), the filter runs in the chain's
    pass: its records never go back to the JVM to be filtered. If what is left feeds only a
    key_by, that only a running aggregate the records can be combined for
    (``AggregateKernel.combinable``) and exchanged before, the pass also combines each
    task's records per key: one row of partials per key crosses the exchange."""
    fusions: dict[str, ChainFusion] = {}
    for chain in plan.chains:
        schema = chain_schemas([graph[i] for i in chain], graph[graph[chain[0]].inputs[0]].schema)[-1]
        if schema is None:
            continue
        fusion = ChainFusion(chain[-1])
        while True:
            consumers = graph.consumers(fusion.end)
            kernel = fused_filter(consumers[0], schema) if len(consumers) == 1 else None
            if kernel is None:
                break
            fusion.filters.append(kernel)
            fusion.end = consumers[0].id
        fusion.combine = _combine_after(graph, plan, fusion.end, schema, kernel_of)
        if fusion.filters or fusion.combine:
            fusions[chain[-1]] = fusion
    return fusions


def _combine_after(graph: JobGraph, plan: Plan, end: str, schema, kernel_of) -> tuple[str, AggregateKernel] | None:
    """The running aggregate whose records ``end`` alone feeds through a key_by, and its
    kernel bound to ``schema``, when the records can be combined before its exchange."""
    consumers = graph.consumers(end)
    if len(consumers) != 1 or not isinstance(consumers[0].spec, KeyByOp):
        return None
    keyed = graph.consumers(consumers[0].id)
    if len(keyed) != 1 or not keyed[0].is_keyed or len(keyed[0].inputs) != 1:
        return None
    op = keyed[0]
    if not plan.exchanges_before(op.id):
        return None
    kernel = kernel_of(as_planned(op, plan))
    if not isinstance(kernel, AggregateKernel) or not kernel.combinable(schema):
        return None
    kernel.bind_records(schema)
    return op.id, kernel


def chain_reading(graph: JobGraph, source: Operator, plan: Plan) -> str | None:
    """The fused chain that reads the source's records and nothing else (the source feeds
    only the chain's first operator), by its last operator's id, if there is one.

    The chain measures the source's statistics on the Arrow batches it receives anyway
    (``SourceStats.measuring``), rather than Spark observing every record (see
    :func:`combined_directly`)."""
    consumers = graph.consumers(source.id)
    if len(consumers) != 1 or not consumers[0].is_python:
        return None
    return next((chain[-1] for chain in plan.chains if chain[0] == consumers[0].id), None)


def combined_directly(graph: JobGraph, source: Operator, kernel_of=None) -> str | None:
    """The keyed operator whose Spark combine sees exactly the source's records (the
    source feeds only a key_by that feeds only it), if there is one.

    The source's statistics (rows, latest event time) are then measured by that keyed
    stage on the combined rows, a few per key and pane (``batch.source_stats.SourceStats``),
    rather than observed on every record: an observation is an operator Spark cannot
    compile into the stage's generated code, so it costs on every row it sees."""
    consumers = graph.consumers(source.id)
    if len(consumers) != 1 or not isinstance(consumers[0].spec, KeyByOp):
        return None
    keyed = graph.consumers(consumers[0].id)
    if len(keyed) != 1 or not keyed[0].is_keyed:
        return None
    kernel = kernel_of(keyed[0]) if kernel_of is not None else keyed_kernel(keyed[0], [consumers[0].schema])
    return keyed[0].id if combined_by_spark(kernel, consumers[0].schema) else None


def received_directly(graph: JobGraph, source: Operator, plan: Plan, event_time: str | None, kernel_of) -> str | None:
    """The keyed operator whose exchange sends it exactly the source's records, uncombined
    (the source feeds only a key_by that feeds only it, across an exchange that keeps the
    source's event time column), if there is one.

    That keyed stage measures the source's statistics on the records it receives anyway
    (``exchange.receives_records``), as :func:`combined_directly` does on combined rows."""
    consumers = graph.consumers(source.id)
    if len(consumers) != 1 or not isinstance(consumers[0].spec, KeyByOp):
        return None
    keyed = graph.consumers(consumers[0].id)
    if len(keyed) != 1 or not keyed[0].is_keyed or len(keyed[0].inputs) != 1 or not plan.exchanges_before(keyed[0].id):
        return None
    kernel = kernel_of(as_planned(keyed[0], plan))
    return keyed[0].id if receives_records(kernel, consumers[0].schema, event_time) else None


def as_planned(op: Operator, plan: Plan) -> Operator:
    """The operator as the plan runs it: its active alternate (``graph.alternates``), and
    the worker threads the plan may give it."""
    op = with_alternate(op, plan.alternates.get(op.id))
    threads = plan.threads.get(op.id)
    return op if threads is None or threads == op.threads else replace(op, threads=threads)
