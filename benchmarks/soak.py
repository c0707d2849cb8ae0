"""Soak: the chaos job at a steady rate for an hour, undisturbed; does anything grow?

    .venv/bin/python benchmarks/soak.py [--seconds 3600] [--rate 2000] [--kafka HOST:PORT]

The job is ``chaos.py``'s (a running count per key, a tumbling window per key to files and
to a Kafka topic, a windowed join; 10,000 keys), fed by its generator at ``--rate`` rows a
second for ``--seconds``. Every ``--sample-s`` seconds the parent samples:

- the resident memory of the job's processes: the Python driver, Spark's JVM and the Python
  workers (every process of the job's session, from ``/proc``);
- the size of the checkpoint directory (Sluice's records and state, and Spark's logs);
- the batches committed since the last sample, with their durations (``metrics.jsonl``).

After a warm-up (the first tenth of the run, at least a minute: the JVM's heap and the
state reach their working size), it fits a line to each series and reports its slope per
hour, absolute and relative to the series' mean. A job that leaks shows a slope that is a
large share of its mean, in the run's second half as much as after the warm-up; a flat one
shows a slope within its noise. At the end every output is checked against the sources'
rows, as ``chaos.py`` checks it: lost and duplicated must be 0.

Prints one JSON line (``slopes``, ``lost``, ``duplicated``) and writes docs/results/soak.json
and a plot, docs/results/soak.png. ``chaos.py`` in full mode runs the same soak.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from measure import Anchor, Record

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"
PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass
class Sample:
    """One look at the running job."""

    t_s: float  # since launch
    driver_mb: float
    jvm_mb: float
    workers_mb: float
    python_workers: int
    checkpoint_mb: float
    load_1m: float  # the machine's load average: other work on it shows here


@dataclass
class Series:
    samples: list[Sample] = field(default_factory=list)
    batches: list[tuple[float, float]] = field(default_factory=list)  # (started, s since launch; duration s)


def session_memory(session: int) -> tuple[float, float, float, int]:
    """Resident MB of the driver (the session's leader), the JVM(s) and the other processes
    of the session (Spark's Python workers), and how many of those there are."""
    driver = jvm = workers = 0.0
    count = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[3]) != session:  # state, ppid, pgrp, session
                continue
            with open(f"/proc/{pid}/statm") as f:
                mb = int(f.read().split()[1]) * PAGE / 2**20
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                program = os.path.basename(f.read().split(b"\0", 1)[0].decode(errors="replace"))
        except (OSError, IndexError, ValueError):  # gone between the listing and the read
            continue
        if pid == session:
            driver += mb
        elif program == "java":
            jvm += mb
        else:
            workers += mb
            count += 1
    return driver, jvm, workers, count


def directory_mb(path: str) -> float:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # removed by retention meanwhile
                total += os.lstat(os.path.join(root, name)).st_size
    return total / 2**20


class MetricsTail:
    """New batches of a growing ``metrics.jsonl`` since the last read. Retention may rewrite
    the file shorter: then it is read again from the start, batches already seen skipped."""

    def __init__(self, path: str):
        self.path, self.offset, self.seen = path, 0, set()

    def new(self) -> list[dict]:
        try:
            size = os.path.getsize(self.path)
        except OSError:
            return []
        if size < self.offset:
            self.offset = 0
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            chunk = f.read(size - self.offset)
        whole = chunk.rfind(b"\n") + 1  # a line being appended is read next time
        self.offset += whole
        found = []
        for line in chunk[:whole].splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("batch_id") not in self.seen and "duration_s" in record:
                self.seen.add(record["batch_id"])
                found.append(record)
        return found


def slope(points: list[tuple[float, float]]) -> dict:
    """The fitted line's slope per hour, the series' mean and the slope as a share of it."""
    import numpy as np

    if len(points) < 3:
        return {"per_hour": None, "mean": None, "relative_per_hour": None, "points": len(points)}
    t = np.array([p[0] for p in points]) / 3600.0
    y = np.array([p[1] for p in points])
    per_hour = float(np.polyfit(t, y, 1)[0])
    mean = float(y.mean())
    return {
        "per_hour": round(per_hour, 4),
        "mean": round(mean, 4),
        "relative_per_hour": round(per_hour / mean, 4) if mean else None,
        "points": len(points),
    }


def slopes(series: Series, warmup_s: float) -> dict:
    after = [s for s in series.samples if s.t_s >= warmup_s]
    return {
        "driver_rss_mb": slope([(s.t_s, s.driver_mb) for s in after]),
        "jvm_rss_mb": slope([(s.t_s, s.jvm_mb) for s in after]),
        "python_workers_rss_mb": slope([(s.t_s, s.workers_mb) for s in after]),
        "checkpoint_mb": slope([(s.t_s, s.checkpoint_mb) for s in after]),
        "batch_s": slope([(t, d) for t, d in series.batches if t >= warmup_s]),
    }


def watch(proc, checkpoint: str, launched: float, sample_s: float, seconds: float) -> Series:
    """Sample the job until it ends (or until twice its input's duration: then it is stuck)."""
    series = Series()
    tail = MetricsTail(os.path.join(checkpoint, "metrics.jsonl"))
    last_report = 0.0
    while proc.poll() is None:
        now = time.time() - launched
        if now > 2 * seconds + 300:
            raise SystemExit(f"soak: the job still runs {now:.0f} s after launch for {seconds:.0f} s of input")
        driver, jvm, workers, count = session_memory(proc.pid)
        series.samples.append(
            Sample(
                round(now, 1),
                round(driver, 1),
                round(jvm, 1),
                round(workers, 1),
                count,
                round(directory_mb(checkpoint), 2),
                os.getloadavg()[0],
            )
        )
        for record in tail.new():
            series.batches.append((round(record["started_at"] - launched, 2), round(record["duration_s"], 3)))
        if now - last_report >= 300:
            last_report = now
            s = series.samples[-1]
            print(
                f"  {now / 60:5.1f} min: driver {s.driver_mb:.0f} MB, JVM {s.jvm_mb:.0f} MB, "
                f"{s.python_workers} Python workers {s.workers_mb:.0f} MB, checkpoint {s.checkpoint_mb:.1f} MB, "
                f"{len(series.batches)} batches",
                flush=True,
            )
        time.sleep(sample_s)
    for record in tail.new():
        series.batches.append((round(record["started_at"] - launched, 2), round(record["duration_s"], 3)))
    return series


def run(seconds: float, rate: float = 2_000, kafka: str = "127.0.0.1:9092", sample_s: float = 10.0) -> dict:
    """Run the soak; the figures (slopes, outputs checked) and the series."""
    import chaos

    args = argparse.Namespace(
        rate=rate,
        total_rows=int(rate * seconds),
        rows_per_batch=50_000,
        kafka=kafka,
        topic=f"sluice_soak_{uuid.uuid4().hex[:10]}",
    )
    chaos.make_topic(kafka, args.topic)
    workdir = tempfile.mkdtemp(prefix="sluice-soak-")
    checkpoint = os.path.join(workdir, chaos.SYSTEM, "checkpoint")
    print(
        f"soak: the chaos job at {rate:,.0f} rows/s for {seconds:,.0f} s ({args.total_rows:,} rows); work in {workdir}",
        flush=True,
    )
    launched = time.time()
    proc = chaos.launch(workdir, args)
    try:
        series = watch(proc, checkpoint, launched, sample_s, seconds)
    except BaseException:
        proc.kill()
        raise
    if proc.returncode != 0:
        raise SystemExit(f"soak: the job failed ({proc.returncode}); see {workdir}/{chaos.SYSTEM}.log")
    try:
        checked = chaos.check(workdir, args)
    finally:
        chaos.delete_topic(kafka, args.topic)
    outputs = ("counts", "windows", "windows_kafka", "join")
    warmup = max(60.0, seconds / 10)
    figures = {
        "seconds": seconds,
        "rate_rows_per_s": rate,
        "total_rows": args.total_rows,
        "warmup_s": warmup,
        "batches": len(series.batches),
        "wall_s": round(time.time() - launched, 1),
        "slopes": slopes(series, warmup),
        # a leak keeps its slope; a warm-up (heaps, caches, allocators' pools) loses it
        "slopes_second_half": slopes(series, seconds / 2),
        "lost": sum(checked[o]["lost"] for o in outputs),
        "duplicated": sum(checked[o]["duplicated"] for o in outputs),
        "outputs": checked,
    }
    shutil.rmtree(workdir, ignore_errors=True)
    return {"figures": figures, "series": {"samples": [asdict(s) for s in series.samples], "batches": series.batches}}


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = result["series"]["samples"]
    batches = result["series"]["batches"]
    fig, (memory, disk, batch) = plt.subplots(3, 1, figsize=(8, 8), sharex=True)
    t = [s["t_s"] / 60 for s in samples]
    for key, label in (("driver_mb", "driver (Python)"), ("jvm_mb", "Spark JVM"), ("workers_mb", "Python workers")):
        memory.plot(t, [s[key] for s in samples], label=label)
    memory.set_ylabel("resident MB")
    memory.legend(loc="upper left")
    disk.plot(t, [s["checkpoint_mb"] for s in samples], color="tab:purple")
    disk.set_ylabel("checkpoint MB")
    batch.plot([b[0] / 60 for b in batches], [b[1] for b in batches], ".", markersize=2, color="tab:gray")
    batch.set_ylabel("batch s")
    batch.set_xlabel("minutes since launch")
    fig.suptitle(f"Soak: the chaos job at {result['figures']['rate_rows_per_s']:,.0f} rows/s, undisturbed")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def publish(record: Record, result: dict, quick: bool) -> dict:
    figures = result["figures"]
    line = {
        "benchmark": "soak",
        "mode": record.mode,
        **{k: figures[k] for k in ("seconds", "batches", "slopes", "slopes_second_half", "lost", "duplicated")},
    }
    path = RESULTS / "soak.json"
    plot(result, RESULTS / "soak.png")
    return record.publish(
        path,
        {**figures, "series": result["series"]},
        line,
        anchor=Anchor(
            ran="no second system: the job's own figures after the warm-up are the reference (a flat line)",
            formulation="a line fitted to each series after the warm-up; its slope per hour, and as a share of the series' mean",
        ),
        outputs_equal=figures["lost"] == 0 and figures["duplicated"] == 0,
        outputs_compared="per key: the final count, the windows' counts summed in the files and in Kafka, and the join's pairs, "
        "against the sources' rows generated again",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3600.0, help="seconds of input at --rate (default an hour)")
    parser.add_argument(
        "--quick", action="store_true", help="three minutes instead of an hour (a smoke run: too short for slopes)"
    )
    parser.add_argument("--rate", type=float, default=2_000, help="source rows per second")
    parser.add_argument("--sample-s", type=float, default=10.0)
    parser.add_argument("--kafka", default="127.0.0.1:9092", help="the Kafka broker of the windows' Kafka sink")
    args = parser.parse_args(argv)
    seconds = 180.0 if args.quick and args.seconds == 3600.0 else args.seconds
    record = Record("soak", args.quick)
    result = run(seconds, args.rate, args.kafka, args.sample_s)
    published = publish(record, result, args.quick)
    return 0 if published["outputs_equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
