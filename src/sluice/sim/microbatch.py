"""A simulated micro-batch engine for the control policies (pure, no Spark).

One source, one constrained path. The engine plans a batch the moment the previous one
ends (Spark's trigger 0, plus a fixed ``gap``): it admits the waiting rows up to the
admission cap, the batch takes ``a + b * rows`` seconds times a noise factor, and every row's
latency is the batch's commit time minus the row's arrival. Rows arrive at a piecewise
constant rate (``rate_steps``: (from second, rows/s) pairs), or, with ``pull=True``, are all
there and stamped on admission (a replayed file).

A keyed stage may be added (``keyed``: its id, ``keyed_b``: its seconds of work a row): its
work is spread over the partitions the Plan gives it, at most ``cores`` at once, so the
batch takes ``a + b * rows + keyed_b * rows / min(partitions, cores)``. That is what scaling
the stage out changes (the latency controller's countermeasure before it escalates).

Each batch yields the runtime's metrics record (``sluice.core.metrics.BatchMetrics``), so
``sluice.control.Controller`` runs on it unchanged; ``sluice.sim.loop.run_controlled`` runs
the engine under a controller.
"""

from __future__ import annotations

import math

import numpy as np

from sluice.core.metrics import BatchMetrics, OperatorProgress
from sluice.graph.rates import RateSchedule

PULL_BATCH_ROWS = 100_000  # what an uncapped pull source admits (runtime DEFAULT_MAX_ROWS_PER_BATCH)


class MicroBatchEngine:
    def __init__(
        self,
        a: float,
        b: float,
        *,
        rate_steps: list[tuple[float, float]] | None = None,
        pull: bool = False,
        noise: float = 0.0,
        gap: float = 0.01,
        seed: int = 0,
        source: str = "source_1",
        constraint: str = "latency_1",
        operator: str = "work",
        keyed: str | None = None,
        keyed_b: float = 0.0,
        cores: int = 2,
    ):
        self.a, self.b, self.noise, self.gap = a, b, noise, gap
        self.keyed, self.keyed_b, self.cores = keyed, keyed_b, cores
        self.trace = RateSchedule(tuple(rate_steps or [(0.0, 1000.0)]))  # as a GeneratorSource's rate
        self.pull = pull
        self.rng = np.random.default_rng(seed)
        self.source, self.constraint, self.operator = source, constraint, operator
        self.now = 0.0
        self.admitted = 0
        self.batch_id = 0

    def step(self, plan=None, cap: int | None = None) -> BatchMetrics:
        """Plan and run one batch admitting at most ``cap`` rows (None: no cap) under ``plan``
        (its keyed stage's partitions, if the engine has one)."""
        if not self.pull:  # Spark plans no batch before a row has arrived
            self.now = max(self.now, float(self.trace.arrival_s(np.array([float(self.admitted + 1)]))[0]))
        start = self.now
        if self.pull:
            n = PULL_BATCH_ROWS if cap is None else cap
            arrivals = np.full(n, start)
            backlog = None
        else:
            waiting = math.floor(self.trace.rows_by(start)) - self.admitted
            n = waiting if cap is None else min(waiting, cap)
            arrivals = self.trace.arrival_s(np.arange(self.admitted, self.admitted + n, dtype=float))
            backlog = waiting - n
        self.admitted += n
        factor = math.exp(self.rng.normal(0.0, self.noise)) if self.noise else 1.0
        partitions = plan.keyed[self.keyed].partitions if self.keyed and plan is not None else 1
        keyed_s = self.keyed_b * n  # the stage's work, summed over its tasks
        duration = (self.a + self.b * n + keyed_s / min(partitions, self.cores)) * factor
        commit = start + duration
        operators = {self.operator: OperatorProgress(rows_in=n, rows_out=n, time_s=duration, slowest_task_s=duration)}
        if self.keyed:
            operators[self.keyed] = OperatorProgress(
                rows_in=n, rows_out=n, time_s=keyed_s * factor, slowest_task_s=keyed_s * factor / partitions, input_wait_s=0.0
            )
        batch = BatchMetrics(
            batch_id=self.batch_id,
            plan_version=0 if plan is None else plan.version,
            started_at=start,
            duration_s=duration,
            rows_in=n,
            rows_by_source={self.source: n},
            backlog={self.source: backlog},
            operators=operators,
        )
        if n:
            latency_ms = (commit - arrivals) * 1000
            mean = float(latency_ms.mean())
            batch.paths[self.constraint] = {
                "mean_ms": round(mean, 3),
                "p95_ms": round(float(np.quantile(latency_ms, 0.95)), 3),
                "rows": n,
                "sink": "sink",
                "source_wait": round(mean - duration * 1000, 3),
                "operators": {self.operator: round(duration * 1000, 3)},
                "exchange": 0.0,
                "sink_commit": 0.0,
                "rest": 0.0,
            }
        self.now = commit + self.gap
        self.batch_id += 1
        return batch
