"""Chaos: SIGKILL a running job's driver at random moments, many times, and check that no
row was lost or counted twice; recovery time (restart to first commit) as a distribution.

    .venv/bin/python benchmarks/chaos.py [--quick] [--kills N]

The job: a generator source at a fixed rate (a finite number of rows, 10,000 keys, event
times in order) feeding two stateful operators, each into a Parquet files sink (one
directory per batch, replaced by a replay):

- a running count per key (``key_by("meter").aggregate(n=count())``);
- a tumbling one-minute window per key (``key_by("meter").window(tumbling("1m"))``), whose
  windows close as the watermark passes them and at the end of the input.

A child process runs the job (``Pipeline.run`` with a checkpoint, as ``sluice run`` does);
the parent kills its whole process group (the Python driver and its JVM) at a random
moment, uniform in ``--kill-after`` seconds after the restart committed its first batch,
relaunches it with the same checkpoint, and measures recovery: launch to the first batch
the new run commits. After the last kill the job runs to the end of its input, and the
outputs are checked against the source's rows, generated again:

- per key, the running count of the latest batch that updated it;
- per key, the sum of its windows' counts plus the records the windows took as late.

Rows counted too few times are lost, too many times duplicated; both must be 0.

Prints one JSON line: ``kills``, ``lost``, ``duplicated``, ``recovery_p50_s``,
``recovery_p95_s`` (and the per-operator counts); writes docs/results/chaos.json.
``--quick``: 6 kills. Full mode: 100 kills.

Not covered here (see docs/operations.md, "Operations under failure"): a join and a Kafka
sink in the job, a standalone cluster in network namespaces with a worker's network cut, a
broker restarted mid-run, a disk filled and freed, and the one-hour soak.
"""

from __future__ import annotations

import argparse
import glob
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import recovery  # the kill-and-watch machinery of the recovery benchmark
from measure import Anchor, Record

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"
SYSTEM = "chaos"


def child(workdir: str, rate: float, total_rows: int, per_batch: int) -> None:
    from sluice import Pipeline, agg, sinks
    from sluice import windows as W

    p = Pipeline("chaos", partitions=2)
    readings = p.source(recovery.make_spec(rate, total_rows, per_batch), name=recovery.SOURCE)
    out = os.path.join(workdir, SYSTEM, "out")
    (
        readings.key_by("meter")
        .aggregate(n=agg.count(), name="counts")
        .sink(sinks.files(os.path.join(out, "counts")), name="counts_out")
    )
    (
        readings.key_by("meter")
        .window(W.tumbling("1m"))
        .aggregate(n=agg.count(), name="per_minute")
        .sink(sinks.files(os.path.join(out, "windows")), name="windows_out")
    )
    p.run(os.path.join(workdir, SYSTEM, "checkpoint"), master="local[2]")


def launch(workdir: str, args) -> subprocess.Popen:
    with open(os.path.join(workdir, f"{SYSTEM}.log"), "ab") as log:  # the child keeps its own descriptor
        return subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--child",
                "--workdir",
                workdir,
                "--rate",
                str(args.rate),
                "--total-rows",
                str(args.total_rows),
                "--rows-per-batch",
                str(args.rows_per_batch),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def start(workdir: str, args, before: set[int]) -> tuple[subprocess.Popen, float | None]:
    """Launch the job; seconds from launch to its first commit (None: it never committed)."""
    launched = time.time()
    for _ in range(3):
        proc = launch(workdir, args)
        first = None
        while time.time() - launched < 900 and proc.poll() is None:
            new = [t for b, t in recovery.commits(workdir, SYSTEM).items() if b not in before]
            if new:
                first = min(new) - launched
                break
            time.sleep(0.1)
        if proc.poll() in (None, 0):
            return proc, first
        print(f"  the job died while starting ({proc.returncode}, see {workdir}/{SYSTEM}.log); launched again", flush=True)
    raise SystemExit(f"the job failed to start three times; see {workdir}/{SYSTEM}.log")


def latest_per_key(out: str, columns: list[str]):
    """Rows of the sink at ``out``, with the batch each came from."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.dataset as ds

    parts = []
    for d in glob.glob(os.path.join(out, "batch=*")):
        files = [f for f in glob.glob(os.path.join(d, "*.parquet")) if os.path.getsize(f) > 0]
        if files:
            t = ds.dataset(files).to_table(columns=columns)
            parts.append(t.append_column("batch", pa.array(np.full(t.num_rows, int(d.rsplit("=", 1)[1])))))
    return pa.concat_tables(parts) if parts else None


def compare(truth, got) -> tuple[int, int]:
    """Rows lost and duplicated: per key, the true count against the count found."""
    import numpy as np
    import pyarrow.compute as pc

    both = truth.join(got, keys="meter", join_type="full outer")
    true_n, n = pc.fill_null(both["true_n"], 0).to_numpy(), pc.fill_null(both["n"], 0).to_numpy()
    return int(np.maximum(true_n - n, 0).sum()), int(np.maximum(n - true_n, 0).sum())


def check(workdir: str, args) -> dict:
    import pyarrow as pa

    from sluice.runtime.batch import metrics as metrics_log

    source = pa.Table.from_batches(
        recovery.make_spec(args.rate, args.total_rows, args.rows_per_batch).generate(0, args.total_rows, 0)
    )
    counted = source.group_by("meter").aggregate([("meter", "count")])
    truth = pa.table({"meter": counted["meter"], "true_n": counted["meter_count"]})
    out = os.path.join(workdir, SYSTEM, "out")
    counts = latest_per_key(os.path.join(out, "counts"), ["meter", "n"])
    if counts is None:
        count_lost, count_dup = args.total_rows, 0
    else:
        latest = counts.group_by("meter").aggregate([("batch", "max")])
        final = latest.join(counts, keys=["meter", "batch_max"], right_keys=["meter", "batch"]).select(["meter", "n"])
        count_lost, count_dup = compare(truth, final)
    windows = latest_per_key(os.path.join(out, "windows"), ["meter", "n"])
    late = sum(m.late_records for m in metrics_log.read(os.path.join(workdir, SYSTEM, "checkpoint")))
    if windows is None:
        window_lost, window_dup = args.total_rows, 0
    else:
        summed = windows.group_by("meter").aggregate([("n", "sum")]).rename_columns(["meter", "n"])
        window_lost, window_dup = compare(truth, summed)
        window_lost = max(0, window_lost - late)  # records the windows took as late are accounted for
    return {
        "counts": {"lost": count_lost, "duplicated": count_dup},
        "windows": {"lost": window_lost, "duplicated": window_dup, "late": late},
    }


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))], 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="6 kills")
    parser.add_argument("--kills", type=int, default=None, help="driver kills (default 6 quick, 100 full)")
    parser.add_argument("--rate", type=float, default=5_000, help="source rows per second")
    parser.add_argument("--total-rows", type=int, default=None)
    parser.add_argument("--rows-per-batch", type=int, default=50_000)
    parser.add_argument(
        "--kill-after",
        type=float,
        nargs=2,
        default=(0.0, 6.0),
        metavar=("MIN", "MAX"),
        help="a kill comes uniformly MIN..MAX s after the restart's first commit",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.kills = args.kills if args.kills is not None else (6 if args.quick else 100)
    # enough input that the job outlives every kill (a restart takes some 10-20 s here)
    args.total_rows = args.total_rows or int(args.rate * (20 if args.quick else 30) * (args.kills + 1))
    if args.child:
        child(args.workdir, args.rate, args.total_rows, args.rows_per_batch)
        return 0
    record = Record("chaos", args.quick)
    workdir = tempfile.mkdtemp(prefix="sluice-chaos-")
    mode = "quick" if args.quick else "full"
    print(
        f"chaos: {args.kills} driver SIGKILLs, source {args.rate:,.0f} rows/s ({args.total_rows:,} rows), "
        f"keyed count and tumbling windows, local[2] ({mode} mode); work in {workdir}",
        flush=True,
    )
    rng = random.Random(args.seed)
    proc, _ = start(workdir, args, set())
    recoveries: list[float] = []
    kills = 0
    for k in range(args.kills):
        wait = rng.uniform(*args.kill_after)
        time.sleep(wait)
        if proc.poll() is not None:
            print(f"  the job ended before kill {k + 1}: raise --total-rows for more kills", flush=True)
            break
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its JVM, no goodbyes
        proc.wait()
        kills += 1
        proc, back = start(workdir, args, set(recovery.commits(workdir, SYSTEM)))
        if back is not None:
            recoveries.append(back)
        print(f"  kill {k + 1} after {wait:.1f} s: first commit {recovery._s(back)} after the restart", flush=True)
    proc.wait()
    if proc.returncode != 0:
        raise SystemExit(f"the last run failed ({proc.returncode}); see {workdir}/{SYSTEM}.log")
    checked = check(workdir, args)
    lost = checked["counts"]["lost"] + checked["windows"]["lost"]
    duplicated = checked["counts"]["duplicated"] + checked["windows"]["duplicated"]
    line = {
        "benchmark": "chaos",
        "mode": mode,
        "kills": kills,
        "lost": lost,
        "duplicated": duplicated,
        "recovery_p50_s": percentile(recoveries, 0.5),
        "recovery_p95_s": percentile(recoveries, 0.95),
        "recovery_max_s": max(recoveries) if recoveries else None,
        **checked,
    }
    results = {
        **line,
        "setup": {
            "rate_rows_per_s": args.rate,
            "total_rows": args.total_rows,
            "rows_per_batch": args.rows_per_batch,
            "kill_after_s": list(args.kill_after),
            "master": "local[2]",
            "keys": recovery.KEYS,
            "recovery": "process launch to the first batch the new run commits",
        },
        "recoveries_s": [round(r, 2) for r in recoveries],
        "recovery_mean_s": round(statistics.mean(recoveries), 2) if recoveries else None,
    }
    shutil.rmtree(workdir, ignore_errors=True)
    record.publish(
        RESULTS / "chaos.json",
        results,
        line,
        anchor=Anchor(
            ran="no second system: the source's own rows, generated again, are the reference",
            formulation="every key's final count and summed window counts against the rows the source produced; "
            "lost and duplicated must both be 0",
        ),
        outputs_equal=lost == 0 and duplicated == 0,
        outputs_compared="the job's final count per key and its windows' counts summed per key, against the source's rows",
    )
    return 0 if lost == 0 and duplicated == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
