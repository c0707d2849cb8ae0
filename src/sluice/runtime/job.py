"""Running a pipeline: validate it, plan it, start the Structured Streaming query whose
``foreachBatch`` executes the plan, and stop when asked (or when finite input is done)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, wait
from dataclasses import dataclass, field, replace

from sluice.errors import ConfigError, PlanError, SluiceError, from_traceback
from sluice.plan.physical import Plan
from sluice.runtime import metrics as metrics_log
from sluice.runtime.checkpoint import Checkpoint
from sluice.runtime.compile import SourceInfo
from sluice.runtime.dead_letters import check_budget_value
from sluice.runtime.executor import MICROS, BatchExecutor
from sluice.runtime.interrupt import StopOnSigint
from sluice.runtime.lease import Lease
from sluice.runtime.metrics import BatchMetrics
from sluice.runtime.pipeline_record import open_checkpoint
from sluice.runtime.planlog import PlanLog
from sluice.runtime.session import session_settings


@dataclass
class JobResult:
    checkpoint: str
    batches: int  # batches this run executed (a restart counts only its own)
    rows_in: int
    elapsed_s: float
    metrics: list[BatchMetrics] = field(default_factory=list)  # every batch of the checkpoint
    control: dict | None = None  # the controller's final state (sluice.control.Controller.state)
    dead_letters: int = 0  # records this run sent to dead letters
    late_records: int = 0  # records this run found too late for every window

    @property
    def throughput(self) -> float:
        return self.rows_in / self.elapsed_s if self.elapsed_s > 0 else 0.0


def run_pipeline(
    pipeline,
    checkpoint: str | Checkpoint,
    *,
    master: str | None = None,
    spark=None,
    duration: float | None = None,
    trigger_interval: float = 0.0,
    max_rows_per_batch: int | None = None,
    plan: Plan | None = None,
    controller: Callable | None = None,
    on_batch: Callable[[BatchMetrics], None] | None = None,
    stop_when: Callable[[BatchExecutor], bool] | None = None,
    fuse: bool = True,
    collocate: bool = True,
    policies=None,
    on_control: Callable[[dict], None] | None = None,
    dead_letter_budget: float | None = None,
    reset_state: Iterable[str] = (),
    ship: str | None = None,
    ui: bool | None = None,
    executors: int | None = None,
    max_executors: int | None = None,
    standby: bool = False,
    on_standby: Callable[[str], None] | None = None,
    spark_conf: dict[str, str] | None = None,
) -> JobResult:
    """Run ``pipeline`` on Spark with its state and logs under ``checkpoint`` (a path or a
    URI such as ``file:///x``, ``s3://bucket/x``, ``hdfs://host/x``).

    Stops when every source is finite and exhausted, after ``duration`` seconds, when
    ``stop_when(executor)`` says so, or on Ctrl-C. Restarting with the same checkpoint
    resumes exactly where the last run committed. ``dead_letter_budget`` (default: the
    pipeline's) stops the job when an operator dead-letters that fraction of a batch
    (``runtime.dead_letters``). A changed pipeline is checked against the checkpoint
    first (``runtime.pipeline_record``); ``reset_state`` names stateful operators whose
    state to drop. ``collocate`` (a new checkpoint's first plan): consecutive keyed operators
    on the same key share one stage, with no exchange between them (``plan.collocation``);
    False gives each its own exchange.

    A pipeline with latency constraints (``Pipeline.constrain``), alternates, or given
    ``policies``, runs with a ``sluice.control.Controller`` between batches (unless
    ``controller`` is given): ``policies`` is a list of policies, a ``{"policies": [...]}``
    dict or a YAML file, watched while the job runs (default: adaptive batch sizing with
    constraints, else none); ``sluice control CHECKPOINT --policies FILE`` replaces them
    while it runs (``control.swap``). ``on_control`` receives the controller's state
    after each batch (each constraint's state, the last decision), before ``on_batch``.

    ``ship``: the pipeline's file (or directory); the modules beside it are sent to Spark's
    executors (``runtime.shipping``), as a cluster needs. ``ui``: serve the Spark UI (default
    on, ``SLUICE_SPARK_UI=0`` turns it off) when this call creates the session; its address
    is printed.

    On a standalone cluster (``master="spark://..."``) the job can hold a chosen number of
    executors: ``executors`` holds that many from the first batch (the run waits for them
    to register), and a controller's ``executors`` actions add and release them between
    batches, up to ``max_executors`` (default: what the application got when it started).
    On local Spark ``executors`` is an error and the controller rejects such actions.

    A run holds the checkpoint's lease (``runtime.lease``) while it runs: a second run on a
    checkpoint in use fails at once (LeaseHeldError), and a run that lost the lease stops
    before writing anything more (FencedError). ``standby``: a hot standby instead. It starts
    its session and Python workers, validates the pipeline and opens its sources, then waits
    for the lease (``on_standby`` gets a line saying whom it waits for) and takes over the
    moment the active driver stops or dies: its first batch replays what the active left
    unfinished.

    ``spark_conf``: Spark settings for the session this call creates (``sluice run --conf``,
    ``--packages``, ``--jars``); ignored when ``spark`` is given.
    """
    if duration is not None and duration <= 0:
        raise ConfigError(f"duration must be positive seconds, got {duration}")
    if trigger_interval < 0:
        raise ConfigError(f"trigger_interval must be >= 0 seconds, got {trigger_interval}")
    budget = check_budget_value(pipeline.dead_letter_budget if dead_letter_budget is None else dead_letter_budget)
    checkpoint = Checkpoint.of(checkpoint)
    lease = Lease(checkpoint)
    if not standby:
        # fail before the slow start when another driver runs this checkpoint; a driver that
        # just died may take a moment to be gone (its JVM), one on another host until its
        # lease expires (a lease renewed the instant before it died is free ttl + grace
        # later: a second more, so the wait cannot end just short of it)
        lease.acquire(wait=True, timeout_s=lease.ttl + lease.grace + 1.0)
        lease.start_heartbeat()
    try:
        with session_settings(spark):  # a user's own session: Sluice's SQL settings while it runs
            return _run(
                pipeline,
                checkpoint,
                lease,
                master=master,
                spark=spark,
                duration=duration,
                trigger_interval=trigger_interval,
                max_rows_per_batch=max_rows_per_batch,
                plan=plan,
                controller=controller,
                on_batch=on_batch,
                stop_when=stop_when,
                fuse=fuse,
                collocate=collocate,
                policies=policies,
                on_control=on_control,
                budget=budget,
                reset_state=reset_state,
                ship=ship,
                ui=ui,
                executors=executors,
                max_executors=max_executors,
                standby=standby,
                on_standby=on_standby,
                spark_conf=spark_conf,
            )
    finally:
        lease.release()


def _run(
    pipeline,
    checkpoint: Checkpoint,
    lease: Lease,
    *,
    master,
    spark,
    duration,
    trigger_interval,
    max_rows_per_batch,
    plan,
    controller,
    on_batch,
    stop_when,
    fuse,
    collocate,
    policies,
    on_control,
    budget,
    reset_state,
    ship,
    ui,
    executors,
    max_executors,
    standby: bool,
    on_standby,
    spark_conf=None,
) -> JobResult:
    """``run_pipeline`` once its arguments are checked and (unless a standby) it holds the lease."""
    from sluice.runtime.schemas import SparkTyper
    from sluice.runtime.session import announce_ui, jvm_pid, spark_session
    from sluice.runtime.sources import is_exhausted, read_backlog
    from sluice.runtime.warmup import in_background, start_python_workers

    warmup = None
    if spark is None:
        spark = spark_session(master, ui=ui, conf=spark_conf)
        announce_ui(spark)
        # a fresh session has no Python workers yet: start them while the driver validates
        # and opens the sources, not in the first batch (``runtime.warmup``)
        warmup = start_python_workers(spark)
    lease.add_pids([jvm_pid(spark)])  # a standby knows the driver is gone when its JVM is too
    goals = pipeline.graph.goals
    if max_executors is None and goals is not None and _standalone(spark):
        max_executors = goals.max_executors  # the goals' budget bounds the executors the job may hold
    pool = _executor_pool(spark, executors, max_executors)
    if ship is not None:  # every task from now on finds the pipeline's modules
        from sluice.runtime.shipping import ship_code

        ship_code(spark, ship)
    graph = pipeline.graph
    # Spark's analyzer types the graph's SQL while Spark opens the sources: both mostly wait
    # (on Py4J, on Python planning processes), so they overlap well
    validation = in_background(lambda: graph.validate(typer=SparkTyper(spark)), "sluice-validate")
    infos = _source_infos(graph, spark, checkpoint)
    rehearsal = None
    schema = _known_schema(graph, infos)
    if warmup is not None and not standby and schema is not None and rehearses("start"):
        # a fresh driver's first batch pays for Spark's first code generation and class
        # loading: rehearse it on a scratch checkpoint while the sources are opened
        # (``runtime.rehearsal``; best effort; off by default, see ``rehearses``)
        rehearsal = _rehearsal(spark, pipeline, schema, infos, fuse, collocate, after=[validation])
    try:
        frames = _open_sources(spark, graph, checkpoint, infos)
    finally:
        validation.result()  # a pipeline that does not validate fails with its own error first
    stream = frames[0]
    for frame in frames[1:]:
        stream = stream.unionByName(frame, allowMissingColumns=True)
    if standby:  # ready: from here on this driver writes to the checkpoint
        _stand_by(spark, pipeline, stream.schema, infos, warmup, lease, fuse, collocate, on_standby)
    restore_admission = _admit(graph, checkpoint, max_rows_per_batch)

    plan_log = PlanLog(checkpoint)
    # the graph under the ids the checkpoint keeps state by; stops here if its state does not fit
    graph = open_checkpoint(
        pipeline.graph, checkpoint, plan_log, pipeline.partitions, reset_state=reset_state, fuse=fuse, collocate=collocate
    )
    if plan is not None:
        _check_plan(plan, graph)
        # a given plan applies from the next batch on; batches already run keep theirs
        recorded = checkpoint.started_batches()
        next_batch = recorded[-1] + 1 if recorded and plan_log.latest() is not None else 0
        plan_log.write(replace(plan, version=next_batch))

    controls = checkpoint.sources

    def backlog() -> dict:
        out = {}
        for info in infos:  # None: unbounded (a rate-less generator); a Spark source has no report
            status = read_backlog(controls, info.op.id)
            if status is not None:
                out[info.op.id] = status.get("backlog")
        return out

    control = None
    if controller is None and (graph.constraints or graph.goals is not None or policies is not None or _has_alternates(graph)):
        control = _controller(graph, checkpoint, controls, policies, spark, pool)
        controller = _reporting(control, on_control)
    executor = BatchExecutor(
        spark,
        graph,
        checkpoint,
        plan_log,
        infos,
        pipeline.dead_letter_sink,
        controller=controller,
        on_batch=on_batch,
        backlog=backlog,
        dead_letter_budget=budget,
        late_data_sink=getattr(pipeline, "late_data_sink", None),
        fence=lease.check,
        after_first_commit=restore_admission,
    )
    executor.recover_ticks()  # what the last batch done left due runs without waiting for data
    writer = stream.writeStream.foreachBatch(executor).option("checkpointLocation", checkpoint.spark)
    writer = writer.trigger(processingTime=f"{trigger_interval} seconds")
    if warmup is not None:
        # done before the query starts: Spark gives the Python process that plans a Python
        # source 10 s to connect back, and on a loaded machine competing imports can take that
        wait([warmup], timeout=60)
    if rehearsal is not None:
        wait([rehearsal], timeout=120)  # its result does not matter, only that Spark is warm
    started = time.time()
    query = writer.queryName(f"sluice_{graph.name}_{int(started * 1000)}").start()
    finite = all(getattr(op.params["spec"], "finite", False) for op in graph.sources())
    sigint = StopOnSigint()  # Ctrl-C: finish the running batch, then stop quietly
    try:
        while query.isActive:
            if query.exception() is not None or sigint.requested.is_set():
                break
            # the caller's limits first: once a finite source is exhausted, the drain below
            # runs every remaining batch and nothing is checked until it ends
            if duration is not None and time.time() - started >= duration:
                break
            if stop_when is not None and stop_when(executor):
                break
            if finite and all(is_exhausted(controls, info.op.id) for info in infos):
                query.processAllAvailable()
                break
            time.sleep(0.1)
    except KeyboardInterrupt:
        pass
    finally:
        _stop_between_batches(query, executor)
        sigint.restore()
        error = query.exception() if executor.refused is None else None  # a refusal is the clean stop
        executor.close()
    if error is not None:
        raise _unwrap(error, executor.failure)
    elapsed = time.time() - started
    all_metrics = metrics_log.read(checkpoint)
    mine = [m for m in all_metrics if m.started_at >= started]
    return JobResult(
        checkpoint.uri,
        executor.batches_done,
        sum(m.rows_in for m in mine),
        elapsed,
        all_metrics,
        None if control is None else control.state(),
        dead_letters=sum(m.dead_letters for m in mine),
        late_records=sum(m.late_records for m in mine),
    )


def _standalone(spark) -> bool:
    from sluice.runtime.executor_pool import is_standalone

    return is_standalone(spark.sparkContext.master)


def _executor_pool(spark, executors: int | None, max_executors: int | None):
    """The pool of a standalone application's executors (None on local Spark), holding
    ``executors`` of them before the first batch when asked to."""
    from sluice.runtime.executor_pool import ExecutorPool, is_standalone

    if not is_standalone(spark.sparkContext.master):
        if executors is not None or max_executors is not None:
            from sluice.control.executors import LOCAL_SPARK

            raise ConfigError(f"executors={executors}, max_executors={max_executors}: {LOCAL_SPARK}")
        return None
    pool = ExecutorPool(spark, max_executors)
    if executors is not None:
        pool.set_total(executors, wait_s=180)
    return pool


def _controller(graph, checkpoint: Checkpoint, controls: str, policies, spark, pool=None):
    """The control loop of a job with constraints, policies or alternates: its policies, the
    sources' admission files and (on a standalone cluster) the executor pool as actuators,
    the checkpoint's earlier batches to warm the policies' models up, and where new
    policies come from while it runs."""
    from sluice.control import Controller, Resources, build_policies
    from sluice.control.actuators import SourceAdmission
    from sluice.control.executors import FixedExecutors
    from sluice.control.swap import PolicySwaps
    from sluice.graph.sources import SparkSource
    from sluice.runtime.executor_pool import SparkExecutors

    admitting = [op.id for op in graph.sources() if not isinstance(op.params["spec"], SparkSource)]
    executors = FixedExecutors(Resources(cores=spark.sparkContext.defaultParallelism)) if pool is None else SparkExecutors(pool)
    # a job given a policies file watches it; any job picks up `sluice control` requests
    swaps = PolicySwaps(checkpoint, watch=policies if isinstance(policies, str) else None)
    if policies is None and not graph.constraints and graph.goals is None:
        policies = []  # alternates only: no policy until one is put in force
    # no policies named: the autopilot for a job with goals, batch sizing for constraints
    return Controller(
        graph,
        build_policies(policies, graph),
        checkpoint=checkpoint,
        admission=SourceAdmission(controls, admitting),
        executors=executors,
        history=[m for m in metrics_log.read_recent(checkpoint) if not m.skipped],
        swaps=swaps,
    )


def _has_alternates(graph) -> bool:
    from sluice.graph.alternates import alternates_of

    return any(alternates_of(op) for op in graph.operators)


def _reporting(control, on_control):
    """The executor's controller callback: the control loop, then its state to ``on_control``."""

    def step(metrics, plan):
        new_plan = control(metrics, plan)
        if on_control is not None:
            on_control(control.state())
        return new_plan

    return step


def _stand_by(
    spark,
    pipeline,
    schema,
    infos: list[SourceInfo],
    warmup,
    lease: Lease,
    fuse: bool,
    collocate: bool,
    on_standby: Callable[[str], None] | None,
) -> None:
    """A hot standby's wait: once its Python workers have started, rehearse a batch (it has
    the time: its first batch after a takeover then runs warm), then wait for the lease and
    keep it from then on. ``on_standby`` hears each step."""
    say = on_standby or (lambda line: None)
    if rehearses("standby"):
        try:
            seconds = _rehearsal(
                spark, pipeline, schema, infos, fuse, collocate, after=[] if warmup is None else [warmup]
            ).result()
            say(f"standby: rehearsed a batch in {seconds:.1f} s")
        except Exception as exc:  # the rehearsal changes no result: say so and go on
            first_line = next(iter(str(exc).splitlines()), "")[:200]
            say(
                f"standby: the batch rehearsal failed ({type(exc).__name__}: {first_line}); "
                f"the first batch after a takeover will be slower"
            )
    lease.acquire(
        wait=True,
        on_wait=lambda held: say(
            f"standby: ready, waiting for the driver holding {lease.checkpoint} (processes {list(held.pids)} on "
            f"{held.host}, lease epoch {held.epoch})"
        ),
    )
    lease.start_heartbeat()
    say(f"standby: took over {lease.checkpoint} (lease epoch {lease.epoch})")


def rehearses(driver: str) -> bool:
    """Whether a ``driver`` ("standby" or a fresh "start") rehearses a batch before its first
    (``runtime.rehearsal``). ``SLUICE_REHEARSAL``: ``standby`` (the default) only a standby,
    which has the time; ``1`` a fresh start too; ``0`` neither.

    A start does not by default: on this 2-core machine under load the rehearsal competed
    with opening the source and cost about 9 CPU seconds more to the first commit than it
    saved in the first batch (docs/results/startup.md, session 7)."""
    mode = os.environ.get("SLUICE_REHEARSAL", "standby").strip().lower()
    if mode in ("0", "false", "no", "off"):
        return False
    return driver == "standby" or mode in ("1", "true", "yes", "on")


def _rehearsal(spark, pipeline, schema, infos: list[SourceInfo], fuse: bool, collocate: bool, after: list[Future]) -> Future:
    """Rehearse a batch of ``pipeline`` on a scratch checkpoint (``runtime.rehearsal``) in the
    background, once the work ``after`` is done (the validation, the workers' warm-up). Its
    Future gives the seconds it took, or what it raised."""
    from sluice.runtime.rehearsal import rehearse_batch
    from sluice.runtime.warmup import in_background

    def run() -> float:
        wait(after, timeout=120)
        return rehearse_batch(spark, pipeline.graph, pipeline.partitions, schema, infos, fuse=fuse, collocate=collocate)

    return in_background(run, "sluice-rehearsal")


def _known_schema(graph, infos: list[SourceInfo]):
    """The Spark schema of the job's stream before its source is opened, when it can be
    known: one source of Sluice's own (a Spark source's columns come from Spark)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from sluice.graph.sources import SparkSource
    from sluice.runtime.sources.datasource import stream_schema

    sources = graph.sources()
    if len(sources) != 1 or isinstance(sources[0].params["spec"], SparkSource):
        return None
    try:
        return from_arrow_schema(stream_schema(sources[0].params["spec"], infos[0].splits_reader is not None))
    except Exception:  # a spec that cannot say its schema: opening the source reports it
        return None


def _admit(graph, checkpoint: Checkpoint, max_rows_per_batch: int | None) -> Callable[[], None] | None:
    """Set each source's admission limit in its control file (a write: only the lease's holder
    does it, a standby once it took over).

    A restart's first batch admits no more rows of a source than the last committed batch
    did: the backlog since the crash would otherwise make it a batch of the whole limit,
    run by a JVM that has not yet compiled any of the batch's code (``docs/results/startup.md``).
    Returns what sets the limits back once that batch is committed (None on a fresh start)."""
    from sluice.runtime.sources import set_max_rows
    from sluice.runtime.sources.admission import DEFAULT_MAX_ROWS_PER_BATCH

    limits = {op.id: max_rows_per_batch or getattr(op.params["spec"], "max_rows_per_batch", None) for op in graph.sources()}
    last = _last_committed_rows(checkpoint)
    first = {op_id: min(limit or DEFAULT_MAX_ROWS_PER_BATCH, last[op_id]) for op_id, limit in limits.items() if last.get(op_id)}
    for op_id, limit in limits.items():  # also clears what a run that crashed left there
        set_max_rows(checkpoint.sources, op_id, first.get(op_id, limit))
    if not first:
        return None

    def restore() -> None:
        for op_id in first:  # no limit configured: back to the default
            set_max_rows(checkpoint.sources, op_id, limits[op_id])

    return restore


def _last_committed_rows(checkpoint: Checkpoint) -> dict[str, int]:
    """Rows per source of the last batch committed on ``checkpoint`` ({} when none, or when
    its record predates the count)."""
    done = checkpoint.done_batches()
    if not done:
        return {}
    record = checkpoint.read_json(Checkpoint.batch_record(done[-1], "done")) or {}
    return {op_id: int(n) for op_id, n in (record.get("rows_by_source") or {}).items()}


def _source_infos(graph, spark, checkpoint: Checkpoint) -> list[SourceInfo]:
    """What the executor must know about each source."""
    from sluice.graph.sources import SparkSource

    infos = []
    for i, op in enumerate(graph.sources()):
        spec = op.params["spec"]
        delay = getattr(spec, "watermark_delay", 0) or 0
        info = SourceInfo(
            op,
            i,
            getattr(spec, "event_time", None),
            int(delay * MICROS),
            idle_timeout_us=op.params.get("idle_timeout_us"),
            ticks=not isinstance(spec, SparkSource),
        )
        if _opens_by_splits(graph, op):
            info.splits_reader = _stream_reader(spark, spec, op.id, checkpoint)
        elif _reads_natively(graph, op):
            from sluice.runtime.sources.native_files import BatchFiles

            info.splits_reader = _stream_reader(spark, spec, op.id, checkpoint)
            info.native_files = BatchFiles(info.splits_reader, lambda b: checkpoint.read_bytes(Checkpoint.spark_offsets(b)))
        infos.append(info)
    return infos


def _opens_by_splits(graph, source) -> bool:
    """Whether a source is opened by splits, its records read by the Python chain after it
    (``sources.splits``): the job's one source, of a kind whose reader allows it, feeding
    only a Python operator. Decided once per run, from the graph alone: the plans of the run
    may change its chains, never what the stream's rows are."""
    from sluice.runtime.sources.datasource import reads_by_splits

    consumers = graph.consumers(source.id)
    return len(graph.sources()) == 1 and len(consumers) == 1 and consumers[0].is_python and reads_by_splits(source.params["spec"])


def _reads_natively(graph, source) -> bool:
    """Whether a source is opened by splits whose files Spark's own reader reads
    (``sources.native_files``): the job's one source, a Parquet directory, whose consumers all
    run in Spark (a Python operator first gets the records from the Python reader, which it
    would otherwise have to take back out of the JVM)."""
    from sluice.runtime.sources.native_files import reads_natively

    consumers = graph.consumers(source.id)
    return (
        len(graph.sources()) == 1
        and bool(consumers)
        and not any(c.is_python for c in consumers)
        and reads_natively(source.params["spec"])
    )


def _stream_reader(spark, spec, name: str, checkpoint: Checkpoint):
    from sluice.runtime import files
    from sluice.runtime.sources.datasource import stream_reader

    return stream_reader(
        spec, name, files.normalize(checkpoint.sources), spark.sparkContext.defaultParallelism, checkpoint.location()
    )


def _open_sources(spark, graph, checkpoint: Checkpoint, infos: list[SourceInfo]) -> list:
    """A streaming DataFrame per source (reads only: a standby opens them while another
    driver runs)."""
    from pyspark.sql import functions as F

    from sluice.runtime.schemas import SOURCE_ID
    from sluice.runtime.sources import open_stream

    controls = checkpoint.sources
    frames = []
    for i, op in enumerate(graph.sources()):
        spec = op.params["spec"]
        frame = open_stream(
            spark, spec, controls, op.id, dead_letters=checkpoint.location(), splits=infos[i].splits_reader is not None
        )
        if len(graph.sources()) > 1:
            frame = frame.withColumn(SOURCE_ID, F.lit(i))
        frames.append(frame)
    return frames


def _check_plan(plan: Plan, graph) -> None:
    keyed = {op.id for op in graph.operators if op.is_keyed}
    if set(plan.keyed) != keyed:
        raise PlanError(f"the plan routes keyed operators {sorted(plan.keyed)}, the pipeline has {sorted(keyed)}")
    if plan.max_parallelism != graph.max_parallelism:
        raise PlanError(f"the plan has max parallelism {plan.max_parallelism}, the pipeline {graph.max_parallelism}")


def _stop_between_batches(query, executor: BatchExecutor, patience_s: float = 120.0) -> None:
    """Stop the query when no batch is running, so a clean stop never aborts a batch
    half-way (a crash may, and the restart makes that good).

    The executor first refuses any batch Spark starts from now on: between the check that
    no batch runs and ``query.stop()``, Spark may start the next one (some 30 ms after a
    commit), and the stop would cut it short, leaving a sink's output of it half written."""
    executor.stop_after_this_batch()
    deadline = time.time() + patience_s
    while executor.in_batch and query.isActive and time.time() < deadline:
        time.sleep(0.05)
    query.stop()
    if executor.refused is not None:  # Spark logged the refusal as the query's error: it is not one
        print(f"sluice: stopped before batch {executor.refused} (it runs when the job restarts)", flush=True)


def _unwrap(error, failure: BaseException | None = None) -> Exception:
    """The error the query failed with, as the SluiceError it was raised as.

    ``failure`` is what ``foreachBatch`` raised on the driver, if it raised: a SluiceError
    raised there is returned itself. One raised in a Spark task reaches the driver as text
    inside Spark's exception and is rebuilt with its class (``errors.from_traceback``)."""
    if isinstance(failure, SluiceError):
        return failure
    text = str(error)
    rebuilt = from_traceback(f"{failure or ''}\n{text}")
    if rebuilt is not None:
        return rebuilt
    return SluiceError(f"the streaming query failed: {text.splitlines()[0] if text else error!r}\n{text[:4000]}")
