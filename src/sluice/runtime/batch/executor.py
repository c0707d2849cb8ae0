"""One micro-batch, exactly once (docs/runtime.md, section 3).

Inside ``foreachBatch(df, batch_id)``:
1. take the Plan for ``batch_id`` from the plan log (a replay uses the plan it ran with);
2. build the batch's DataFrame lineage (``runtime.batch.compile``: named stages for sources, native
   expressions, fused Python chains, and exchanges by key group into keyed stages over the
   key-group store, read through the batch's ``StateTransaction``); persist at fan-out points;
3. write every sink idempotently for ``batch_id``;
4. commit the key-group state for ``batch_id``, then record the batch as done with its
   metrics; a batch already done (crash after step 4, before Spark's commit log) is skipped;
5. the controller reads the metrics and may write the Plan of a later batch.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.errors import PlanError
from sluice.graph import JobGraph
from sluice.graph.constraints import measuring_sinks, path_operators
from sluice.graph.operators import Operator
from sluice.graph.sinks import FileSink, SinkSpec
from sluice.graph.specs import FunctionSpec
from sluice.models.economics import EconomicsMeter
from sluice.models.latency import split_path_latency
from sluice.plan.physical import Plan
from sluice.runtime import sinks
from sluice.runtime.batch import metrics as metrics_log
from sluice.runtime.batch.compile import BatchInputs, BatchLineage, SourceInfo, compile_batch
from sluice.runtime.batch.event_time import EventClock, SourceTime, kernel_queries, processing_time_due
from sluice.runtime.batch.listener import BatchListener
from sluice.runtime.batch.metrics import BatchMetrics, KeyGroupLoad, SinkProgress
from sluice.runtime.batch.stages import HOLDING
from sluice.runtime.batch.task_metrics import MetricsParam, TaskFigures, collect
from sluice.runtime.batch.traffic import traffic_metrics
from sluice.runtime.checkpoint import Checkpoint
from sluice.runtime.dead_letters import DEFAULT_BUDGET, check_budget
from sluice.runtime.exchange import prepare_hash_exchange
from sluice.runtime.executor_pool import executor_infos
from sluice.runtime.file_rolling import remove_if_empty, roll
from sluice.runtime.kernels.factory import keyed_kernel
from sluice.runtime.kernels.keyed import BatchContext, KeyedKernel
from sluice.runtime.kernels.process import NEXT_TIMER_NEG
from sluice.runtime.kernels.windows import LATE
from sluice.runtime.planlog import PlanLog
from sluice.runtime.schemas import INGEST
from sluice.runtime.side_outputs import DEAD_LETTER, clear_side_output, read_side_output
from sluice.runtime.state import KeyGroupStore
from sluice.runtime.state.transaction import StateTransaction
from sluice.runtime.warmup import in_background

MICROS = 1_000_000
# quantiles of the ingest times of a batch's output rows: the oldest 1 % and 5 % give the
# latency's p99 and p95, the median its p50
LATENCY_QUANTILES = (0.01, 0.05, 0.5)


class BatchExecutor:
    """Runs each micro-batch of one job; the ``foreachBatch`` function of the query."""

    def __init__(
        self,
        spark,
        graph: JobGraph,
        checkpoint: str | Checkpoint,
        plan_log: PlanLog,
        sources: list[SourceInfo],
        dead_letter_sink: SinkSpec | None = None,
        dead_letter_budget: float = DEFAULT_BUDGET,
        late_data_sink: SinkSpec | None = None,
        listener: BatchListener | None = None,
    ):
        self.spark = spark
        # the job's side of each batch: the lease's fence, the sources' backlog, the control
        # loop, the progress display (``runtime.batch.listener``)
        self.listener = listener or BatchListener()
        self.graph = graph
        self.checkpoint = Checkpoint.of(checkpoint)
        self.plan_log = plan_log
        self.sources = sources
        self.dead_letter_sink = dead_letter_sink
        self.dead_letter_budget = dead_letter_budget
        self.late_data_sink = late_data_sink
        self.order = graph.topological_order()
        self.accumulator = spark.sparkContext.accumulator({}, MetricsParam())
        self._kernels: dict[tuple, KeyedKernel] = {}  # (operator id, its active function) -> kernel
        self.stores = {op.id: self._store(op) for op in graph.operators if op.is_keyed}
        self.clock = self._recover_clock()
        self._tick_source = next((src.op.id for src in sources if src.ticks), None)
        self._tick_pending = False  # a tick request this driver wrote is waiting to be served
        self.tick_due_us: int | None = None  # when that request is due (microseconds since the epoch)
        # per keyed operator, its earliest processing-time timer as of the last batch done
        self._timers_due: dict[str, int] = {}
        # per keyed operator, whether a partition held state after the last batch done (what
        # its tasks reported; the store's sizes count deleted rows until a compaction)
        self._holding: dict[str, bool] = {}
        self.last_batch: BatchMetrics | None = None
        self.in_batch = False
        # set by ``stop_after_this_batch``: no batch starts after it (``__call__`` refuses)
        self.stopping = False
        self.refused: int | None = None  # the batch refused after the stop, if one was
        self._batch_gate = threading.Lock()
        self.failure: Exception | None = None  # what a batch raised, for the job to report
        self.batches_done = 0
        self._compaction: Future | None = None  # the running background compaction
        # what the last batch runs after its commit, beside Spark's next trigger (``_run``),
        # on one thread kept for the run (starting a thread a batch costs the batch ms)
        self._beside: Future | None = None
        self._beside_thread: ThreadPoolExecutor | None = None
        self._economics: EconomicsMeter | None = None  # made at the first batch
        # each recent batch's time by phase of ``_run`` (seconds), for profiling (docs/latency.md)
        self.phases: deque[dict] = deque(maxlen=1000)
        self._waited = 0.0  # seconds the running batch waited for the one before's remainder

    # ---- persistence of batch records -----------------------------------------------------
    def _read_record(self, batch_id: int, what: str) -> dict | None:
        return self.checkpoint.read_json(Checkpoint.batch_record(batch_id, what))

    def _write_record(self, batch_id: int, what: str, payload: dict) -> None:
        self.checkpoint.write_json(Checkpoint.batch_record(batch_id, what), payload)

    @property
    def max_event_us(self) -> dict[str, int]:
        """The latest event time seen per source, as of the last batch done."""
        return self.clock.max_event_us

    def _recover_clock(self) -> EventClock:
        """What the watermark is computed from, as of the last batch done. That record
        carries the running maximum, so a restart reads one record, not one per batch ever
        run (checkpoints written before it did are read in full)."""
        done = self.checkpoint.done_batches()
        last = (self._read_record(done[-1], "done") or {}) if done else {}
        if "max_event_us_so_far" in last:
            clock = EventClock.from_record(last)
        else:
            clock = EventClock()
            for batch_id in done:
                record = self._read_record(batch_id, "done") or {}
                for name, us in (record.get("max_event_us") or {}).items():
                    clock.max_event_us[name] = max(clock.max_event_us.get(name, us), us)
        if done and "watermark" not in last:  # recorded before the done record carried it
            clock.watermark = (self._read_record(done[-1], "start") or {}).get("watermark")
        return clock

    def _source_times(self) -> list[SourceTime]:
        return [SourceTime(src.op.id, src.event_time, src.watermark_delay_us, src.idle_timeout_us) for src in self.sources]

    def _store(self, op: Operator):
        return KeyGroupStore(self.checkpoint.uri, op.id, self.kernel(op).key_columns)

    def kernel(self, op: Operator) -> KeyedKernel:
        """The kernel of a keyed operator as planned (its active alternate's function): made
        once, here, and kept; the exchange and the keyed stage of every batch share it."""
        key = (op.id, id(op.spec.fn if isinstance(op.spec, FunctionSpec) else None))
        kernel = self._kernels.get(key)
        if kernel is None:
            kernel = self._kernels[key] = keyed_kernel(op, [self.graph[i].schema for i in op.inputs])
        return kernel

    def _ended_sources(self, batch_id: int) -> set[str]:
        """Sources whose input has ended as of ``batch_id``, read from Spark's offset log.

        Spark writes ``spark/offsets/<batch_id>`` before it runs the batch and a replay reuses
        it, so every execution of the batch, before or after a crash, finds the same ends."""
        return ended_in_offset_log(self.checkpoint.read_bytes(Checkpoint.spark_offsets(batch_id)))

    def _watermark(self, ended: set[str], now_us: int | None = None) -> int | None:
        """Minimum over event-time sources of (max event time seen so far - delay) for a batch
        processed at ``now_us``; an ended source, or an idle one, no longer holds it back, and
        it never goes back (``runtime.batch.event_time``)."""
        return self.clock.watermark_at(self._source_times(), ended, now_us)

    # ---- the batch -------------------------------------------------------------------------
    def __call__(self, df, batch_id: int) -> None:
        waited = time.time()
        try:  # first, so that a stop its hooks ask for refuses this batch
            self._after_previous()
        except Exception as exc:
            self.failure = exc
            raise
        self._waited = time.time() - waited
        with self._batch_gate:
            if self.stopping:
                # Spark planned this batch as the stop came: it must not commit it (returning
                # would), nor start writing what the stop would cut short. Raising ends the
                # query with the batch uncommitted; a restart replays it (the job reads this
                # refusal as the clean stop it is, ``job._stop_between_batches``)
                self.refused = batch_id
                raise StopRequested(f"batch {batch_id} not started: the job is stopping")
            self.in_batch = True
        try:
            if self._read_record(batch_id, "done") is not None:
                return  # already committed before a crash: sinks and state hold it
            self._run(df, batch_id)
        except Exception as exc:
            # Spark hands the query's caller only this error's text: keep it whole
            self.failure = exc
            raise
        finally:
            self.in_batch = False

    def stop_after_this_batch(self) -> None:
        """Let the running batch (if one runs) finish and start no other."""
        with self._batch_gate:
            self.stopping = True

    def _run(self, df, batch_id: int) -> None:
        """docs/runtime.md, section 3, step by step."""
        started = time.time()
        lap = PhaseClock(started)
        # waiting for what the batch before left running beside Spark (``_after_previous``)
        lap.seconds["after_previous"] = round(self._waited, 5)
        self.listener.check_fence()
        # 1. the Plan for this batch, and its time and watermark (fixed for any replay)
        plan = self.plan_log.plan_for(batch_id)
        if plan is None:
            raise PlanError(f"batch {batch_id}: the plan log {self.plan_log.root!r} has no plan for it")
        start = self._read_record(batch_id, "start")
        replay = start is not None
        if start is None:  # first execution
            if self.clock.first_us is None:
                self.clock.first_us = int(started * MICROS)
            watermark = self._watermark(self._ended_sources(batch_id), int(started * MICROS))
            start = {"processing_time": int(started * MICROS), "watermark": watermark, "plan": plan.version}
            self._write_record(batch_id, "start", start)
        context = BatchContext(batch_id, 0, start["watermark"], start["processing_time"])
        clear_side_output(self.checkpoint, DEAD_LETTER, batch_id)
        self.accumulator.value = {}
        lap("plan")

        # 2. the batch's lineage: named stages over the state the batch reads
        state = StateTransaction(self.stores, batch_id)
        if plan.keyed:  # Spark's combines route through its hash exchange: as many partitions as needed
            prepare_hash_exchange(df.sparkSession, max(stage.partitions for stage in plan.keyed.values()))
        frames, lineage = self._build(df, batch_id, plan, context, state)
        lap("build")

        # 3. every sink, idempotently for batch_id (this runs the batch's Spark job)
        self.listener.check_fence()  # a driver another has replaced writes nothing more
        sink_stats = {op.id: self._write_sink(op, frames[op.inputs[0]], batch_id, started) for op in self.graph.sinks()}
        lap("spark_job_and_sinks")
        lineage.finish(self.accumulator)  # the stages' driver-side work: late records fetched
        dead = self._forward_dead_letters(batch_id, replay)
        self._forward_late_records(batch_id, replay)
        check_budget(
            self.graph,
            batch_id,
            dead,
            collect(self.accumulator.value).operators,
            self.dead_letter_budget,
            self.checkpoint.location(DEAD_LETTER, f"batch={batch_id:09d}"),
        )

        lap("side_outputs")
        # 4. commit the key-group state, then record the batch as done with its metrics
        self.listener.check_fence()
        state.commit()
        lap("state_commit")
        figures = collect(self.accumulator.value)
        per_op = figures.operators
        observed = lineage.source_statistics(figures)
        rows_by_source = {op_id: int(stats.get("rows") or 0) for op_id, stats in observed.items()}
        observed_event_us = self._observed_event_times(observed, rows_by_source, start["processing_time"])
        self.clock.watermark = start["watermark"]
        self._timers_due = {
            op_id: -int(values.counters[NEXT_TIMER_NEG])
            for op_id, values in per_op.items()
            if values.counters.get(NEXT_TIMER_NEG) is not None
        }
        # a partition that ran no task for such an operator held no state of it
        self._holding = {
            op.id: bool(figures.operator(op.id).counters.get(HOLDING))
            for op in self.graph.operators
            if op.is_keyed and self.kernel(op).wants_timers
        }
        lap("metrics")
        self._write_record(
            batch_id,
            "done",
            {
                "max_event_us": observed_event_us,
                **self.clock.to_record(),
                "rows_by_source": rows_by_source,
                "timers_due": self._timers_due,
                "holding": self._holding,
            },
        )
        lap("done_record")
        self._request_tick(batch_id, state)
        lap("tick")
        # the batch is committed. What is left reads its figures and writes its records, and
        # decides nothing a source or the next batch's offsets depend on unless the listener
        # steers (a control loop): then it runs now; else beside Spark's commit of this batch
        # and planning of the next, which waits for it before it starts (``_after_previous``)
        ended, backlog = time.time(), self.listener.backlog()

        def after() -> None:
            m = self._metrics(batch_id, plan, started, ended, figures, observed, sink_stats, dead, context, state, backlog)
            lap("metrics")
            self._after_commit(m, plan, state, lineage, lap)

        if self.listener.steers():
            after()
        else:
            lap.beside()
            if self._beside_thread is None:
                self._beside_thread = ThreadPoolExecutor(1, "sluice-after-batch")
            self._beside = self._beside_thread.submit(after)

    def _after_commit(self, m: BatchMetrics, plan: Plan, state: StateTransaction, lineage: BatchLineage, lap: PhaseClock) -> None:
        """Once a batch is committed: its metrics line, housekeeping, the control step."""
        batch_id = m.batch_id
        metrics_log.append(self.checkpoint, m)
        lap("metrics_log")
        self._compact(batch_id, state)
        self._roll_files(batch_id)
        lineage.release()
        lap("housekeeping")
        self.last_batch = m
        self.batches_done += 1
        self.listener.committed(m)

        # 5. the controller reads the metrics and may plan a later batch; before batch_done,
        # so a progress line shows this batch's decision
        new_plan = self.listener.next_plan(m, plan)
        if new_plan is not None:
            self.plan_log.write(_as_version(new_plan, batch_id + 1))
        lap("controller")
        self.listener.batch_done(m)
        lap("on_batch")
        self.phases.append({"batch_id": batch_id, "rows": m.rows_in, **lap.seconds})

    def _after_previous(self) -> None:
        """Wait for what the last batch left running beside Spark after its commit (its
        metrics line, housekeeping, hooks): a batch starts once it is done, and what it raised
        fails this batch (the last one stays committed; a restart goes on after it)."""
        beside, self._beside = self._beside, None
        if beside is not None:
            beside.result()

    def _build(
        self, df, batch_id: int, plan: Plan, context: BatchContext, state: StateTransaction | None = None
    ) -> tuple[dict, BatchLineage]:
        """Step 2: the batch's lineage (``runtime.batch.compile``) built over ``df``; returns the
        frames by operator id, and the lineage that finishes and releases them."""
        state = state if state is not None else StateTransaction(self.stores, batch_id)
        lineage = compile_batch(
            self.graph,
            plan,
            BatchInputs(batch_id, context, self.checkpoint, self.accumulator, self.sources, self.stores, state, self.kernel),
        )
        return lineage.build(df), lineage

    def _compact(self, batch_id: int, state: StateTransaction) -> None:
        """Keep state reads bounded: snapshot a store once its deltas outweigh its state.

        Called between batches, after ``batch_id`` is recorded done (no replay needs the
        history this collects). The snapshot is written in the background while the next
        batch runs: it becomes visible to later batches only when its record is written,
        whole. History is collected here, between batches, and only once that snapshot is
        complete: no task is reading then, and no unfinished snapshot is mistaken for
        garbage."""
        compacted: list[str] = []
        if self._compaction is not None:
            if not self._compaction.done():
                return
            compacted = self._compaction.result()  # raises what the compaction raised
            self._compaction = None
            for op_id in compacted:
                self.stores[op_id].gc(before_batch=batch_id + 1)
        # the batch's committed index, unless a snapshot finished since it was built
        indexes = {
            op_id: store.index(before_batch=batch_id + 1) if op_id in compacted else state.committed_index(op_id)
            for op_id, store in self.stores.items()
        }
        due = [op_id for op_id, index in indexes.items() if KeyGroupStore.compaction_due(index, max_delta_ratio=2.0)]
        if due:
            # a store of its own: the batch thread's store keeps its caches to itself
            stores = [self._store(self.graph[op_id]) for op_id in due]

            def compact() -> list[str]:
                for store in stores:
                    store.compact(batch_id)
                return due

            self._compaction = in_background(compact, "sluice-compaction")

    def _roll_files(self, batch_id: int) -> None:
        """File sinks with a target file size roll their small committed batches together
        (``runtime.file_rolling``), now that ``batch_id`` is recorded done."""
        for op in self.graph.sinks():
            spec = op.connector
            if isinstance(spec, FileSink) and spec.target_file_bytes:
                roll(spec.path, batch_id, spec.target_file_bytes)

    def close(self) -> None:
        """Wait for what the last batch left running after its commit and for a background
        compaction, then collect the history it made redundant. Call once the query has
        stopped (no batch runs)."""
        try:
            self._after_previous()
        except Exception as exc:
            self.failure = self.failure or exc
            raise
        finally:
            if self._beside_thread is not None:
                self._beside_thread.shutdown()
                self._beside_thread = None
        if self._compaction is not None:
            compacted, self._compaction = self._compaction.result(), None
            for op_id in compacted:
                self.stores[op_id].gc()

    def _write_sink(self, op: Operator, frame, batch_id: int, started: float) -> SinkProgress:
        """Write one sink and measure it: rows, and latency from the ingest times of its rows.

        Rows that come to the driver are measured there, in Arrow; for a sink that writes in
        Spark an observation gathers the same figures (an approximate percentile, computed
        on every output row in Spark's tasks)."""
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        spec = op.connector
        obs = None
        if not sinks.collects_to_driver(spec):
            obs = Observation(f"sink_{op.id}_{batch_id}")
            frame = frame.observe(
                obs,
                F.expr("count(1) AS rows"),
                F.expr(f"percentile_approx(unix_micros({INGEST}), array({', '.join(map(str, LATENCY_QUANTILES))}), 1000) AS q"),
                F.expr(f"avg(unix_micros({INGEST})) AS mean_us"),
            )
        t0 = time.time()
        collected = sinks.write(spec, frame, batch_id, checkpoint=self.checkpoint)
        done = time.time()
        if obs is not None:
            stats = obs.get
            rows, q, mean_us = int(stats.get("rows") or 0), stats.get("q"), stats.get("mean_us")
            if isinstance(spec, FileSink):  # no empty directory for a batch without rows
                remove_if_empty(spec.path, batch_id, rows)
        else:
            assert collected is not None  # a sink that writes on the driver returns its rows
            rows, q, mean_us = collected.num_rows, _ingest_quantiles(collected), _ingest_mean(collected)
        # committed_ms: from the batch's start to this sink's commit (the latency split's
        # in-batch part; models.latency)
        out = {"rows": rows, "write_s": round(done - t0, 4), "committed_ms": round((done - started) * 1000, 2)}
        if q is not None and out["rows"]:
            # latency of a record = commit time of the sink - its ingest time; the oldest
            # ingest times give the high percentiles
            now_us = done * MICROS
            out["latency_p99_ms"] = round((now_us - q[0]) / 1000, 2)
            out["latency_p95_ms"] = round((now_us - q[1]) / 1000, 2)
            out["latency_p50_ms"] = round((now_us - q[2]) / 1000, 2)
            if mean_us is not None:  # Nephele Eq. 1 averages over records: the mean, not the median
                out["latency_mean_ms"] = round((now_us - float(mean_us)) / 1000, 2)
        return SinkProgress.from_dict(out)

    def _forward_dead_letters(self, batch_id: int, replay: bool) -> list[dict]:
        records = read_side_output(self.checkpoint, DEAD_LETTER, batch_id)
        # a replay writes even none: it replaces what the batch's earlier execution wrote
        if self.dead_letter_sink is not None and (records or replay):
            sinks.write_table(
                self.dead_letter_sink, pa.Table.from_pylist(records), batch_id, self.spark, checkpoint=self.checkpoint
            )
        return records

    def _forward_late_records(self, batch_id: int, replay: bool) -> None:
        """The records window operators judged late in this batch, to the late-data sink."""
        if self.late_data_sink is None:
            return
        late = [r for op in self.graph.operators for r in read_side_output(self.checkpoint, f"side/{op.id}/{LATE}", batch_id)]
        if late or replay:
            sinks.write_table(self.late_data_sink, pa.Table.from_pylist(late), batch_id, self.spark, checkpoint=self.checkpoint)

    def _observed_event_times(self, observed: dict[str, dict], rows: dict[str, int], processing_time: int) -> dict[str, int]:
        """Each event-time source's latest event time in the batch; advances the clock."""
        out = {}
        for src in self.sources:
            value = observed.get(src.op.id, {}).get("max_event_us") if src.event_time else None
            if value is not None:
                out[src.op.id] = int(value)
            self.clock.saw(src.op.id, out.get(src.op.id), int(rows.get(src.op.id, 0)), processing_time)
        return out

    # ---- batches without new input (``runtime.batch.event_time``, ``sources.ticks``) -------------
    def _tick_due(self, batch_id: int, state: StateTransaction | None, now_us: int) -> int | None:
        """When a batch with no new input should follow batch ``batch_id`` (None: none is
        needed). Only an operator with state that time alone can close asks for one."""
        timed = [op for op in self.graph.operators if op.is_keyed and self.kernel(op).wants_timers]
        holding = [op for op in timed if self._has_state(op.id, batch_id, state)]
        if not holding:
            return None
        ended = self._ended_sources(batch_id)
        if all(src.op.id in ended for src in self.sources):
            return None  # the end-of-input batch has closed everything
        sources = self._source_times()
        due: list[int] = []
        moved = self._watermark(ended, now_us)
        if moved is not None and (self.clock.watermark is None or moved > self.clock.watermark):
            due.append(now_us)  # the watermark moved: emit and evict what it closed
        idle = self.clock.next_idle_us(sources, ended, now_us)
        if idle is not None:
            due.append(idle)
        for op in holding:
            at = processing_time_due(kernel_queries(self.kernel(op)), now_us)
            if at is not None:
                due.append(at)
            if op.id in self._timers_due:  # a processing-time timer of ``process``
                due.append(max(self._timers_due[op.id], now_us))
            ttl = getattr(self.kernel(op), "ttl", None)
            if ttl is not None and ttl.time == "processing":  # what is held now has expired by then
                due.append(now_us + ttl.ttl_us)
        return min(due) if due else None

    def _has_state(self, op_id: str, batch_id: int, state: StateTransaction | None) -> bool:
        if op_id in self._holding:
            return self._holding[op_id]
        store = self.stores[op_id]
        index = state.committed_index(op_id) if state is not None else store.index(before_batch=batch_id + 1)
        return any(size > 0 for size in store.key_group_sizes(index).values())

    def _request_tick(self, batch_id: int, state: StateTransaction | None = None) -> None:
        """Ask the sources for a batch without new input when one is due after ``batch_id``,
        or cancel a request no longer needed (a batch with data has just run instead)."""
        from sluice.runtime.sources.ticks import TickRequest, request_tick

        if self._tick_source is None:
            return
        due = self._tick_due(batch_id, state, time.time_ns() // 1000)
        if due is None and not self._tick_pending:
            return
        request_tick(self.checkpoint.sources, self._tick_source, TickRequest(batch_id, due))
        self._tick_pending = due is not None
        self.tick_due_us = due

    def batch_due_without_input(self, within_s: float) -> bool:
        """Whether a batch without new input is asked for and due within ``within_s`` seconds
        (a harness that runs given batches waits for it before stopping)."""
        due = self.tick_due_us if self._tick_pending else None
        return due is not None and due <= time.time_ns() // 1000 + int(within_s * 1e6)

    def recover_ticks(self) -> None:
        """On a (re)start: if the last batch done left something due (a watermark it moved,
        a source about to be idle, processing-time windows), ask for the batch that acts on
        it, as the run before would have. A request already served is not served again."""
        done = self.checkpoint.done_batches()
        if done:
            record = self._read_record(done[-1], "done") or {}
            self._timers_due = {op_id: int(us) for op_id, us in (record.get("timers_due") or {}).items()}
            self._holding = {op_id: bool(held) for op_id, held in (record.get("holding") or {}).items()}
            self._tick_pending = True  # whatever a crashed run left in the file is replaced
            self._request_tick(done[-1])

    def _metrics(
        self,
        batch_id,
        plan,
        started,
        ended,
        figures: TaskFigures,
        observed,
        sink_stats,
        dead,
        context,
        state: StateTransaction,
        backlog: dict[str, int | None],
    ) -> BatchMetrics:
        """``figures``: the tasks' metrics; ``observed``: each source's rows and latest event
        time; ``ended``: when the batch was committed; ``backlog``: the sources' then."""
        per_op = figures.operators
        traffic = traffic_metrics(figures.traffic, plan)
        key_groups = {}
        for op_id, store in self.stores.items():
            rows = figures.key_group_rows.get(op_id, {})
            sizes = store.key_group_sizes(state.committed_index(op_id))
            key_groups[op_id] = KeyGroupLoad(
                {kg: int(rows.get(kg, 0)) for kg in sorted(set(rows) | set(sizes))},
                {kg: int(sizes.get(kg, 0)) for kg in sorted(set(rows) | set(sizes))},
            )
        rows_by_source = {op_id: int(stats.get("rows") or 0) for op_id, stats in observed.items()}
        paths = {}
        for constraint in self.graph.constraints:  # the latency split of each constrained path
            split = split_path_latency(
                sink_stats, per_op, path_operators(self.graph, constraint), measuring_sinks(self.graph, constraint)
            )
            if split is not None:
                paths[constraint.name] = split
        executors = executor_infos(self.spark)
        return BatchMetrics(
            batch_id=batch_id,
            plan_version=plan.version,
            started_at=started,
            duration_s=round(ended - started, 4),
            rows_in=sum(rows_by_source.values()),
            rows_by_source=rows_by_source,
            backlog=backlog,
            operators=per_op,
            sinks=sink_stats,
            key_groups=key_groups,
            traffic=traffic,
            dead_letters=len(dead),
            late_records=int(sum(progress.counters.get("side_late", 0) for progress in per_op.values())),
            watermark=context.watermark,
            paths=paths,
            executors=executors,
            alternates=dict(plan.alternates),
            dynamics=self._dynamics(plan, started, ended, sum(rows_by_source.values()), backlog, per_op, executors),
        )

    def _dynamics(
        self, plan: Plan, started: float, ended: float, rows_in: int, backlog: dict, per_op: dict, executors: list[dict]
    ) -> dict:
        """The batch's value, relative throughput, cost and profit (``models.economics``), and
        what each active alternate measured."""
        from sluice.graph.alternates import application_value, value_bounds
        from sluice.graph.economics import Economics
        from sluice.models.economics import BatchFacts, EconomicsMeter, measured_costs

        if self._economics is None:  # first batch of this run: go on from the last one recorded
            last = next((m.dynamics for m in reversed(metrics_log.read(self.checkpoint)) if m.dynamics), None)
            self._economics = EconomicsMeter(self.graph.economics or Economics(), *value_bounds(self.graph), last)
        facts = BatchFacts(
            started_at=started,
            ended_at=ended,
            value=application_value(self.graph, plan.alternates),
            rows_in=rows_in,
            backlog=backlog,
            executors=executors_held(plan, executors),
        )
        out = self._economics.measure(facts)
        keyed = {op.id for op in self.graph.operators if op.is_keyed}
        out["alternates"] = measured_costs(per_op, plan.alternates, keyed)
        return out


class PhaseClock:
    """Seconds spent in each named phase of a batch: ``lap(name)`` closes the phase that
    ran since the previous lap."""

    def __init__(self, started: float):
        self.last = started
        self.seconds: dict[str, float] = {}
        self.prefix = ""

    def __call__(self, name: str) -> None:
        now = time.time()
        name = self.prefix + name
        self.seconds[name] = round(self.seconds.get(name, 0.0) + now - self.last, 5)
        self.last = now

    def beside(self) -> None:
        """The phases from here on run beside Spark's next trigger: named ``beside_...``."""
        self.prefix = "beside_"


class StopRequested(Exception):
    """Raised in place of a batch Spark starts after the job asked to stop."""


def executors_held(plan: Plan, executors: list[dict]) -> int:
    """The executors the job pays for, what its cost is billed for: on a cluster the executors
    Spark reports registered besides the driver, and those requested and still starting (the
    Plan's ``executors``, what the controller asked for: a worker's cores are the job's from
    the moment the master launches an executor on it, as a cloud bills a VM from its launch);
    on local Spark, where the driver runs the tasks, what the Plan holds (default one)."""
    from sluice.runtime.executor_pool import held_executors

    held = held_executors(executors)
    if held:
        return max(len(held), plan.executors or 0)
    return plan.executors or 1


def ended_in_offset_log(entry: bytes | None) -> set[str]:
    """Names of the sources whose offset in one entry of Spark's offset log is an
    end-of-input punctuation (``sluice.runtime.sources.row_reader.end_of_input``).

    An entry is ``v1``, a line of batch metadata, then one line per source: its end offset
    for the batch, as JSON for Sluice's sources, whatever a Spark source writes otherwise
    (``-`` for none). Only a JSON object with ``"end": true`` and a ``source`` name counts.
    """
    ended = set()
    for line in (entry or b"").decode("utf-8", errors="replace").splitlines()[2:]:
        try:
            offset = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(offset, dict) and offset.get("end") is True and isinstance(offset.get("source"), str):
            ended.add(offset["source"])
    return ended


def _ingest_quantiles(hidden: pa.Table) -> list[float] | None:
    """LATENCY_QUANTILES of the ingest times (micros) in the hidden columns of a collected batch."""
    if INGEST not in hidden.column_names:
        return None
    micros = pc.drop_null(hidden[INGEST].cast(pa.timestamp("us", tz="UTC"))).cast(pa.int64()).to_numpy()
    if len(micros) == 0:
        return None
    return np.quantile(micros, LATENCY_QUANTILES, method="lower").tolist()


def _ingest_mean(hidden: pa.Table) -> float | None:
    """Mean ingest time (micros) of the rows of a collected batch."""
    if INGEST not in hidden.column_names or hidden.num_rows == 0:
        return None
    micros = pc.drop_null(hidden[INGEST].cast(pa.timestamp("us", tz="UTC"))).cast(pa.int64())
    mean = pc.mean(micros).as_py()
    return None if mean is None else float(mean)


def _as_version(plan: Plan, version: int) -> Plan:
    from dataclasses import replace

    return plan if plan.version == version else replace(plan, version=version)
