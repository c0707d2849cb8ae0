"""A simulated micro-batch engine with elastic executors and alternates (pure, no Spark).

The simulator the live elastic benchmark compares against: rows arrive at a rate that
follows a trace; each batch admits what waits (up to a cap), and takes a fixed overhead
plus the work of its rows (every Python or keyed operator's cost per row under the
alternate the Plan runs: the declared ``Alt.cost``, or ``costs``) spread over the cores of
the executors held, which a ``SimulatedExecutors`` actuator adds (after ``startup_s``) and
releases. Each batch yields a ``runtime.metrics.BatchMetrics`` with the fields the
controller reads (rows, backlog, per-operator rows and useful time, executors with their
``since``, the alternates that ran), so ``control.Controller`` and the very same policy
objects run on it unchanged.

Each batch's ``dynamics`` (value, Omega, cost, profit) is measured by the same
``models.economics.EconomicsMeter`` the running job uses, with the graph's ``economics``;
``figures`` reads a run's figures from its batches, simulated or live.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from sluice.graph.alternates import alternates_of, application_value, value_bounds
from sluice.graph.economics import Economics
from sluice.models.economics import BatchFacts, EconomicsMeter
from sluice.plan.physical import Plan
from sluice.runtime.executors import held_executors
from sluice.runtime.metrics import BatchMetrics
from sluice.sim.executors import SimulatedExecutors


class ElasticEngine:
    """``graph``: the job graph (its operators with alternates and their declared costs);
    ``rate``: rows/s arriving at time t (seconds from 0); ``costs``: seconds of a core per row
    of operators without alternates (op id -> cost); ``overhead_s``: fixed cost of a batch;
    ``max_rows``: the most rows a batch admits."""

    def __init__(self, graph, rate: Callable[[float], float], executors: SimulatedExecutors | None = None,
                 costs: dict[str, float] | None = None, overhead_s: float = 0.5, max_rows: int = 200_000,
                 noise: float = 0.0, seed: int = 0, source: str = "source"):
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

    def step(self, plan: Plan) -> BatchMetrics:
        """Plan and run one batch under ``plan``; the clock advances by its duration."""
        start = self.clock
        waiting = int(self.arrived) - self.admitted
        rows = max(0, min(waiting, self.max_rows))
        self.admitted += rows
        cores = max(self.executors.resources().cores, 1)
        per_row = {op.id: self.cost_per_row(op.id, plan) for op in self.operators}
        work = rows * sum(per_row.values())
        factor = math.exp(self.rng.normal(0.0, self.noise)) if self.noise else 1.0
        duration = (self.overhead_s + work / cores) * factor
        self.clock = start + duration
        self.arrived += self._arrivals(start, self.clock)
        resources = self.executors.resources()
        executors = [{"id": "driver", "cores": 0, "since": 0.0}] + [
            {"id": str(i), "cores": resources.cores_per_executor, "since": since}
            for i, since in enumerate(resources.since)]
        backlog: dict[str, int | None] = {self.source: int(self.arrived) - self.admitted}
        facts = BatchFacts(started_at=start, ended_at=self.clock, value=application_value(self.graph, plan.alternates),
                           rows_in=rows, backlog=backlog, executors=len(held_executors(executors)))
        m = BatchMetrics(
            batch_id=self.batch_id, plan_version=plan.version, started_at=start, duration_s=duration, rows_in=rows,
            rows_by_source={self.source: rows}, backlog=backlog,
            operators={op_id: {"rows_in": rows, "rows_out": rows, "time_s": rows * c * factor, "input_wait_s": 0.0}
                       for op_id, c in per_row.items()},
            executors=executors, alternates=dict(plan.alternates), dynamics=self.meter.measure(facts))
        self.batch_id += 1
        return m


def run(engine: ElasticEngine, controller, plan: Plan, until_s: float) -> list[BatchMetrics]:
    """Batches until the clock passes ``until_s``, the controller deciding after each (as live)."""
    out = []
    while engine.clock < until_s:
        m = engine.step(plan)
        out.append(m)
        if controller is not None:
            plan = controller(m, plan) or plan
    return out


def figures(batches: list, offered_rows: float | None = None) -> dict:
    """A run's figures from its batches (simulated or live): the thesis's value, cost and
    profit over the run as the last batch's ``dynamics`` record has them
    (``models.economics``), the executor-seconds held, and Omega over the run: rows
    processed over ``offered_rows`` (the rows that arrived), when given.

    (``dynamics`` also has ``omega_mean``, the time mean of each batch's admitted over
    admitted-plus-waiting; with a source arriving at a rate it sits near 0.5 even when the
    job keeps up, since the rows that arrive while a batch runs wait for the next one.)"""
    last: dict = next((m.dynamics for m in reversed(batches) if m.dynamics), {})
    executor_seconds = sum(m.duration_s * len(held_executors(m.executors)) for m in batches)
    processed = sum(m.rows_in for m in batches)
    omega = None if not offered_rows else min(1.0, processed / offered_rows)
    return {"value": last.get("value_mean"), "omega": omega, "cost": last.get("cost"),
            "profit": last.get("profit"), "executor_seconds": round(executor_seconds, 3)}
