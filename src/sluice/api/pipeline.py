"""A :class:`Pipeline` is the dataflow a user builds, and the handle to run it."""

from __future__ import annotations

from typing import Any

from sluice.api.stream import Stream, user_location
from sluice.core.decisions import DecisionLog
from sluice.errors import PipelineError
from sluice.graph import JobGraph, Operator
from sluice.graph.constraints import make_constraint
from sluice.graph.economics import Economics
from sluice.graph.sinks import SinkSpec
from sluice.graph.specs import SourceOp
from sluice.graph.windows import parse_duration
from sluice.job import JobResult, RunOptions
from sluice.plan.mode import choose_mode


class Pipeline:
    """A streaming dataflow: sources, operators and sinks.

    >>> p = Pipeline("meters")
    >>> readings = p.source(sources.generator(...))
    >>> readings.filter("kwh > 0").key_by("meter").aggregate(n=agg.count()).sink(sinks.console())
    """

    def __init__(self, name: str = "pipeline", *, max_parallelism: int = 128, partitions: int = 2):
        if not 1 <= partitions <= max_parallelism:
            raise PipelineError(f"partitions must be between 1 and max_parallelism ({max_parallelism}), got {partitions}")
        self.graph = JobGraph(name, max_parallelism=max_parallelism)
        self.partitions = partitions  # partitions of keyed stages at start
        self.dead_letter_sink: SinkSpec | None = None
        self.dead_letter_budget = 1.0  # stop when an operator dead-letters all of a batch (runtime.dead_letters)
        self.late_data_sink: SinkSpec | None = None

    @property
    def name(self) -> str:
        return self.graph.name

    def source(self, spec: Any, *, name: str | None = None, idle_timeout=None) -> Stream:
        """Add a source (see :mod:`sluice.sources`) and return its stream.

        ``idle_timeout`` (seconds or a string like ``"30s"``): once the source has sent no
        record for this long, it stops holding the event-time watermark back, so windows fed
        by other sources (or by what it sent before) close (``docs/event-time.md``).

        >>> import sluice
        >>> from sluice import sources as S
        >>> p = sluice.Pipeline("example")
        >>> readings = p.source(S.generator(fields={"meter": S.Keys(10), "kwh": S.Normal(0.4, 0.1), "ts": S.EventTime()}))
        >>> readings.schema.names
        ['meter', 'kwh', 'ts']
        """
        if not hasattr(spec, "schema"):
            raise PipelineError(f"source needs a source spec (sluice.sources.*), got {spec!r}", name or "source", user_location())
        op_id = name or self.graph.new_id("source")
        idle_timeout_us = None if idle_timeout is None else parse_duration(idle_timeout, f"source {op_id!r}: idle_timeout")
        source = SourceOp(connector=spec, idle_timeout_us=idle_timeout_us)
        op = self.graph.add(
            Operator(id=op_id, kind=source.kind, name=op_id, spec=source, schema=spec.schema(), location=user_location())
        )
        return Stream(self, op)

    def dead_letter(self, spec: SinkSpec | None = None, *, budget: float | None = None) -> Pipeline:
        """Where records whose operator raised, or that a source could not parse, go (always
        JSON files in the checkpoint's ``dead_letter/``; ``spec``: a sink that gets them too),
        and the budget: the job stops when an operator sends at least this fraction of the
        records it receives in a batch (of 100 or more) to dead letters (default 1.0, all).

        >>> import sluice
        >>> p = sluice.Pipeline("example").dead_letter(sluice.sinks.files("out/dead"), budget=0.01)
        >>> p.dead_letter_budget
        0.01
        """
        from sluice.runtime.dead_letters import check_budget_value

        if spec is not None and not isinstance(spec, SinkSpec):
            raise PipelineError(f"dead_letter needs a sink spec, got {spec!r}")
        if spec is not None:
            self.dead_letter_sink = spec
        if budget is not None:
            self.dead_letter_budget = check_budget_value(budget)
        return self

    def constrain(self, latency, *, path: tuple | None = None, over="30s", p95=None, name: str | None = None) -> Pipeline:
        """Bound the latency of a path (Nephele's constraint (S, l, t)): the mean latency of
        the records that travel ``path`` over any ``over`` seconds stays at most ``latency``
        (and their 95th percentile at most ``p95`` if given). The controller adapts the job
        while it runs to keep it, at the highest throughput the bound allows.

        ``path``: (from_stream, to_stream), streams or operator ids; None means from every
        source to every sink. Durations: ``"800ms"``, ``"1.5s"``, ``"30s"`` or seconds.
        Several constraints may be set; the path is checked when the graph is validated.

        >>> import sluice
        >>> from sluice import sources as S
        >>> p = sluice.Pipeline("example")
        >>> readings = p.source(S.generator(fields={"meter": S.Keys(10), "kwh": S.Normal(0.4, 0.1), "ts": S.EventTime()}))
        >>> out = readings.key_by("meter").aggregate(n=sluice.agg.count()).sink(sluice.sinks.memory("n"))
        >>> p.constrain("2s", over="30s").graph.constraints[0].bound_s
        2.0
        """
        ends: tuple[str, str] | None = None
        if path is not None:
            if not isinstance(path, (tuple, list)) or len(path) != 2:
                raise PipelineError(f"constrain: path must be (from_stream, to_stream) or None, got {path!r}")
            first, last = (end.op.id if hasattr(end, "op") else str(end) for end in path)
            ends = (first, last)
        label = name or f"latency_{len(self.graph.constraints) + 1}"
        self.graph.constraints.append(make_constraint(label, latency, path=ends, over=over, p95=p95))
        return self

    def goals(
        self,
        latency=None,
        *,
        percentile: int | str = 95,
        path: tuple | None = None,
        over="30s",
        keep_up: bool = True,
        max_executors: int | None = None,
        price_per_hour: float | None = None,
        favour: str = "latency",
    ) -> Pipeline:
        """State what the job must achieve, and let Sluice keep it while the job runs.

        ``latency``: a bound on the latency of the records on ``path`` at ``percentile``
        (95, the default, or ``"mean"``) over any ``over`` seconds; ``keep_up``: the backlog
        at the sources stays bounded; ``max_executors``: on a standalone cluster, the most
        executors the job may hold; ``price_per_hour``: one executor's price (the cost the
        job reports); ``favour``: ``"latency"`` or ``"cost"``, what wins when they conflict.

        With goals and no ``policies`` given to ``run``, the job runs the autopilot: batch
        sizing, DS2 scaling of keyed stages (and of executors on a cluster), key-group
        balancing (traffic-aware between stages keyed differently), dynamic chaining and
        alternates by load, coordinated by one arbiter that keeps them from undoing each
        other (docs/control.md). Named policies replace it.

        >>> import sluice
        >>> from sluice import sources as S
        >>> p = sluice.Pipeline("example")
        >>> readings = p.source(S.generator(fields={"meter": S.Keys(10), "kwh": S.Normal(0.4, 0.1), "ts": S.EventTime()}))
        >>> out = readings.key_by("meter").aggregate(n=sluice.agg.count()).sink(sluice.sinks.memory("n"))
        >>> p.goals(latency="2s").graph.goals.describe()
        'p95 latency <= 2000 ms over 30 s (every source to every sink); keep up with the input; favour latency'
        """
        # control/ loads the solvers of every policy (highspy, scipy): only a job with goals pays it
        from sluice.control.goals import GOAL_CONSTRAINT, make_goals

        ends: tuple[str, str] | None = None
        if path is not None:
            if not isinstance(path, (tuple, list)) or len(path) != 2:
                raise PipelineError(f"goals: path must be (from_stream, to_stream) or None, got {path!r}")
            first, last = (end.op.id if hasattr(end, "op") else str(end) for end in path)
            ends = (first, last)
        goals = make_goals(
            latency,
            percentile=percentile,
            over=over,
            path=ends,
            keep_up=keep_up,
            max_executors=max_executors,
            price_per_hour=price_per_hour,
            favour=favour,
        )
        self.graph.constraints = [c for c in self.graph.constraints if c.name != GOAL_CONSTRAINT]
        constraint = goals.constraint()
        if constraint is not None:
            self.graph.constraints.append(constraint)
        self.graph.goals = goals
        if price_per_hour is not None and self.graph.economics is None:
            self.economics(price_per_hour=price_per_hour)
        return self

    def economics(
        self,
        *,
        price_per_hour: float = 1.0,
        billing: str = "second",
        break_even_best: float | None = None,
        break_even_worst: float | None = None,
        min_omega: float = 0.8,
    ) -> Pipeline:
        """What the job's executors cost and what its results are worth, for the value, cost
        and profit measured every batch (``BatchMetrics.dynamics``, docs/dynamic.md).

        ``price_per_hour``: one executor's price an hour; ``billing``: ``"hour"`` (every
        started hour billed whole) or ``"second"``; ``break_even_best`` / ``break_even_worst``:
        the cost per hour at which the job breaks even with every operator on its best /
        worst alternate (default: two executors' price / one's); ``min_omega``: the relative
        throughput the job must keep.

        >>> import sluice
        >>> p = sluice.Pipeline("example").economics(price_per_hour=0.5, billing="hour")
        >>> p.graph.economics.price_per_hour, p.graph.economics.billing
        (0.5, 'hour')
        """
        self.graph.economics = Economics(price_per_hour, billing, break_even_best, break_even_worst, min_omega)
        return self

    def late_data(self, spec: SinkSpec) -> Pipeline:
        """Where the records a window received after its watermark passed go, every batch
        (default: JSON files in the checkpoint, ``side/<operator>/late``).

        >>> import sluice
        >>> p = sluice.Pipeline("example").late_data(sluice.sinks.files("out/late"))
        >>> p.late_data_sink.path
        'out/late'
        """
        if not isinstance(spec, SinkSpec):
            raise PipelineError(f"late_data needs a sink spec, got {spec!r}")
        self.late_data_sink = spec
        return self

    def job_graph(self) -> JobGraph:
        """The pipeline's job graph (``sluice.graph.JobGraph``): its operators, as built so far.

        >>> import sluice
        >>> from sluice import sources as S
        >>> p = sluice.Pipeline("example")
        >>> p.source(S.generator(fields={"n": S.Sequence()})).sink(sluice.sinks.memory("n")) is not None
        True
        >>> [op.kind for op in p.job_graph().operators]
        ['source', 'sink']
        """
        return self.graph

    def run(self, checkpoint: str, options: RunOptions | None = None, **changes: Any) -> JobResult:
        """Run on Spark until the sources are exhausted, ``duration`` passes, or Ctrl-C.

        ``options``: a ``sluice.job.RunOptions``; ``changes``: options by name, on top of it.
        Options: ``master``, ``duration`` (s), ``trigger_interval`` (s), ``max_rows_per_batch``,
        ``on_batch`` (callback with each batch's metrics), ``spark`` (an existing session),
        ``ship`` (the pipeline's file: modules beside it are sent to the executors), ``ui``
        (False: no Spark UI),
        ``policies`` (the control policies: a list of ``sluice.control.Policy``, a dict or a
        YAML file; default: the autopilot when the pipeline has goals, adaptive batch sizing
        when it has only constraints),
        ``on_control`` (callback with the controller's state after each batch),
        ``reset_state`` (ids of stateful operators whose state in the checkpoint to drop, when
        a changed pipeline no longer fits it: see docs/operations.md),
        ``executors`` / ``max_executors`` (on a standalone cluster: hold that many executors
        from the first batch / let the controller hold at most that many; docs/elastic.md),
        ``collocate`` (False: an exchange before every keyed operator, also one keyed on the
        key of the keyed operator before it; see docs/balancing.md), ``standby`` (True: a hot
        standby that waits for the driver running this checkpoint and takes over when it dies;
        ``on_standby`` receives its status lines; docs/operations.md).

        >>> import sluice
        >>> from sluice import sources as S
        >>> p = sluice.Pipeline("example")
        >>> readings = p.source(S.generator(fields={"meter": S.Keys(10), "kwh": S.Normal(0.4, 0.1), "ts": S.EventTime()}))
        >>> _ = readings.key_by("meter").aggregate(total=sluice.agg.sum("kwh")).sink(sluice.sinks.memory("totals"))
        >>> result = p.run("/tmp/sluice-example", duration=20)  # doctest: +SKIP
        """
        options = RunOptions.of(options, **changes)
        if self.graph.goals is not None and self.graph.goals.latency_s is not None and options.mode == "auto":
            decision = self._mode_decision(checkpoint)
            if decision.real_time and not options.standby:
                from sluice.job.realtime import run_realtime

                return run_realtime(self, checkpoint, decision, options)
        from sluice.job.run import run_pipeline  # Spark: imported when a job runs

        return run_pipeline(self, checkpoint, options)

    def _mode_decision(self, checkpoint: str):
        """The mode a job with a latency goal runs in (``plan.mode``). A goal below the
        micro-batch floor that stays in micro-batches (the pipeline does not fit real-time
        mode) is said and logged here with the reasons, a real-time decision by the
        real-time run."""
        decision = choose_mode(self.graph)
        assert decision.goal_s is not None  # called for a job with a latency goal
        if not decision.real_time and decision.goal_s < decision.floor_s:
            import time

            DecisionLog(checkpoint).append({**decision.record(), "batch_id": -1, "time": time.time()})
            print(f"sluice: {decision.describe()}", flush=True)
        return decision
