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

Between two consecutive keyed operators keyed differently the runtime also counts the rows
per (upstream key group, key group) pair (``traffic`` in ``BatchMetrics``, see
``runtime.batch.traffic``): ``key_group_traffic`` sums a window of them into ALBIC's ``Traffic``,
``collocation_problem`` builds the problem across both stages (units: both operators' key
groups; nodes: partition indexes) and ``routings_of`` splits its plan into the two tables.

Pure: no Spark.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sluice.core.metrics import KeyGroupLoad, OperatorProgress
from sluice.plan.balancing import BalancePlan, BalancingProblem, Traffic
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
            load = m.key_groups.get(op) or KeyGroupLoad()
            batch_rows = np.zeros(max_parallelism)
            for k in load.groups():
                if 0 <= k < max_parallelism:
                    batch_rows[k] = float(load.rows.get(k, 0))
                    state[op][k] = float(load.state_bytes.get(k, 0))
            metrics = m.operators.get(op) or OperatorProgress()
            time_s = float(metrics.time_s) - float(metrics.input_wait_s)
            total = batch_rows.sum()
            if total > 0:
                busy += max(time_s, 0.0) * batch_rows / total
                seen += 1
            rows += batch_rows
            read_s += float(metrics.counters.get("state_read_s", 0.0))
            read_bytes += float(metrics.counters.get("state_read_bytes", 0.0))
    if seen == 0:
        return None
    per_byte = read_s / read_bytes if read_bytes > 1e6 else DEFAULT_LOAD_S_PER_BYTE  # small reads are overhead
    return KeyGroupStats("+".join(ops), rows, busy, np.sum(list(state.values()), axis=0), wall, per_byte, len(batches))


def balancing_problem(stats: KeyGroupStats, stage: KeyedStagePlan) -> BalancingProblem:
    """ALBIC's input for one keyed stage: its partitions are the nodes, its routing table the
    current assignment; a migration costs the measured time to load the key group's state,
    in the same unit as a load: percentage points of a core over the window."""
    cost_per_byte = 100.0 * stats.load_s_per_byte / stats.wall_s if stats.wall_s > 0 else 0.0
    return BalancingProblem(
        load=stats.load,
        state_bytes=stats.state_bytes,
        assignment=np.asarray(stage.routing),
        nodes=np.arange(stage.partitions),
        cost_per_byte=cost_per_byte,
    )


def routing_of(plan: BalancePlan) -> list[int]:
    """The routing table (partition of each key group) a balance plan asks for."""
    return [int(p) for p in plan.assignment]


@dataclass(frozen=True)
class KeyGroupTraffic:
    """The rows a keyed operator received from the keyed operator before it, per pair of
    their key groups, over a window of batches."""

    upstream: str
    op_id: str
    traffic: Traffic  # src: upstream key group, dst: op_id's key group, rate: rows/s over the window
    rows: int  # every row the window counted
    local_rows: int  # of them, rows whose two key groups were routed to one partition index
    wall_s: float

    @property
    def collocation(self) -> float:
        """The measured collocation factor: the share of the rows that stayed in their
        partition index (0 without rows)."""
        return self.local_rows / self.rows if self.rows else 0.0


def key_group_traffic(batches: Sequence, op_id: str, max_parallelism: int) -> KeyGroupTraffic | None:
    """``op_id``'s traffic from the keyed operator before it over ``batches``, or None when
    none of them measured any (the keys are the same, or no upstream keyed operator). Should
    the graph have changed within the window, only the latest upstream operator's counts."""
    k = max_parallelism
    codes: list[np.ndarray] = []
    counts: list[np.ndarray] = []
    latest = [m.traffic.get(op_id) for m in batches]
    upstream = next((t.upstream for t in reversed(latest) if t), None)
    rows = local = 0
    wall = 0.0
    for m, t in zip(batches, latest):
        wall += float(m.duration_s)
        if not t or t.upstream != upstream:
            continue
        rows += int(t.rows)
        local += int(t.local_rows)
        pairs = np.asarray(t.pairs, dtype=np.int64).reshape(-1, 3)
        ok = (pairs[:, 0] >= 0) & (pairs[:, 0] < k) & (pairs[:, 1] >= 0) & (pairs[:, 1] < k)
        codes.append(pairs[ok, 0] * k + pairs[ok, 1])
        counts.append(pairs[ok, 2])
    if upstream is None or rows == 0:
        return None
    unique, inverse = np.unique(np.concatenate(codes), return_inverse=True)
    summed = np.bincount(inverse, weights=np.concatenate(counts), minlength=len(unique))
    rate = summed / wall if wall > 0 else summed
    return KeyGroupTraffic(upstream, op_id, Traffic(unique // k, unique % k, rate), rows, local, wall)


def collocation_problem(
    up: KeyGroupStats,
    down: KeyGroupStats,
    traffic: KeyGroupTraffic,
    up_stage: KeyedStagePlan,
    down_stage: KeyedStagePlan,
    tolerance: float = 0.2,
) -> BalancingProblem:
    """ALBIC's input across two keyed stages with the same partition count: units 0..K-1 are
    the upstream operator's key groups, K..2K-1 the downstream one's (``operator`` 0 and 1);
    nodes are partition indexes (partition q of both stages); the traffic goes from an
    upstream unit to a downstream one.

    A node's load is what both stages spend on it, ALBIC's model. In a micro-batch the two
    stages run one after the other, though, so each must stay balanced by itself: each
    stage's load is also a resource capped on every node at (1 + ``tolerance``) times its
    mean, or at its busiest partition now if that is more (no plan makes a stage worse than
    it is). Migration costs are both stages' measured load times, in load points."""
    k = len(up.load)
    n = up_stage.partitions
    if down_stage.partitions != n or len(down.load) != k:
        raise ValueError(
            f"collocation across {up.op_id!r} and {down.op_id!r}: both stages need the same "
            f"partitions and max parallelism, got {up_stage.partitions} and {down_stage.partitions}"
        )
    wall = max(up.wall_s, 1e-9)
    # one cost per byte for the problem: the downstream bytes weighed by its own measured cost
    per_byte = up.load_s_per_byte
    scale = down.load_s_per_byte / per_byte if per_byte > 0 else 1.0
    load = np.concatenate([up.load, down.load])
    resource = np.zeros((2 * k, 2))
    resource[:k, 0], resource[k:, 1] = up.load, down.load
    assignment = np.concatenate([np.asarray(up_stage.routing), np.asarray(down_stage.routing)])
    caps = np.zeros((n, 2))
    for r, (stage_load, routing) in enumerate(((up.load, up_stage.routing), (down.load, down_stage.routing))):
        now = np.bincount(np.asarray(routing), weights=stage_load, minlength=n)
        caps[:, r] = max(float(now.max()), (1 + tolerance) * float(stage_load.sum()) / n)
    t = traffic.traffic
    return BalancingProblem(
        load=load,
        state_bytes=np.concatenate([up.state_bytes, down.state_bytes * scale]),
        assignment=assignment,
        nodes=np.arange(n),
        traffic=Traffic(t.src, t.dst + k, t.rate),
        operator=np.repeat([0, 1], k),
        resource_load=resource,
        resource_cap=caps,
        cost_per_byte=100.0 * per_byte / wall,
    )


def routings_of(plan: BalancePlan, max_parallelism: int) -> tuple[list[int], list[int]]:
    """The upstream and the downstream routing tables a plan of ``collocation_problem`` asks for."""
    table = routing_of(plan)
    return table[:max_parallelism], table[max_parallelism:]
