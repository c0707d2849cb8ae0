"""A simulated micro-batch engine with elastic executors and alternates (pure, no Spark).

The simulator the live elastic benchmark compares against: rows arrive at a rate that
follows a trace; each batch admits what waits (up to a cap), and takes a fixed overhead
plus the work of its rows (every Python or keyed operator's cost per row under the
alternate the Plan runs: the declared ``Alt.cost``, or ``costs``) spread over the cores of
the executors held, which a ``SimulatedExecutors`` actuator adds (after ``startup_s``) and
releases. With ``tasks`` the work is that many equal tasks, which Spark hands to a slot as
it frees up or registers: an executor that registers while they run takes one at once and
runs it only when its Python workers are up (``warmup_s``), and the batch waits for it.
Each batch yields a ``runtime.batch.metrics.BatchMetrics`` with the fields the controller reads
(rows, backlog, per-operator rows and useful time, executors with their ``since``, the
alternates that ran), so ``control.Controller`` and the very same policy
objects run on it unchanged.

Each batch's ``dynamics`` (value, Omega, cost, profit) is measured by the same
``models.economics.EconomicsMeter`` the running job uses, with the graph's ``economics``;
``figures`` reads a run's figures from its batches, simulated or live.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable

import numpy as np

from sluice.core.metrics import BatchMetrics, OperatorProgress
from sluice.core.resources import held_executors
from sluice.graph.alternates import alternates_of, application_value, value_bounds
from sluice.graph.economics import Economics
from sluice.models.economics import BatchFacts, EconomicsMeter
from sluice.models.economics import profit as run_profit
from sluice.plan.physical import Plan
from sluice.sim.executors import SimulatedExecutors
from sluice.sim.loop import run_controlled


class ElasticEngine:
    """``graph``: the job graph (its operators with alternates and their declared costs);
    ``rate``: rows/s arriving at time t (seconds from 0); ``costs``: seconds of a core per row
    of operators without alternates (op id -> cost); ``overhead_s``: fixed cost of a batch;
    ``max_rows``: the most rows a batch admits."""

    def __init__(
        self,
        graph,
        rate: Callable[[float], float],
        executors: SimulatedExecutors | None = None,
        costs: dict[str, float] | None = None,
        overhead_s: float = 0.5,
        max_rows: int = 200_000,
        noise: float = 0.0,
        seed: int = 0,
        source: str = "source",
        tasks: int | None = None,
    ):
        if tasks is not None and tasks < 1:
            raise ValueError(f"elastic engine: tasks ({tasks}) must be >= 1")
        self.tasks = tasks
        self.graph, self.rate = graph, rate
        self.costs = dict(costs or {})
        self.overhead_s, self.max_rows, self.noise = overhead_s, max_rows, noise
        self.rng = np.random.default_rng(seed)
        self.source = source
        self.clock = 0.0
        self.arrived = 0.0
        self.admitted = 0
        self.batch_id = 0
        self.executors = executors or SimulatedExecutors(lambda: self.clock)
        self.operators = [op for op in graph.topological_order() if op.is_python or op.is_keyed]
        self.meter = EconomicsMeter(graph.economics or Economics(), *value_bounds(graph))

    @property
    def waiting(self) -> int:
        """Rows arrived and not yet admitted by a batch."""
        return int(self.arrived) - self.admitted

    def idle(self, until_s: float, tick_s: float = 0.1) -> None:
        """With no row waiting, wait for one (up to ``until_s``): Spark starts no batch
        without new input, so neither a batch nor a controller decision happens meanwhile."""
        while self.waiting <= 0 and self.clock < until_s:
            self.arrived += self._arrivals(self.clock, self.clock + tick_s, steps=1)
            self.clock += tick_s

    def cost_per_row(self, op_id: str, plan: Plan) -> float:
        alts = alternates_of(self.graph[op_id])
        if alts:
            active = plan.alternates.get(op_id) or next(iter(alts))
            return float(alts[active].cost or 0.0)
        return float(self.costs.get(op_id, 0.0))

    def _arrivals(self, t0: float, t1: float, steps: int = 20) -> float:
        ts = np.linspace(t0, t1, steps + 1)
        mids = (ts[:-1] + ts[1:]) / 2
        return float(sum(self.rate(t) for t in mids) * (t1 - t0) / steps)

    def _work_time(self, begin: float, work: float) -> float:
        return self._tasks_time(begin, work) if self.tasks else self._fluid_time(begin, work)

    def _tasks_time(self, begin: float, work: float) -> float:
        """Seconds ``tasks`` equal tasks of ``work`` core-seconds take from ``begin``: each
        goes to the slot Spark offers first (a slot is offered when it frees up, a joining
        executor's when it registers) and runs from when that slot can run it."""
        assert self.tasks is not None
        each = work / self.tasks
        slots = getattr(self.executors, "slots", None)
        heap = list(slots(begin)) if slots is not None else []
        if not heap:
            heap = [(begin, begin)] * max(self.executors.resources().cores, 1)
        heapq.heapify(heap)
        end = begin
        for _ in range(self.tasks):
            offered, runs = heapq.heappop(heap)
            done = max(offered, runs) + each
            end = max(end, done)
            heapq.heappush(heap, (done, done))
        return end - begin

    def _fluid_time(self, begin: float, work: float) -> float:
        """Seconds the batch's tasks take from ``begin``: ``work`` core-seconds over the cores
        held, and an executor that joins while they run takes its share of the tasks still
        waiting from then on (Spark offers pending tasks to an executor once it registers)."""
        resources = self.executors.resources()
        cores, per = float(max(resources.cores, 1)), max(resources.cores_per_executor, 1)
        t, left = begin, work
        for join in sorted(j for j in getattr(self.executors, "joining", []) if j > begin):
            if left <= cores * (join - t):
                break
            left -= cores * (join - t)
            t, cores = join, cores + per
        return t + left / cores - begin

    def step(self, plan: Plan) -> BatchMetrics:
        """Plan and run one batch under ``plan``; the clock advances by its duration."""
        start = self.clock
        waiting = int(self.arrived) - self.admitted
        rows = max(0, min(waiting, self.max_rows))
        self.admitted += rows
        per_row = {op.id: self.cost_per_row(op.id, plan) for op in self.operators}
        work = rows * sum(per_row.values())
        factor = math.exp(self.rng.normal(0.0, self.noise)) if self.noise else 1.0
        duration = self.overhead_s * factor + self._work_time(start + self.overhead_s * factor, work * factor)
        self.clock = start + duration
        self.arrived += self._arrivals(start, self.clock)
        resources = self.executors.resources()
        executors = [{"id": "driver", "cores": 0, "since": 0.0}] + [
            {"id": str(i), "cores": resources.cores_per_executor, "since": since} for i, since in enumerate(resources.since)
        ]
        backlog: dict[str, int | None] = {self.source: int(self.arrived) - self.admitted}
        billed = max(len(held_executors(executors)), self.executors.target)  # from the request on, as live
        facts = BatchFacts(
            started_at=start,
            ended_at=self.clock,
            value=application_value(self.graph, plan.alternates),
            rows_in=rows,
            backlog=backlog,
            executors=billed,
        )
        m = BatchMetrics(
            batch_id=self.batch_id,
            plan_version=plan.version,
            started_at=start,
            duration_s=duration,
            rows_in=rows,
            rows_by_source={self.source: rows},
            backlog=backlog,
            operators={
                op_id: OperatorProgress(rows_in=rows, rows_out=rows, time_s=rows * c * factor, input_wait_s=0.0)
                for op_id, c in per_row.items()
            },
            executors=executors,
            alternates=dict(plan.alternates),
            dynamics=self.meter.measure(facts),
        )
        self.batch_id += 1
        return m


def run(engine: ElasticEngine, controller, plan: Plan, until_s: float, drain: bool = False) -> list[BatchMetrics]:
    """Batches until the clock passes ``until_s``, the controller deciding after each (as live),
    each as soon as a row waits; ``drain``: and on until no row waits (a live run with a finite
    input ends so)."""
    return run_controlled(_Until(engine, until_s, drain), controller, plan)[0]


class _Until:
    """The engine's batches, each as soon as a row waits, until its clock passes ``until_s``
    (``drain``: and on until no row waits)."""

    def __init__(self, engine: ElasticEngine, until_s: float, drain: bool):
        self.engine, self.until_s, self.drain = engine, until_s, drain

    def step(self, plan, cap: int | None = None) -> BatchMetrics | None:
        engine = self.engine
        if not (engine.clock < self.until_s or (self.drain and engine.waiting > 0)):
            return None
        engine.idle(self.until_s)
        if engine.waiting <= 0:
            return None  # the input has ended
        return engine.step(plan)


def figures(
    batches: list,
    offered_rows: float | None = None,
    since: float | None = None,
    economics: Economics | None = None,
    bounds: tuple[float, float] | None = None,
) -> dict:
    """A run's figures from its batches (simulated or live): the thesis's value, cost and
    profit over the run as the batches' ``dynamics`` records have them
    (``models.economics``), the executor-seconds held, and Omega over the run: rows
    processed over ``offered_rows`` (the rows that arrived), when given.

    ``since`` (the batches' clock): only the batches that start then or later count, and the
    cost and the time are counted from the end of the batch before (a live run's batches before
    its input starts are left out). Profit over that window needs the run's
    ``economics`` and value ``bounds`` (Gamma_min, Gamma_max; without them, the last batch's
    profit over the whole run).

    (``dynamics`` also has ``omega_mean``, the time mean of each batch's admitted over
    admitted-plus-waiting; with a source arriving at a rate it sits near 0.5 even when the
    job keeps up, since the rows that arrive while a batch runs wait for the next one.)"""
    before = [m for m in batches if since is not None and m.started_at < since]
    batches = [m for m in batches if since is None or m.started_at >= since]
    last: dict = next((m.dynamics for m in reversed(batches) if m.dynamics), {})
    base: dict = next((m.dynamics for m in reversed(before) if m.dynamics), {})
    # held from a batch's start to the next one's (a live job's executors are held between
    # batches too), the last to its end
    spans = [b.started_at - m.started_at for m, b in itertools.pairwise(batches)] + ([batches[-1].duration_s] if batches else [])
    executor_seconds = sum(span * len(held_executors(m.executors)) for span, m in zip(spans, batches))
    processed = sum(m.rows_in for m in batches)
    omega = None if not offered_rows else min(1.0, processed / offered_rows)
    cost = None if last.get("cost") is None else last["cost"] - float(base.get("cost", 0.0))
    value, profit = last.get("value_mean"), last.get("profit")
    if economics is not None and bounds is not None and batches and cost is not None:
        weights = [m.duration_s for m in batches if m.dynamics]
        values = [m.dynamics["value"] for m in batches if m.dynamics]
        value = float(np.average(values, weights=weights)) if sum(weights) > 0 else values[-1]
        # from where the cost is counted: the end of the batch before (the meter bills each batch
        # from the previous one's end), or the window's start
        start = before[-1].started_at + before[-1].duration_s if before else since if since is not None else batches[0].started_at
        hours = (batches[-1].started_at + batches[-1].duration_s - start) / 3600.0
        profit = run_profit(economics, value, cost, hours, *bounds)
    return {"value": value, "omega": omega, "cost": cost, "profit": profit, "executor_seconds": round(executor_seconds, 3)}
