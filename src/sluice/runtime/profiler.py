"""Building a performance model by profiling one operator on Spark (Shukla and Simmhan, Algorithm 1).

For thread counts tau = 1, 2, 4, ... the profiler runs the operator alone on one core (one Spark
partition of a ``local[1]`` session, or one partition of any session) at rising input rates, and
records for each tau the peak rate that stays stable with the CPU and memory it used there.

A *trial* (RunTaskTrial, line 10) offers tuples at a constant rate omega for a few seconds to
the operator running with tau worker threads inside one Spark task (see ``_slot_pipeline``);
each tuple's latency is the time from its arrival to the end of its processing. If the operator
keeps up, latency stays flat; if not, the queue grows and latency climbs. The trial is stable
when the slope of latency over time after a warm-up is at most ``max_latency_slope`` (the
paper's lambda_L^max; 0.001 over 12-minute trials there, 0.05 over 4-second trials here) and
little is left queued at the end.

Peak rate per tau (lines 8-15): a quick saturation probe gives a first guess; the rate is then
raised by a factor until a trial is unstable (or lowered until one is stable), and the gap is
halved once geometrically. The paper steps by a fixed Delta_omega from 1; it allows the step to
be "a function of the iteration or the prior performance", and a geometric search costs a few
trials instead of hundreds, which matters on a shared 2-core machine.

Thread stop rule (line 6). The pseudo-code continues while lambda_omega <= lambda_omega^max,
which would stop as soon as the rate *rises*; the text says the opposite: stop once the peak
rate over a trailing window of thread counts is flat or falling (lambda_omega^min ~ -0.001). We
follow the text: we keep doubling tau while the relative gain of the peak rate per doubling,
over the trailing ``window`` of thread counts, exceeds ``min_gain`` (default 10 %, the
resolution of the rate search, so noise does not count as a rise). ``tests/plan/test_profiler.py``
pins this choice.

Workers load operators by file path (``examples/operators/pi.py:Pi``), so no package needs to
be importable in Spark's Python workers except ``sluice`` itself.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sluice.errors import ConfigError
from sluice.models.performance import ModelPoint, PerformanceModel

# ---- operators -------------------------------------------------------------------------------


@dataclass(frozen=True)
class OperatorSpec:
    """Where an operator class lives and how to build it: ``path.py:Class`` plus keyword args."""

    path: str
    cls: str
    kwargs: tuple[tuple[str, object], ...] = ()

    @classmethod
    def parse(cls, text: str, kwargs: dict | None = None) -> OperatorSpec:
        path, sep, name = text.rpartition(":")
        if not sep or not path.endswith(".py") or not name:
            raise ConfigError(f"operator {text!r}: expected FILE.py:ClassName")
        if not Path(path).exists():
            raise ConfigError(f"operator {text!r}: file {path!r} does not exist")
        return cls(str(Path(path).resolve()), name, tuple(sorted((kwargs or {}).items())))

    @property
    def label(self) -> str:
        return f"{Path(self.path).stem}:{self.cls}"

    def build(self):
        spec = importlib.util.spec_from_file_location(f"sluice_op_{Path(self.path).stem}", self.path)
        if spec is None or spec.loader is None:
            raise ConfigError(f"cannot import operator file {self.path!r}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        try:
            factory = getattr(module, self.cls)
        except AttributeError:
            raise ConfigError(f"{self.path!r} has no operator class {self.cls!r}") from None
        return factory(**dict(self.kwargs))


# Worker-side cache: one operator instance per spec and process, so the operator's setup
# (connections, documents) outlives a single trial.
_OPERATORS: dict[OperatorSpec, object] = {}
_CACHE_LOCK = threading.Lock()


def _operator(spec: OperatorSpec):
    with _CACHE_LOCK:
        op = _OPERATORS.get(spec)
        if op is None:
            op = spec.build()
            op.setup()
            _OPERATORS[spec] = op
        return op


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# ---- one slot: a long-running Spark task running groups of worker threads ----------------------
#
# A Spark job per micro-batch costs 0.1-0.5 s of scheduling on this (shared, 2-core) machine,
# which would swamp the rates of fast operators. So a trial runs as ONE long-lived Spark task
# per slot, the way Spark's continuous processing runs long-lived tasks. The task hosts one or
# more *groups*: k worker threads of one operator, fed by their own source thread at the group's
# share of the trial's rate, taking chunks of tuples from a queue and recording each chunk's
# latency (completion minus arrival). One group is the paper's trial topology (source, task,
# sink; Sec. 5.1) on one core; several groups are its picture of a slot hosting threads of
# several tasks at once, each receiving what the mapping routes to it.

_CHUNK = 64  # tuples per queue item at most: a worker thread takes one chunk at a time
_TICK = 0.005  # a source emits what arrived every 5 ms
_IDLE_RSS: list[int] = []

Group = tuple[OperatorSpec, int, float]  # (operator, threads, share of the trial's rate)


def _slot_pipeline(groups: Sequence[Group], rate: float | None, duration: float, warmup: float) -> dict:
    """Run ``groups`` on this process for ``duration`` s, group g fed at ``rate * share_g``
    tuples/s (``rate=None``: as fast as the threads go). Returns tuples offered and processed,
    the worst latency slope over groups, CPU seconds of the process and its RSS."""
    import queue

    if not _IDLE_RSS:
        _IDLE_RSS.append(_rss_bytes())
    ops = [_operator(spec) for spec, _, _ in groups]
    queues: list[queue.Queue] = [queue.Queue() for _ in groups]
    stop = threading.Event()
    t0 = time.monotonic()
    deadline = t0 + duration
    samples: list[tuple[list[float], list[float]]] = [([], []) for _ in groups]
    counts = {"offered": 0, "processed": 0}
    lock = threading.Lock()

    def source(g: int) -> None:
        q, threads, share = queues[g], groups[g][1], groups[g][2]
        next_id = 0
        while not stop.is_set():
            now = time.monotonic()
            if now >= deadline:
                break
            if rate is None:  # saturate: keep enough work queued
                if q.qsize() < 4 * threads:
                    for _ in range(8):
                        q.put((now, list(range(next_id, next_id + _CHUNK))))
                        next_id += _CHUNK
                else:
                    time.sleep(0.001)
                continue
            group_rate = rate * share
            arrived = int((now - t0) * group_rate)
            while next_id < arrived:
                hi = min(arrived, next_id + _CHUNK)
                # arrival time of the chunk: when its middle tuple arrived
                q.put((t0 + (next_id + hi - 1) / 2.0 / group_rate, list(range(next_id, hi))))
                next_id = hi
            time.sleep(_TICK)
        with lock:
            counts["offered"] += next_id

    def worker(g: int) -> None:
        op, q = ops[g], queues[g]
        times, lats = samples[g]
        while not stop.is_set():
            try:
                arrival, keys = q.get(timeout=0.05)
            except queue.Empty:
                continue
            for k in keys:
                op.process(k)
            done = time.monotonic()
            if done > deadline:
                break
            with lock:
                counts["processed"] += len(keys)
                times.append(arrival - t0)
                lats.append(done - arrival)

    threads = []
    for g, (_, n, share) in enumerate(groups):
        if rate is not None and share <= 0:
            continue
        threads.append(threading.Thread(target=source, args=(g,), daemon=True))
        threads += [threading.Thread(target=worker, args=(g,), daemon=True) for _ in range(n)]
    cpu0 = time.process_time()
    for t in threads:
        t.start()
    time.sleep(max(0.0, deadline - time.monotonic()))
    stop.set()
    cpu = time.process_time() - cpu0
    rss = _rss_bytes()
    for t in threads:
        t.join(timeout=5)
    active = [g for g, grp in enumerate(groups) if rate is None or grp[2] > 0]
    slopes = [latency_slope(*samples[g], warmup) for g in active] if rate is not None else [0.0]
    all_lats = [x for g in active for x in samples[g][1]]
    return {
        "offered": counts["offered"],
        "processed": counts["processed"],
        "cpu": cpu,
        "rss": rss,
        "idle_rss": _IDLE_RSS[0],
        "slope": max(slopes, default=0.0),
        "latency": float(np.median(all_lats)) if all_lats else math.inf,
        "backlog": sum(len(k) for q in queues for _, k in list(q.queue)),
    }


def slot_task(slots: Sequence[Sequence[Group]], rate: float | None, duration: float, warmup: float):
    """The ``mapInArrow`` function: partition p runs the groups of slot p."""

    def run(batches):
        import pyarrow as pa
        from pyspark import TaskContext

        for _ in batches:
            pass
        ctx = TaskContext.get()
        part = ctx.partitionId() if ctx else 0
        out = _slot_pipeline(slots[part], rate, duration, warmup)
        out["slot"] = part
        yield pa.RecordBatch.from_pylist([out])

    return run


# ---- trials ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrialResult:
    rate: float
    stable: bool
    latency_slope: float
    cpu: float  # fraction of one core, summed over the slots' worker processes
    memory: float  # fraction of one slot's memory above the idle worker, summed over slots
    processed: int
    offered: int
    median_latency: float = 0.0
    slot_cpu: tuple[float, ...] = ()  # fraction of a core used by each slot's process


def latency_slope(times: Sequence[float], latencies: Sequence[float], warmup: float) -> float:
    """Slope (seconds of latency per second) of latency over time after ``warmup`` seconds.

    Fewer than three samples after the warm-up cannot show a trend; a trial that completed so
    little fell behind its input, so it counts as rising (infinite slope).
    """
    t = np.asarray(times, dtype=float)
    lat = np.asarray(latencies, dtype=float)
    keep = t >= warmup
    if keep.sum() < 3:
        return math.inf
    return float(np.polyfit(t[keep], lat[keep], 1)[0])


@dataclass
class SparkSlotRunner:
    """Runs trials of a mapping on Spark: slot p (one Spark partition, one core) hosts groups of
    (operator, threads, share of the rate). The profiler uses one slot with one group."""

    spark: Any  # a SparkSession (the profiler's pure parts never import pyspark)
    slots: Sequence[Sequence[Group]]
    slot_memory_bytes: int = 1 << 30
    max_latency_slope: float = 0.05
    warmup_fraction: float = 0.3

    def _run(self, rate: float | None, duration: float) -> list[dict]:
        n = len(self.slots)
        fn = slot_task(self.slots, rate, duration, self.warmup_fraction * duration)
        schema = (
            "offered long, processed long, cpu double, rss long, idle_rss long, "
            "slope double, latency double, backlog long, slot long"
        )
        rows = self.spark.range(0, n, 1, numPartitions=n).mapInArrow(fn, schema).collect()
        return sorted((r.asDict() for r in rows), key=lambda r: r["slot"])

    def probe(self, duration: float = 1.0) -> float:
        """Saturated throughput (tuples/s): a first guess of the peak rate."""
        rows = self._run(None, duration)
        return sum(r["processed"] for r in rows) / duration

    def trial(self, rate: float, duration: float = 4.0) -> TrialResult:
        """RunTaskTrial: offer ``rate`` for ``duration`` s; stable if latency does not climb."""
        rows = self._run(rate, duration)
        slope = max(r["slope"] for r in rows)
        backlog = sum(r["backlog"] for r in rows)
        stable = slope <= self.max_latency_slope and backlog <= max(0.25 * rate, 2 * _CHUNK)
        return TrialResult(
            rate=rate,
            stable=bool(stable),
            latency_slope=slope,
            cpu=sum(r["cpu"] for r in rows) / duration,
            memory=sum(max(r["rss"] - r["idle_rss"], 0) for r in rows) / self.slot_memory_bytes,
            processed=sum(r["processed"] for r in rows),
            offered=sum(r["offered"] for r in rows),
            median_latency=float(np.median([r["latency"] for r in rows])),
            slot_cpu=tuple(r["cpu"] / duration for r in rows),
        )


# ---- Algorithm 1 -----------------------------------------------------------------------------


def find_peak_rate(
    trial: Callable[[float], TrialResult],
    guess: float,
    *,
    step: float = 1.25,
    max_trials: int = 8,
    min_rate: float = 0.1,
) -> TrialResult | None:
    """Lines 8-15 for one thread count: the highest stable rate near ``guess`` (None if even
    ``min_rate`` is unstable). Raise by ``step`` until unstable, or lower until stable, then
    try once between the last stable and the first unstable rate."""
    rate = max(guess, min_rate)
    first = trial(rate)
    trials = 1
    best: TrialResult | None = first if first.stable else None
    failed: float | None = None if first.stable else rate
    if first.stable:
        while trials < max_trials:
            rate *= step
            res = trial(rate)
            trials += 1
            if not res.stable:
                failed = rate
                break
            best = res
    else:
        while trials < max_trials and rate > min_rate:
            rate = max(rate / step, min_rate)
            res = trial(rate)
            trials += 1
            if res.stable:
                best = res
                break
            failed = rate
    if best is not None and failed is not None and trials < max_trials:
        mid = math.sqrt(best.rate * failed)
        res = trial(mid)
        if res.stable:
            best = res
    return best


def bisect_peak_rate(trial: Callable[[float], TrialResult], low: float, high: float, *, steps: int = 5) -> TrialResult | None:
    """The highest stable rate in [low, high] by geometric bisection: ``steps`` trials, each
    halving the bracket's log-width, whatever the starting guess (so a measurement is not
    anchored at a prediction). If nothing in the bracket was stable, ``low`` itself is tried
    and, while unstable, lowered by the bracket's ratio a few times."""
    best: TrialResult | None = None
    for _ in range(steps):
        mid = math.sqrt(low * high)
        res = trial(mid)
        if res.stable:
            best, low = res, mid
        else:
            high = mid
    tries = 0
    while best is None and tries < 3:
        res = trial(low)
        if res.stable:
            return res
        low /= 2.0
        tries += 1
    return best


def keep_adding_threads(peaks: Sequence[float], window: int = 1, min_gain: float = 0.10) -> bool:
    """The thread stop rule (line 6, as the text states it): go on while the peak rate still
    rises by more than ``min_gain`` (relative) per step over the trailing ``window`` steps."""
    if len(peaks) < 2:
        return True
    recent = peaks[-(window + 1) :]
    gains = [(b - a) / a if a > 0 else math.inf for a, b in itertools.pairwise(recent)]
    return max(gains) > min_gain


def profile_operator(
    name: str,
    trial_for_threads: Callable[[int], Callable[[float], TrialResult]],
    probe_for_threads: Callable[[int], float],
    *,
    thread_counts: Sequence[int] = (1, 2, 4, 8, 16, 32, 64),
    window: int = 1,
    min_gain: float = 0.10,
    description: str = "",
    source: str = "",
    progress: Callable[[str], None] | None = None,
) -> PerformanceModel:
    """Algorithm 1: for rising thread counts, find the peak stable rate and its CPU and memory;
    stop when the rate stops rising (see :func:`keep_adding_threads`) or at the last count."""
    points: list[ModelPoint] = []
    peaks: list[float] = []
    raw: list[dict] = []
    for tau in thread_counts:
        if not keep_adding_threads(peaks, window, min_gain):
            break
        guess = probe_for_threads(tau)
        if peaks:  # the previous peak is a better guess when the probe is noisy
            guess = max(guess * 0.8, min(guess, peaks[-1]))
        best = find_peak_rate(trial_for_threads(tau), 0.8 * guess)
        if best is None:
            if progress:
                progress(f"{name}: no stable rate with {tau} threads; stopping")
            break
        peaks.append(best.rate)
        points.append(ModelPoint(tau, best.rate, min(best.cpu, 1.0), min(best.memory, 1.0)))
        raw.append(
            {
                "threads": tau,
                "rate": best.rate,
                "cpu": best.cpu,
                "memory": best.memory,
                "latency_slope": best.latency_slope,
                "probe": guess,
            }
        )
        if progress:
            progress(f"{name}: {tau} threads -> {best.rate:.1f} t/s, cpu {best.cpu:.0%}, memory {best.memory:.1%}")
    if not points:
        raise ConfigError(f"profiling {name!r} found no stable rate even with 1 thread")
    return PerformanceModel(name, tuple(points), description=description, source=source, meta={"trials": raw})


def profile_on_spark(
    spark,
    spec: OperatorSpec,
    name: str | None = None,
    *,
    thread_counts: Sequence[int] = (1, 2, 4, 8, 16, 32, 64),
    duration: float = 4.0,
    slot_memory_bytes: int = 1 << 30,
    max_latency_slope: float = 0.05,
    progress: Callable[[str], None] | None = None,
) -> PerformanceModel:
    """Profile ``spec`` alone on one partition (one core) of ``spark``."""

    def runner(tau: int) -> SparkSlotRunner:
        return SparkSlotRunner(
            spark, [[(spec, tau, 1.0)]], slot_memory_bytes=slot_memory_bytes, max_latency_slope=max_latency_slope
        )

    return profile_operator(
        name or Path(spec.path).stem,
        lambda tau: lambda rate: runner(tau).trial(rate, duration),
        lambda tau: runner(tau).probe(),
        thread_counts=thread_counts,
        description=f"profiled {spec.label} on one core of Spark {spark.sparkContext.master}",
        source=f"sluice profile: trials of {duration:g} s, latency slope <= {max_latency_slope:g}, "
        f"slot memory {slot_memory_bytes / 2**20:.0f} MiB",
        progress=progress,
    )


# ---- running in a separate process (local[1]) ---------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sluice.runtime.profiler FILE.py:Class --out model.json``: profile on local[1]."""
    p = argparse.ArgumentParser(prog="sluice-profiler")
    p.add_argument("operator", help="FILE.py:ClassName")
    p.add_argument("--kwargs", default="{}", help="JSON keyword arguments for the operator")
    p.add_argument("--name", default=None)
    p.add_argument("--out", required=True)
    p.add_argument("--threads", default="1,2,4,8,16,32,64")
    p.add_argument("--duration", type=float, default=4.0)
    p.add_argument("--slot-memory-mb", type=float, default=1024)
    p.add_argument("--master", default="local[1]")
    args = p.parse_args(argv)
    spec = OperatorSpec.parse(args.operator, json.loads(args.kwargs))
    from sluice.runtime.session import spark_session

    spark = spark_session(master=args.master, app_name="sluice-profile")
    try:
        model = profile_on_spark(
            spark,
            spec,
            args.name,
            thread_counts=[int(x) for x in args.threads.split(",")],
            duration=args.duration,
            slot_memory_bytes=int(args.slot_memory_mb * 2**20),
            progress=lambda msg: print(msg, flush=True),
        )
    finally:
        spark.stop()
    model.save(args.out)
    print(f"wrote {args.out}", flush=True)
    return 0


if __name__ == "__main__":  # pragma: no cover
    # Run the *imported* module's main: functions shipped to Spark workers must belong to an
    # importable module (sluice.runtime.profiler), not to __main__, or cloudpickle copies them
    # by value with this module's globals (locks included).
    from sluice.runtime.profiler import main as _main

    sys.exit(_main())
