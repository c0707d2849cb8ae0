"""A simulated job for the autopilot: a Python step and a keyed stage on elastic executors.

Batches run as Spark's trigger 0 runs them: the next is planned ``gap_s`` after the last one
ends (and only once a row waits); it admits what waits up to the admission cap. Rows arrive
at ``rate(t)`` rows/s; each belongs to a key group with the shares ``shares(t)`` give (a hot
set may move). A batch takes

    overhead_s + n * python_s / cores + the keyed stage's span

where the keyed stage's span is its busiest partition's work (``keyed_s`` a row of its key
groups) while there are enough cores for its partitions, else its whole work over the
cores; ``cores`` are the warm executors' (``SimulatedExecutors``, one core each by
default). A key group moved to another partition loads its state first
(``load_s_per_key_group``). Every row's latency is the batch's commit time minus its arrival
(exact quantiles over the admitted rows' arrival times, sampled at 512 points).

Events: ``kill_at`` (s): one executor dies; the batch running then re-runs the work of the
partition it held, and Spark asks for a replacement (it joins after the executors'
``startup_s``) while the job's executor target stays; ``outage``: (from, to) seconds during
which no batch runs (the driver is down) while rows keep arriving.

Each batch yields the runtime's metrics record (``sluice.core.metrics.BatchMetrics``: rows,
backlog, per-operator rows and useful time, key-group rows, the constrained path's latency
split), so ``control.Controller`` with the very same policy objects runs on it
(``sluice.sim.loop.run_controlled``). Pure: no Spark.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sluice.core.metrics import BatchMetrics, KeyGroupLoad, OperatorProgress
from sluice.sim.executors import SimulatedExecutors
from sluice.sim.loop import run_controlled

LATENCY_SAMPLES = 512


@dataclass
class JobSimConfig:
    python_op: str = "work"
    keyed_op: str = "counts"
    source: str = "source"
    constraint: str | None = "goal_latency"
    python_s: float = 60e-6  # core-seconds a row in the Python step
    keyed_s: float = 140e-6  # core-seconds a row in the keyed stage
    overhead_s: float = 0.5
    gap_s: float = 0.1
    load_s_per_key_group: float = 0.02
    noise: float = 0.05
    horizon_s: float = 4000.0
    dt: float = 0.05  # the arrival grid's step
    seed: int = 0
    max_rows: int = 2_000_000


class JobSim:
    def __init__(
        self,
        config: JobSimConfig,
        rate: Callable[[np.ndarray], np.ndarray],
        shares: Callable[[float], np.ndarray],
        executors: SimulatedExecutors,
        kill_at: float | None = None,
        outage: tuple[float, float] | None = None,
    ):
        self.c = config
        self.shares = shares
        self.executors = executors
        self.kill_at, self.outage = kill_at, outage
        self.rng = np.random.default_rng(config.seed)
        grid = np.arange(0.0, config.horizon_s + config.dt, config.dt)
        self.grid = grid
        self.cumulative = np.concatenate([[0.0], np.cumsum(rate(grid[:-1]) * config.dt)])
        self.now = 0.0
        self.admitted = 0
        self.batch_id = 0
        self.routing: np.ndarray | None = None
        self.cost_s = 0.0  # executor-seconds billed (from the request on, as a live job is)

    def arrived(self, t: float) -> int:
        return int(np.interp(t, self.grid, self.cumulative))

    def _arrival_times(self, first: int, n: int) -> np.ndarray:
        positions = first + (np.arange(LATENCY_SAMPLES) + 0.5) * n / LATENCY_SAMPLES
        return np.interp(positions, self.cumulative, self.grid)

    def _advance(self, until: float) -> None:
        self.cost_s += max(until - self.now, 0.0) * self.executors.target
        self.now = until

    def step(self, plan, cap: int | None = None) -> BatchMetrics | None:
        """One batch under ``plan`` admitting at most ``cap`` rows; None once the horizon is reached."""
        c = self.c
        start = self.now
        if self.outage is not None and self.outage[0] <= start < self.outage[1]:
            start = self.outage[1]
        while self.arrived(start) <= self.admitted:  # Spark plans no batch before a row waits
            start += 0.1
            if start >= c.horizon_s:
                return None
        if start >= c.horizon_s:
            return None
        self._advance(start)
        waiting = self.arrived(start) - self.admitted
        n = min(waiting, c.max_rows if cap is None else cap)
        first = self.admitted
        self.admitted += n
        stage = plan.keyed[c.keyed_op]
        routing = np.asarray(stage.routing)
        resources = self.executors.resources()
        cores = max(resources.cores, 1)
        shares = np.asarray(self.shares(start), dtype=float)
        rows_kg = self.rng.multinomial(n, shares / shares.sum()) if n else np.zeros(len(shares), np.int64)
        work = rows_kg * c.keyed_s
        moved = np.zeros(len(routing), bool) if self.routing is None else routing != self.routing
        busy = np.bincount(routing, weights=work + moved * c.load_s_per_key_group, minlength=stage.partitions)
        span = float(busy.max()) if stage.partitions <= cores else max(float(busy.max()), float(busy.sum()) / cores)
        python = n * c.python_s / cores
        factor = math.exp(self.rng.normal(0.0, c.noise)) if c.noise else 1.0
        duration = (c.overhead_s + python + span) * factor
        if self.kill_at is not None and start <= self.kill_at < start + duration:
            self.executors.kill_one()
            duration += float(busy.max()) + n * c.python_s / cores  # the lost tasks run again
            self.kill_at = None
        commit = start + duration
        self.routing = routing
        self._advance(commit)
        backlog = self.arrived(commit) - self.admitted
        keyed_time = float(busy.sum()) * factor
        groups = np.flatnonzero(rows_kg)
        batch = BatchMetrics(
            batch_id=self.batch_id,
            plan_version=plan.version,
            started_at=start,
            duration_s=duration,
            rows_in=n,
            rows_by_source={c.source: n},
            backlog={c.source: backlog},
            operators={
                c.python_op: OperatorProgress(
                    rows_in=n, rows_out=n, time_s=n * c.python_s * factor, slowest_task_s=python * factor, input_wait_s=0.0
                ),
                c.keyed_op: OperatorProgress(
                    rows_in=n, rows_out=n, time_s=keyed_time, slowest_task_s=float(busy.max()) * factor, input_wait_s=0.0
                ),
            },
            key_groups={
                c.keyed_op: KeyGroupLoad({int(kg): int(rows_kg[kg]) for kg in groups}, {int(kg): 1_000_000 for kg in groups})
            },
        )
        if n and c.constraint:
            latency_ms = (commit - self._arrival_times(first, n)) * 1000
            mean = float(latency_ms.mean())
            batch.paths[c.constraint] = {
                "mean_ms": round(mean, 3),
                "p95_ms": round(float(np.quantile(latency_ms, 0.95)), 3),
                "rows": n,
                "sink": "sink",
                "source_wait": round(max(mean - duration * 1000, 0.0), 3),
                "operators": {c.python_op: round(python * factor * 1000, 3), c.keyed_op: round(span * factor * 1000, 3)},
                "exchange": 0.0,
                "sink_commit": 0.0,
                "rest": round(c.overhead_s * factor * 1000, 3),
            }
        self._advance(commit + c.gap_s)
        self.batch_id += 1
        return batch


def run(sim: JobSim, controller, plan) -> tuple[list[BatchMetrics], object]:
    """Batches until the horizon, the controller (None: a static job) deciding after each."""
    return run_controlled(sim, controller, plan)


def make_job_sim(
    config: JobSimConfig,
    rate: Callable[[np.ndarray], np.ndarray],
    shares: Callable[[float], np.ndarray],
    *,
    held: int,
    max_executors: int,
    startup_s: float = 15.0,
    kill_at: float | None = None,
    outage: tuple[float, float] | None = None,
) -> JobSim:
    """A ``JobSim`` with simulated executors on its own clock (``held`` warm at the start)."""
    holder: dict[str, JobSim] = {}
    executors = SimulatedExecutors(
        lambda: holder["sim"].now if "sim" in holder else 0.0, held=held, max_executors=max_executors, startup_s=startup_s
    )
    sim = JobSim(config, rate, shares, executors, kill_at=kill_at, outage=outage)
    holder["sim"] = sim
    return sim
