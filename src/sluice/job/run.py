"""Running a pipeline: validate it, plan it, start the Structured Streaming query whose
``foreachBatch`` executes the plan, and stop when asked (or when finite input is done).

The composition root: the Spark session, the sources (``job.sources``), the checkpoint's
lease, the control loop (``sluice.control``) and the batch executor (``runtime.batch.executor``)
meet here and nowhere else; the executor hears the job through one ``job.listener``."""

from __future__ import annotations

import contextlib
import os
import time
from concurrent.futures import Future, wait
from dataclasses import replace

from sluice.control import Controller, Resources, build_policies
from sluice.control.actuators import SourceAdmission
from sluice.control.executors import LOCAL_SPARK, FixedExecutors
from sluice.control.swap import PolicySwaps
from sluice.errors import CheckpointError, ConfigError, PlanError, SluiceError, from_traceback
from sluice.graph.alternates import alternates_of
from sluice.graph.sources import SparkSource
from sluice.job import sources as job_sources
from sluice.job.listener import JobListener
from sluice.job.options import RunOptions
from sluice.job.result import JobResult
from sluice.plan.physical import Plan
from sluice.runtime import rehearsal, session, shipping
from sluice.runtime.batch import metrics as metrics_log
from sluice.runtime.batch.compile import SourceInfo
from sluice.runtime.batch.executor import BatchExecutor
from sluice.runtime.checkpoint import Checkpoint
from sluice.runtime.dead_letters import check_budget_value
from sluice.runtime.executor_pool import ExecutorPool, SparkExecutors, is_standalone
from sluice.runtime.interrupt import StopOnSigint
from sluice.runtime.lease import FencedError, Lease
from sluice.runtime.pipeline_record import open_checkpoint
from sluice.runtime.planlog import PlanLog
from sluice.runtime.schemas import SparkTyper
from sluice.runtime.sources import is_exhausted
from sluice.runtime.state.initial import seed_initial_state
from sluice.runtime.warmup import in_background, start_python_workers


def run_pipeline(pipeline, checkpoint: str | Checkpoint, options: RunOptions | None = None) -> JobResult:
    """Run ``pipeline`` on Spark with its state and logs under ``checkpoint`` (a path or a
    URI such as ``file:///x``, ``s3://bucket/x``, ``hdfs://host/x``), as ``options`` say
    (``job.options.RunOptions``; default: its defaults).

    Stops when every source is finite and exhausted, after ``duration`` seconds, when
    ``stop_when(executor)`` says so, or on Ctrl-C. Restarting with the same checkpoint
    resumes exactly where the last run committed. ``dead_letter_budget`` (default: the
    pipeline's) stops the job when an operator dead-letters that fraction of a batch
    (``runtime.dead_letters``). A changed pipeline is checked against the checkpoint
    first (``runtime.pipeline_record``); ``reset_state`` names stateful operators whose
    state to drop. ``collocate`` (a new checkpoint's first plan): consecutive keyed operators
    on the same key share one stage, with no exchange between them (``plan.collocation``);
    False gives each its own exchange.

    A pipeline with latency constraints (``Pipeline.constrain``), goals, alternates, or given
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
    options = options or RunOptions()
    budget = pipeline.dead_letter_budget if options.dead_letter_budget is None else options.dead_letter_budget
    options = replace(options, dead_letter_budget=check_budget_value(budget))
    checkpoint = Checkpoint.of(checkpoint)
    lease = Lease(checkpoint)
    if not options.standby:
        # fail before the slow start when another driver runs this checkpoint; a driver that
        # just died may take a moment to be gone (its JVM), one on another host until its
        # lease expires (a lease renewed the instant before it died is free ttl + grace
        # later: a second more, so the wait cannot end just short of it)
        lease.acquire(wait=True, timeout_s=lease.ttl + lease.grace + 1.0)
        lease.start_heartbeat()
    try:
        with session.session_settings(options.spark):  # a user's own session: Sluice's SQL settings while it runs
            return _run(pipeline, checkpoint, lease, options)
    finally:
        _remove_spark_temporaries(checkpoint, lease)
        lease.release()


def _remove_spark_temporaries(checkpoint: Checkpoint, lease: Lease) -> None:
    """Once the query has stopped, remove what Spark left of a log entry it could not write
    (a full disk), while this driver still holds the lease: no other query writes them."""
    try:
        lease.check()
    except (FencedError, OSError, CheckpointError):
        return
    with contextlib.suppress(OSError):
        checkpoint.remove_spark_temporaries()


def _run(pipeline, checkpoint: Checkpoint, lease: Lease, options: RunOptions) -> JobResult:
    """``run_pipeline`` once its options are checked and (unless a standby) it holds the lease."""
    spark, warmup = options.spark, None
    if spark is None:
        spark = session.spark_session(
            options.master, ui=options.ui, conf=None if options.spark_conf is None else dict(options.spark_conf)
        )
        session.announce_ui(spark)
        # a fresh session has no Python workers yet: start them while the driver validates
        # and opens the sources, not in the first batch (``runtime.warmup``)
        warmup = start_python_workers(spark)
    lease.add_pids([session.jvm_pid(spark)])  # a standby knows the driver is gone when its JVM is too
    graph = pipeline.graph
    max_executors = options.max_executors
    if max_executors is None and graph.goals is not None and is_standalone(spark.sparkContext.master):
        max_executors = graph.goals.max_executors  # the goals' budget bounds the executors the job may hold
    pool = _executor_pool(spark, options.executors, max_executors)
    if options.ship is not None:  # every task from now on finds the pipeline's modules
        shipping.ship_code(spark, options.ship)
    # Spark's analyzer types the graph's SQL while Spark opens the sources: both mostly wait
    # (on Py4J, on Python planning processes), so they overlap well
    validation = in_background(lambda: graph.validate(typer=SparkTyper(spark)), "sluice-validate")
    infos = job_sources.source_infos(graph, spark, checkpoint)
    rehearsed = None
    schema = job_sources.known_schema(graph, infos)
    if warmup is not None and not options.standby and schema is not None and rehearses("start"):
        # a fresh driver's first batch pays for Spark's first code generation and class
        # loading: rehearse it on a scratch checkpoint while the sources are opened
        # (``runtime.rehearsal``; best effort; off by default, see ``rehearses``)
        rehearsed = _rehearsal(spark, pipeline, schema, infos, options, after=[validation])
    try:
        frames = job_sources.open_sources(spark, graph, checkpoint, infos)
    finally:
        validation.result()  # a pipeline that does not validate fails with its own error first
    stream = frames[0]
    for frame in frames[1:]:
        stream = stream.unionByName(frame, allowMissingColumns=True)
    if options.standby:  # ready: from here on this driver writes to the checkpoint
        _stand_by(spark, pipeline, stream.schema, infos, warmup, lease, options)
    restore_admission = job_sources.admit(graph, checkpoint, options.max_rows_per_batch)

    plan_log = PlanLog(checkpoint)
    # the graph under the ids the checkpoint keeps state by; stops here if its state does not fit
    graph = open_checkpoint(
        pipeline.graph,
        checkpoint,
        plan_log,
        pipeline.partitions,
        reset_state=options.reset_state,
        fuse=options.fuse,
        collocate=options.collocate,
    )
    seed_initial_state(spark, graph, checkpoint)  # before the first batch, once per operator (runtime.state.initial)
    if options.plan is not None:
        _check_plan(options.plan, graph)
        # a given plan applies from the next batch on; batches already run keep theirs
        recorded = checkpoint.started_batches()
        next_batch = recorded[-1] + 1 if recorded and plan_log.latest() is not None else 0
        plan_log.write(replace(options.plan, version=next_batch))

    control = None
    if options.controller is None and (
        graph.constraints or graph.goals is not None or options.policies is not None or _has_alternates(graph)
    ):
        control = _controller(graph, checkpoint, options.policies, spark, pool)
    listener = JobListener(lease, infos, checkpoint.sources, options, control, restore_admission)
    assert options.dead_letter_budget is not None  # checked by run_pipeline
    executor = BatchExecutor(
        spark,
        graph,
        checkpoint,
        plan_log,
        infos,
        pipeline.dead_letter_sink,
        dead_letter_budget=options.dead_letter_budget,
        late_data_sink=getattr(pipeline, "late_data_sink", None),
        listener=listener,
    )
    executor.recover_ticks()  # what the last batch done left due runs without waiting for data
    writer = stream.writeStream.foreachBatch(executor).option("checkpointLocation", checkpoint.spark)
    writer = writer.trigger(processingTime=f"{options.trigger_interval} seconds")
    if warmup is not None:
        # done before the query starts: Spark gives the Python process that plans a Python
        # source 10 s to connect back, and on a loaded machine competing imports can take that
        wait([warmup], timeout=60)
    if rehearsed is not None:
        wait([rehearsed], timeout=120)  # its result does not matter, only that Spark is warm
    started = time.time()
    query = writer.queryName(f"sluice_{graph.name}_{int(started * 1000)}").start()
    _until_done(query, executor, graph, infos, checkpoint, options, started)
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


def _until_done(
    query, executor: BatchExecutor, graph, infos: list[SourceInfo], checkpoint: Checkpoint, options: RunOptions, started: float
) -> None:
    """Let the query run until it fails, Ctrl-C, the options' limits, or the end of finite
    input; then stop it between batches (raises what it failed with)."""
    finite = all(getattr(op.connector, "finite", False) for op in graph.sources())
    sigint = StopOnSigint()  # Ctrl-C: finish the running batch, then stop quietly
    try:
        while query.isActive:
            if query.exception() is not None or sigint.requested.is_set():
                break
            # the caller's limits first: once a finite source is exhausted, the drain below
            # runs every remaining batch and nothing is checked until it ends
            if options.duration is not None and time.time() - started >= options.duration:
                break
            if options.stop_when is not None and options.stop_when(executor):
                break
            if finite and all(is_exhausted(checkpoint.sources, info.op.id) for info in infos):
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
        raise _unwrap(error, executor.failure, checkpoint.spark)


def _executor_pool(spark, executors: int | None, max_executors: int | None) -> ExecutorPool | None:
    """The pool of a standalone application's executors (None on local Spark), holding
    ``executors`` of them before the first batch when asked to."""
    if not is_standalone(spark.sparkContext.master):
        if executors is not None or max_executors is not None:
            raise ConfigError(f"executors={executors}, max_executors={max_executors}: {LOCAL_SPARK}")
        return None
    pool = ExecutorPool(spark, max_executors)
    if executors is not None:
        pool.set_total(executors, wait_s=180)
    return pool


def _controller(graph, checkpoint: Checkpoint, policies, spark, pool: ExecutorPool | None = None) -> Controller:
    """The control loop of a job with constraints, policies or alternates: its policies, the
    sources' admission files and (on a standalone cluster) the executor pool as actuators,
    the checkpoint's earlier batches to warm the policies' models up, and where new
    policies come from while it runs."""
    admitting = [op.id for op in graph.sources() if not isinstance(op.connector, SparkSource)]
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
        admission=SourceAdmission(checkpoint.sources, admitting),
        executors=executors,
        history=[m for m in metrics_log.read_recent(checkpoint) if not m.skipped],
        swaps=swaps,
    )


def _has_alternates(graph) -> bool:
    return any(alternates_of(op) for op in graph.operators)


def _stand_by(spark, pipeline, schema, infos: list[SourceInfo], warmup, lease: Lease, options: RunOptions) -> None:
    """A hot standby's wait: once its Python workers have started, rehearse a batch (it has
    the time: its first batch after a takeover then runs warm), then wait for the lease and
    keep it from then on. ``options.on_standby`` hears each step."""
    say = options.on_standby or (lambda line: None)
    if rehearses("standby"):
        try:
            seconds = _rehearsal(spark, pipeline, schema, infos, options, after=[] if warmup is None else [warmup]).result()
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

    A start does not by default: on a loaded 2-core machine the rehearsal competed with
    opening the source and cost more CPU time before the first commit than it saved in the
    first batch (docs/results/startup.md)."""
    mode = os.environ.get("SLUICE_REHEARSAL", "standby").strip().lower()
    if mode in ("0", "false", "no", "off"):
        return False
    return driver == "standby" or mode in ("1", "true", "yes", "on")


def _rehearsal(spark, pipeline, schema, infos: list[SourceInfo], options: RunOptions, after: list[Future]) -> Future:
    """Rehearse a batch of ``pipeline`` on a scratch checkpoint (``runtime.rehearsal``) in the
    background, once the work ``after`` is done (the validation, the workers' warm-up). Its
    Future gives the seconds it took, or what it raised."""

    def run() -> float:
        wait(after, timeout=120)
        return rehearsal.rehearse_batch(
            spark, pipeline.graph, pipeline.partitions, schema, infos, fuse=options.fuse, collocate=options.collocate
        )

    return in_background(run, "sluice-rehearsal")


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


def _unwrap(error, failure: BaseException | None = None, spark_checkpoint: str | None = None) -> Exception:
    """The error the query failed with, as the SluiceError it was raised as.

    ``failure`` is what ``foreachBatch`` raised on the driver, if it raised: a SluiceError
    raised there is returned itself. One raised in a Spark task reaches the driver as text
    inside Spark's exception and is rebuilt with its class (``errors.from_traceback``).
    Without a ``failure`` the query failed in its own work: a write the disk refused then
    went to ``spark_checkpoint`` (its offset and commit logs), which Spark's text does not name."""
    if isinstance(failure, SluiceError):
        return failure
    text = str(error)
    rebuilt = from_traceback(f"{failure or ''}\n{text}", None if failure is not None else spark_checkpoint)
    if rebuilt is not None:
        return rebuilt
    return SluiceError(f"the streaming query failed: {text.splitlines()[0] if text else error!r}\n{text[:4000]}")
