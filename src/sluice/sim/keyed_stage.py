"""A simulated keyed stage for the balancing and scaling policies, at any scale (pure, no Spark).

One keyed operator with ``K`` key groups runs on the partitions the Plan gives it, each
partition on a core of its own while there are enough cores (beyond them, partitions share
the cores). Rows arrive per key group at rates that change over time (``rates(batch)``);
the engine plans a batch every ``interval_s`` seconds (later if the last one overran) and
admits every row that arrived since the last one started, as a Spark trigger does; the
backlog it reports is read at its end (the rows that arrived while it ran). A partition's time is the cost of
its key groups' rows plus, in the batch after a key group moved to it, the time to load the
key group's state (``load_s_per_byte`` times its bytes): a migration's pause.

Each batch yields the runtime's metrics record (``sluice.core.metrics.BatchMetrics``: rows
and state bytes per key group, the operator's time, its state reads, the backlog), so
``sluice.control.Controller`` drives the very policy objects (``KeyGroupBalancing``,
``FluxBalancing``, ``RingBalancing``, ``OneStepScaling``) the live job uses, through the same
``ControlView`` (``sluice.sim.loop.run_controlled``).
Each partition's busy seconds in the last batch, which no live record has, are the engine's
``partition_busy_s``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sluice.core.metrics import BatchMetrics, KeyGroupLoad, OperatorProgress


class KeyedStageEngine:
    """``rates(batch) -> rows/s per key group``; ``us_per_row``: work a row costs;
    ``state_bytes``: per key group; ``overhead_s``: a batch's fixed cost; ``cores``: the
    job's task slots."""

    def __init__(
        self,
        op_id: str,
        rates: Callable[[int], np.ndarray],
        *,
        us_per_row: float,
        state_bytes: np.ndarray,
        load_s_per_byte: float = 20e-9,
        interval_s: float = 1.0,
        overhead_s: float = 0.05,
        cores: int,
        noise: float = 0.0,
        seed: int = 0,
        source: str = "source",
    ):
        self.op_id, self.rates, self.source = op_id, rates, source
        self.us_per_row, self.state_bytes = us_per_row, np.asarray(state_bytes, dtype=float)
        self.load_s_per_byte, self.interval_s, self.overhead_s = load_s_per_byte, interval_s, overhead_s
        self.cores, self.noise = cores, noise
        self.rng = np.random.default_rng(seed)
        self.now = 0.0
        self.batch_id = 0
        self.partition_busy_s: list[float] = []  # each partition's busy seconds in the last batch
        self.routing: np.ndarray | None = None  # the routing the last batch ran with
        self.gap = interval_s  # seconds since the last batch started: its rows arrived in them

    def step(self, plan, cap: int | None = None) -> BatchMetrics:
        """One batch under ``plan``; it admits every row that arrived (``cap`` is ignored)."""
        stage = plan.keyed[self.op_id]
        routing = np.asarray(stage.routing)
        rates = self.rates(self.batch_id)
        rows = rates * self.gap
        if self.noise:
            rows = rows * self.rng.lognormal(0.0, self.noise, len(rows))
        rows = np.floor(rows)
        work = rows * self.us_per_row * 1e-6
        moved = np.zeros(len(routing), bool) if self.routing is None else routing != self.routing
        loading = np.where(moved, self.state_bytes * self.load_s_per_byte, 0.0)
        busy = np.bincount(routing, weights=work + loading, minlength=stage.partitions)
        # each partition a core while there are enough; beyond that they queue for the cores
        span = busy.max() if stage.partitions <= self.cores else max(busy.max(), busy.sum() / self.cores)
        duration = self.overhead_s + float(span)
        batch = BatchMetrics(
            batch_id=self.batch_id,
            started_at=self.now,
            duration_s=duration,
            rows_in=int(rows.sum()),
            plan_version=plan.version,
            rows_by_source={self.source: int(rows.sum())},
            # read at the batch's end, as the runtime does: what arrived while it ran
            backlog={self.source: int(rates.sum() * duration)},
            operators={
                self.op_id: OperatorProgress(
                    rows_in=int(rows.sum()),
                    rows_out=int(rows.sum()),
                    time_s=float(busy.sum()),
                    slowest_task_s=float(busy.max()),
                    input_wait_s=0.0,
                    counters={
                        "state_read_s": float(loading.sum()),
                        "state_read_bytes": float(self.state_bytes[moved].sum()),
                    },
                )
            },
            key_groups={
                self.op_id: KeyGroupLoad(
                    {kg: int(rows[kg]) for kg in range(len(routing))},
                    {kg: int(self.state_bytes[kg]) for kg in range(len(routing))},
                )
            },
        )
        self.partition_busy_s = busy.tolist()
        self.routing = routing
        self.gap = max(self.interval_s, duration)
        self.now += self.gap
        self.batch_id += 1
        return batch
