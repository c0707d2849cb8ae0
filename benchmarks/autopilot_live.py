"""The autopilot's scenario LIVE: a standalone cluster of ``WORKERS`` workers x 1 core (the
pyspark wheel's master and workers, ``runtime.cluster.LocalCluster``), run by
``benchmarks/autopilot.py --live``.

One job: a generator (Zipf keys, event time equal to arrival time) whose rate follows the
compressed day (``LiveTrace``), a Python step, then a running count per key and tumbling
windows of ``WINDOW_S`` counting every row. The Python step waits ``WORK_S`` a row: this
machine has 2 cores, so CPU work could not grow past two executors; a waiting task holds a
task slot (an executor core), not a CPU, so 1 to ``WORKERS`` executors give 1 to ``WORKERS``
times the capacity (as ``rescaling.py`` does). The same step moves the hot keys at the
trace's shift: from then on key k is counted as ``(k + KEYS // 2) % KEYS``.

The day: the base rate, a ramp (in steps) to 8x, the peak (hot-key shift a third into it,
one executor SIGKILLed two thirds into it), a fall back to the base rate, an outage (the
job's driver stops; the input keeps arriving) and the base rate again. The outage is a real
stop and restart of the job on the same checkpoint. Pure parts (the trace, the figures, the
reference) are tested without Spark in tests/benchmarking/test_autopilot_live.py.
"""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from dataclasses import dataclass

import numpy as np

WORKERS = 4
WORK_S = 2e-3  # seconds of waiting a row: one executor (one core) does about 500 rows/s
BASE = 150.0  # rows/s; the peak, 8x, needs ceil(1200 * WORK_S / 0.7) = 4 executors
PEAK = 8 * BASE
KEYS, ZIPF_S = 512, 0.8
WINDOW_S = 5.0
BOUND_S = 5.0  # the goal: p95 latency <= 5 s
RAMP_STEPS = 6
TARGET_UTILIZATION = 0.7


@dataclass(frozen=True)
class LiveTrace:
    """The compressed day in seconds from the input's start (``day_s`` long, the outage
    inside it); phases at the same fractions as the simulated ``autopilot.Trace``."""

    day_s: float
    outage_s: float = 60.0

    @property
    def base_until(self) -> float:
        return 0.1 * self.day_s

    @property
    def ramp_until(self) -> float:
        return 0.3 * self.day_s

    @property
    def peak_until(self) -> float:
        return 0.5 * self.day_s

    @property
    def fall_until(self) -> float:
        return 0.667 * self.day_s

    @property
    def shift_at(self) -> float:
        return self.ramp_until + (self.peak_until - self.ramp_until) / 3

    @property
    def kill_at(self) -> float:
        return self.ramp_until + 2 * (self.peak_until - self.ramp_until) / 3

    @property
    def outage(self) -> tuple[float, float]:
        start = 0.767 * self.day_s
        return start, start + self.outage_s

    def __post_init__(self) -> None:
        if self.outage[1] >= self.day_s:
            raise ValueError(f"LiveTrace: the outage ({self.outage_s} s) must end before the day ({self.day_s} s) does")

    def steps(self) -> list[tuple[float, float]]:
        """(seconds from the start, rows/s): a ``RateSchedule``'s steps (ramps in steps)."""
        out = [(0.0, BASE)]
        ramp = self.ramp_until - self.base_until
        for i in range(RAMP_STEPS):
            out.append((self.base_until + i * ramp / RAMP_STEPS, BASE + (PEAK - BASE) * (i + 1) / RAMP_STEPS))
        fall = self.fall_until - self.peak_until
        for i in range(RAMP_STEPS):
            out.append((self.peak_until + i * fall / RAMP_STEPS, PEAK - (PEAK - BASE) * (i + 1) / RAMP_STEPS))
        return out

    def rate(self, t: float) -> float:
        steps = self.steps()
        return next(r for s, r in reversed(steps) if t >= s)

    def arrived(self, t: float) -> float:
        """Rows arrived by ``t`` seconds from the start."""
        steps = self.steps() + [(math.inf, 0.0)]
        return sum(r * max(0.0, min(t, e) - s) for (s, r), (e, _) in zip(steps, steps[1:]))

    def mean_rate(self) -> float:
        return self.arrived(self.day_s) / self.day_s


def executors_for_rate(rate: float) -> int:
    return min(WORKERS, max(1, math.ceil(rate * WORK_S / TARGET_UTILIZATION)))


def shifted_keys(keys: np.ndarray, ts_s: np.ndarray, shift_epoch_s: float) -> np.ndarray:
    """The hot-key shift: rows at or after the shift count under key (k + KEYS // 2) % KEYS."""
    return np.where(ts_s >= shift_epoch_s, (keys + KEYS // 2) % KEYS, keys)


@dataclass(frozen=True)
class Batch:
    """One committed batch, times in seconds from the input's start."""

    start: float
    end: float
    p95_s: float
    rows: int
    backlog: int  # rows waiting at the sources when it started


def figures(batches: list[Batch], trace: LiveTrace, executor_seconds: float, reconfigurations: int) -> dict:
    """The scenario's measures for one run. Time is split at the batches' ends: the stretch
    up to a batch's end counts as within the goal when that batch's p95 is (the outage's gap
    falls on the first batch after it, whose rows waited through it)."""
    batches = sorted((b for b in batches if b.end > 0), key=lambda b: b.end)
    if not batches:
        raise ValueError("figures: no batch ended after the input started")
    ends = np.array([min(b.end, trace.day_s) for b in batches])
    spans = np.diff(np.concatenate([[0.0], ends])).clip(min=0)
    within = np.array([b.p95_s <= BOUND_S for b in batches])
    attainment = float((spans * within).sum() / max(spans.sum(), 1e-9))
    recover = None
    after_kill = [i for i, b in enumerate(batches) if b.start >= trace.kill_at]
    for i in after_kill:
        if i + 3 <= len(batches) and within[i : i + 3].all():
            recover = round(batches[i].end - trace.kill_at, 1)
            break
    drained = None
    for b in batches:
        if b.start >= trace.outage[1] and b.backlog <= BOUND_S * BASE:
            drained = round(b.start - trace.outage[1], 1)
            break
    return {
        "attainment": round(attainment, 4),
        "worst_p95_s": round(max(b.p95_s for b in batches), 2),
        "executor_seconds": round(executor_seconds, 1),
        "reconfigurations": reconfigurations,
        "recover_kill_s": recover,
        "drain_outage_s": drained,
        "batches": len(batches),
    }


def reference(keys: np.ndarray, ts_s: np.ndarray, shift_epoch_s: float) -> tuple[dict[int, int], dict[float, int]]:
    """A batch computation of the same input: the final count per (shifted) key and the
    row count per tumbling window (by window start, epoch seconds)."""
    shifted = shifted_keys(keys, ts_s, shift_epoch_s)
    per_key = {int(k): int(n) for k, n in zip(*np.unique(shifted, return_counts=True))}
    starts = np.floor(ts_s / WINDOW_S) * WINDOW_S
    per_window = {float(s): int(n) for s, n in zip(*np.unique(starts, return_counts=True))}
    return per_key, per_window


def outputs_match(latest: dict[int, int], windows: dict[float, int], ref_keys: dict, ref_windows: dict) -> dict:
    """The job's outputs against the reference: every key's final count, and every window
    the job emitted (a window is emitted once the watermark passes it: those still open at
    the end are not compared; every reference window before the last emitted one must be
    there)."""
    keys_equal = latest == ref_keys
    last = max(windows, default=-math.inf)
    expected = {s: n for s, n in ref_windows.items() if s <= last}
    windows_equal = windows == expected
    return {
        "keys_equal": keys_equal,
        "windows_equal": windows_equal,
        "windows_compared": len(expected),
        "keys_compared": len(ref_keys),
        "equal": keys_equal and windows_equal,
    }


def executor_seconds(samples: list[tuple[float, int]], until: float) -> float:
    """Executors held over time, from (seconds, executors held) samples, up to ``until``."""
    total = 0.0
    for (t, n), (t2, _) in zip(samples, samples[1:] + [(until, 0)]):
        total += n * max(0.0, min(t2, until) - t)
    return total


def reconfiguration_count(decisions: list[dict]) -> int:
    """Structural decisions (not admission, not escalation), one per batch decided at."""
    return len({d["batch_id"] for d in decisions if d["action"]["kind"] not in ("admission", "escalate")})


# ---- live ------------------------------------------------------------------------------


def pipeline(trace: LiveTrace, start: float, latest: dict, windows: dict):
    import pyarrow as pa

    import sluice
    from sluice import agg, sinks, sources
    from sluice import windows as W
    from sluice.graph.rates import RateSchedule

    shift_epoch = start + trace.shift_at
    work_s = WORK_S

    def work(batch: pa.RecordBatch) -> pa.RecordBatch:
        time.sleep(work_s * batch.num_rows)  # a call to a service elsewhere: waiting, not CPU
        ts = batch.column("ts").cast(pa.int64()).to_numpy() / 1e6
        k = shifted_keys(batch.column("k").to_numpy(), ts, shift_epoch)
        return pa.RecordBatch.from_arrays([pa.array(k), batch.column("ts")], names=["k", "ts"])

    def keep_latest(batch_id, table):
        for row in table.to_pylist():
            latest[row["k"]] = row["n"]

    def keep_windows(batch_id, table):
        for row in table.to_pylist():
            start_s = row["window_start"].timestamp()
            windows[start_s] = windows.get(start_s, 0) + row["n"]

    p = sluice.Pipeline("autopilot_live", partitions=1, max_parallelism=64)
    s = p.source(
        sources.generator(
            fields={"k": sources.Keys(KEYS, distribution="zipf", skew=ZIPF_S), "ts": sources.EventTime()},
            rate=RateSchedule(tuple(trace.steps())),
            start_time=start,
            seed=11,
        ),
        name="events",
    )
    worked = s.map_batches(work, schema={"k": "int", "ts": "timestamp"}, name="work")
    worked.key_by("k").aggregate(n=agg.count(), name="counts").sink(sinks.callback(keep_latest), name="counts_out")
    worked.window(W.tumbling(f"{WINDOW_S}s")).aggregate(n=agg.count(), name="windows").sink(
        sinks.callback(keep_windows), name="windows_out"
    )
    p.goals(latency=f"{BOUND_S}s", max_executors=WORKERS)
    return p


class Held(threading.Thread):
    """Every second: the executors the pool holds."""

    def __init__(self, pool, t0: float):
        super().__init__(daemon=True)
        self.pool, self.t0 = pool, t0
        self.samples: list[tuple[float, int]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(1.0):
            try:
                self.samples.append((time.time() - self.t0, self.pool.held().count))
            except Exception:  # the session is between runs
                continue


def kill_at(cluster, when: float, killed: dict) -> threading.Thread:
    """SIGKILL one executor at epoch ``when``."""

    def go() -> None:
        time.sleep(max(0.0, when - time.time()))
        pids = cluster.executor_pids()
        if pids:
            os.kill(pids[0], signal.SIGKILL)
            killed["pid"], killed["at"] = pids[0], time.time()

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread


def run_sluice(spark, pool, cluster, trace: LiveTrace, workdir: str, name: str, executors: int, policies, lead_s: float) -> dict:
    """One configuration: the day in two runs of the job on one checkpoint (the outage
    between them), an executor killed at the peak, executors sampled every second."""
    from sluice.control import read_decisions
    from sluice.job import RunOptions
    from sluice.job.run import run_pipeline
    from sluice.runtime.batch import metrics as metrics_log
    from sluice.runtime.warmup import start_python_workers

    checkpoint = os.path.join(workdir, name)
    pool.set_total(executors, wait_s=120)
    start_python_workers(spark, tasks=2).result()
    latest: dict = {}
    windows: dict = {}
    t0 = time.time() + lead_s
    p = pipeline(trace, t0, latest, windows)
    fixed = policies is None
    held = Held(pool, t0)
    held.start()
    killed: dict = {}
    killer = kill_at(cluster, t0 + trace.kill_at, killed)
    common = dict(
        spark=spark, policies=[] if fixed else policies, executors=executors, max_executors=executors if fixed else WORKERS
    )
    run_pipeline(p, checkpoint, RunOptions(duration=t0 + trace.outage[0] - time.time(), **common))
    time.sleep(max(0.0, t0 + trace.outage[1] - time.time()))  # the outage: no driver, the input keeps arriving
    run_pipeline(p, checkpoint, RunOptions(duration=t0 + trace.day_s - time.time(), **common))
    held.stop.set()
    killer.join(timeout=1)
    metrics = [m for m in metrics_log.read(checkpoint) if not m.skipped]
    batches = []
    for m in metrics:
        if not m.rows_in:
            continue
        goal = (m.paths.get("goal_latency") or {}).get("p95_ms")
        p95 = goal if goal is not None else m.latency_ms().get("p95", 0.0)
        backlog = sum(v or 0 for v in m.backlog.values())
        batches.append(Batch(m.started_at - t0, m.started_at + m.duration_s - t0, p95 / 1000, m.rows_in, backlog))
    decisions = [d for d in read_decisions(checkpoint) if d["type"] == "decision"]
    out = figures(batches, trace, executor_seconds(held.samples, trace.day_s), reconfiguration_count(decisions))
    admitted = sum(m.rows_in for m in metrics)
    spec = p.graph.sources()[0].connector
    data = spec.generate(0, admitted, int(t0 * 1e6))
    import pyarrow as pa

    table = pa.Table.from_batches(data)
    ts = table.column("ts").cast(pa.int64()).to_numpy() / 1e6
    ref_keys, ref_windows = reference(table.column("k").to_numpy(), ts, t0 + trace.shift_at)
    out["outputs"] = outputs_match(latest, windows, ref_keys, ref_windows)
    out["rows"] = admitted
    out["start_executors"] = executors
    out["killed"] = bool(killed)
    return out
