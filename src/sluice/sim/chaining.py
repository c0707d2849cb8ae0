"""A simulated engine for the chaining policy (pure, no Spark).

One chainable run of Python operators, each costing ``work_us`` microseconds a row, fed
``rows`` rows a batch in ``tasks`` partitions, on ``cores`` cores. The true cost of a pass
and of an exchange (``pass_us``, ``exchange_us`` a row) need not be what the policy assumes:
that is how a test shows the policy checking its predictions against what it measures.
A batch's time follows ``sluice.plan.chaining.RunCosts`` with the true costs, times a noise
factor, plus a fixed ``overhead_s``; its operator metrics are what the runtime reports
(``time_s`` and ``rows_in`` per operator, ``tasks`` per pass under its first operator), in
its metrics record (``sluice.core.metrics.BatchMetrics``); ``sluice.sim.loop.run_controlled``
runs it under a controller.
"""

from __future__ import annotations

import numpy as np

from sluice.core.metrics import BatchMetrics, OperatorProgress
from sluice.plan.chaining import RunCosts, run_layout


class ChainEngine:
    def __init__(
        self,
        run: tuple[str, ...],
        work_us: tuple[float, ...],
        *,
        rows: int,
        tasks: int,
        cores: int,
        pass_us: float,
        exchange_us: float,
        overhead_s: float = 0.05,
        noise: float = 0.03,
        seed: int = 0,
    ):
        self.run, self.work_us = tuple(run), tuple(work_us)
        self.rows, self.tasks, self.cores = rows, tasks, cores
        self.pass_us, self.exchange_us = pass_us, exchange_us
        self.overhead_s, self.noise = overhead_s, noise
        self.rng = np.random.default_rng(seed)
        self.clock = 0.0
        self.batch_id = 0

    def costs(self) -> RunCosts:
        return RunCosts(
            work_s=tuple(w * 1e-6 * self.rows for w in self.work_us),
            rows=(float(self.rows),) * len(self.run),
            tasks=self.tasks,
            cores=self.cores,
            pass_s_per_row=self.pass_us * 1e-6,
            exchange_s_per_row=self.exchange_us * 1e-6,
        )

    def step(self, plan, cap: int | None = None) -> BatchMetrics:
        """One batch of ``rows`` rows under ``plan`` (``cap`` is ignored)."""
        costs = self.costs()
        at = run_layout(self.run, plan.chains, plan.rebalance)
        heads = [chain[0] for chain in plan.chains if chain and chain[0] in self.run]
        extra = (len(heads) - (2 if at else 1)) * self.rows * costs.pass_s_per_row / min(self.tasks, self.cores)
        seconds = (costs.time(at) + extra) * float(self.rng.lognormal(0.0, self.noise)) + self.overhead_s
        operators = {}
        for op, w in zip(self.run, costs.work_s):
            operators[op] = OperatorProgress(rows_in=self.rows, rows_out=self.rows, time_s=w)
        for head in heads:
            rebalanced = head in plan.rebalance
            operators[head].counters["tasks"] = float(plan.rebalance[head] if rebalanced else self.tasks)
        batch = BatchMetrics(
            batch_id=self.batch_id,
            started_at=self.clock,
            duration_s=seconds,
            rows_in=self.rows,
            plan_version=plan.version,
            operators=operators,
        )
        self.clock += seconds
        self.batch_id += 1
        return batch
