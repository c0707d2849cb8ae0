"""What a balancer needs of a keyed stage, from the batches' metrics, and back to a Plan.

Per keyed operator and key group the runtime reports the rows it received (``key_groups``
in ``BatchMetrics``) and its state bytes; per keyed operator, its time summed over tasks and
what reading state cost (``state_read_s`` and ``state_read_bytes``). From these:

- ``key_group_stats`` aggregates a window of batches: rows, the processing time apportioned
  to each key group by its share of the operator's rows (the keyed kernels are vectorized
  over a task's rows, so their time grows with rows; state work is in the same time), the
  latest state bytes, and the measured seconds it takes to load a byte of state: the
  migration cost the balancer weighs (ALBIC's m_k = c |S_k|), measured rather than assumed;
- ``balancing_problem`` turns them into ALBIC's ``BalancingProblem``: nodes are the stage's
  partitions, a key group's load is the share of a core it kept busy, in percentage points;
- ``routing_of`` turns a ``BalancePlan`` back into the routing table of the next Plan.

Pure: no Spark.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sluice.plan.balancing import BalancePlan, BalancingProblem
from sluice.plan.physical import KeyedStagePlan

DEFAULT_LOAD_S_PER_BYTE = 20e-9
"""Seconds to load a byte of state when no load has been measured yet (about 50 MB/s: Arrow
IPC files read and merged by a task, measured on a 2-core machine)."""


@dataclass(frozen=True)
class KeyGroupStats:
    """One keyed operator's statistics over a window of batches."""

    op_id: str
    rows: np.ndarray  # per key group, summed over the window
    busy_s: np.ndarray  # per key group: processing seconds apportioned by rows
    state_bytes: np.ndarray  # per key group, as of the latest batch
    wall_s: float  # seconds the window's batches took
    load_s_per_byte: float  # measured cost of loading state (the migration cost per byte)
    batches: int

    @property
    def load(self) -> np.ndarray:
        """Per key group: the share of one core it kept busy, in percentage points."""
        return 100.0 * self.busy_s / self.wall_s if self.wall_s > 0 else np.zeros_like(self.busy_s)


def key_group_stats(batches: Sequence, op_id: str | Sequence[str], max_parallelism: int) -> KeyGroupStats | None:
    """Statistics of ``op_id`` over ``batches`` (BatchMetrics, oldest first), or None when
    they hold no rows of it. Several operators (collocated ones, which share one stage and
    one routing table) add up: a key group's load is what all of them spend on it."""
    ops = [op_id] if isinstance(op_id, str) else list(op_id)
    rows = np.zeros(max_parallelism)
    busy = np.zeros(max_parallelism)
    state = {op: np.zeros(max_parallelism) for op in ops}  # the latest bytes of each key group
    wall = read_s = read_bytes = 0.0
    seen = 0
    for m in batches:
        wall += float(m.duration_s)
        for op in ops:
            groups = (m.key_groups or {}).get(op) or {}
            batch_rows = np.zeros(max_parallelism)
            for kg, values in groups.items():
                k = int(kg)
                if 0 <= k < max_parallelism:
                    batch_rows[k] = float(values.get("rows", 0))
                    state[op][k] = float(values.get("state_bytes", 0))
            metrics = (m.operators or {}).get(op) or {}
            time_s = float(metrics.get("time_s", 0.0)) - float(metrics.get("input_wait_s", 0.0))
            total = batch_rows.sum()
            if total > 0:
                busy += max(time_s, 0.0) * batch_rows / total
                seen += 1
            rows += batch_rows
            read_s += float(metrics.get("state_read_s", 0.0))
            read_bytes += float(metrics.get("state_read_bytes", 0.0))
    if seen == 0:
        return None
    per_byte = read_s / read_bytes if read_bytes > 1e6 else DEFAULT_LOAD_S_PER_BYTE  # small reads are overhead
    return KeyGroupStats("+".join(ops), rows, busy, np.sum(list(state.values()), axis=0), wall, per_byte, len(batches))


def balancing_problem(stats: KeyGroupStats, stage: KeyedStagePlan) -> BalancingProblem:
    """ALBIC's input for one keyed stage: its partitions are the nodes, its routing table the
    current assignment; a migration costs the measured time to load the key group's state,
    in the same unit as a load: percentage points of a core over the window."""
    cost_per_byte = 100.0 * stats.load_s_per_byte / stats.wall_s if stats.wall_s > 0 else 0.0
    return BalancingProblem(load=stats.load, state_bytes=stats.state_bytes, assignment=np.asarray(stage.routing),
                            nodes=np.arange(stage.partitions), cost_per_byte=cost_per_byte)


def routing_of(plan: BalancePlan) -> list[int]:
    """The routing table (partition of each key group) a balance plan asks for."""
    return [int(p) for p in plan.assignment]
