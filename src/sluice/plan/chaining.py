"""Task chaining as a decision: which consecutive Python operators share one pass, and
where a costly operator gets more cores.

On Spark a chain is one ``mapInArrow`` pass: one Python worker per task runs every operator
of the chain in turn. Spark 4 drives consecutive passes of one task from the task's single
thread (its Python runner is single-threaded), so unfused passes of one task do not run side
by side as Nephele's unchained threads do: measured, two CPU-heavy passes of the same tasks
overlapped 0.003 s in 4.4 s. Splitting a chain pays only with a rebalance exchange before
the later part, which gives it as many tasks as there are cores. That is what this module
weighs: fusing saves a pass (moving every row from the JVM into one more Python worker and
back, ``x`` a row) and an exchange (``e`` a row); a rebalance lets the operators after it use
every core when the run's input has fewer partitions than there are cores.

Nephele (section 3.5.2) chains tasks while their summed CPU stays under one core: here, a
run stays fused while its input already keeps every core busy (``T >= C``) or its work is
too small to pay for an exchange. The cost model, for a run of operators with total work
``W_i`` a batch (seconds summed over tasks), ``N_i`` rows into operator i, ``T`` input
partitions and ``C`` cores:

    fused:               (sum W + N_0 x) / min(T, C)
    rebalanced before k: (sum_{i<k} W_i + [k>0] N_0 x + N_k e/2) / min(T, C)
                         + (N_k e/2 + sum_{i>=k} W_i + N_k x) / C

(the exchange writes in the first stage and reads in the second). More cuts after the first
rebalance only add passes, so a cut is "fused" or "rebalance before operator k".

Pure: no Spark.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sluice.graph import JobGraph


def chainable_runs(graph: JobGraph) -> list[tuple[str, ...]]:
    """Maximal runs of consecutive Python operators that may share one pass.

    An operator joins its upstream's run when the upstream is Python too, feeds only it
    (with a fan-out each branch would recompute the shared part), and neither says
    ``chain=False`` (a user's wish that it runs in a pass of its own: Nephele's annotation
    that protects a materialization point).
    """
    runs: list[list[str]] = []
    run_of: dict[str, list[str]] = {}
    for op in graph.topological_order():
        if not op.is_python:
            continue
        upstream = graph[op.inputs[0]]
        joins = upstream.id in run_of and len(graph.consumers(upstream.id)) == 1 and op.chain and upstream.chain
        if joins:
            run = run_of[upstream.id]
            run.append(op.id)
        else:
            run = [op.id]
            runs.append(run)
        run_of[op.id] = run
    return [tuple(r) for r in runs]


@dataclass(frozen=True)
class RunCosts:
    """Measured costs of one run of chainable operators in one batch."""

    work_s: tuple[float, ...]  # W_i: seconds of operator i, summed over its tasks
    rows: tuple[float, ...]  # N_i: rows into operator i
    tasks: float  # T: partitions of the run's input (before any rebalance)
    cores: int  # C: task slots the job has
    pass_s_per_row: float  # x: one more Python pass, a row
    exchange_s_per_row: float  # e: a rebalance exchange (write and read), a row

    def time(self, rebalance_at: int | None) -> float:
        """Predicted seconds of the run's part of a batch, fused (None) or with a rebalance
        exchange before operator ``rebalance_at`` and the operators from there on fused."""
        first = min(max(self.tasks, 1.0), self.cores)
        if rebalance_at is None:
            return (sum(self.work_s) + self.rows[0] * self.pass_s_per_row) / first
        k = rebalance_at
        if not 0 <= k < len(self.work_s):
            raise ValueError(f"no operator {k} in a run of {len(self.work_s)}")
        half = self.rows[k] * self.exchange_s_per_row / 2
        before = sum(self.work_s[:k]) + (self.rows[0] * self.pass_s_per_row if k > 0 else 0.0) + half
        after = half + sum(self.work_s[k:]) + self.rows[k] * self.pass_s_per_row
        return before / first + after / self.cores


def best_cut(costs: RunCosts) -> tuple[int | None, float]:
    """The cheapest way to run the run: None (fused) or where to rebalance, and its time.
    Fused wins ties: it is the simpler plan."""
    best: int | None = None
    best_time = costs.time(None)
    for k in range(len(costs.work_s)):
        t = costs.time(k)
        if t < best_time - 1e-12:
            best, best_time = k, t
    return best, best_time


def run_layout(run: Sequence[str], chains: Sequence[Sequence[str]], rebalance: dict[str, int]) -> int | None:
    """Where the Plan rebalances ``run`` (the index of the operator after the exchange), or
    None when it runs without one."""
    for i, op in enumerate(run):
        if op in rebalance:
            return i
    return None


def with_layout(
    chains: Sequence[Sequence[str]], rebalance: dict[str, int], run: Sequence[str], at: int | None, partitions: int
) -> tuple[tuple[tuple[str, ...], ...], dict[str, int]]:
    """The Plan's chains and rebalances with ``run`` fused whole (``at`` None) or cut in two
    with a rebalance exchange to ``partitions`` before operator ``at``."""
    members = set(run)
    pieces = [tuple(run)] if at in (None, 0) else [tuple(run[:at]), tuple(run[at:])]
    out: list[tuple[str, ...]] = []
    placed = False
    for chain in chains:
        if chain and chain[0] in members:
            if not placed:
                out.extend(pieces)
                placed = True
            continue
        out.append(tuple(chain))
    moves = {op: n for op, n in rebalance.items() if op not in members}
    if at is not None:
        moves[run[at]] = partitions
    return tuple(out), moves
