"""Recovery from crashes: SIGKILL a running job at random moments, restart it each time, and
measure how fast it is back and whether any row was lost or counted twice; Sluice against
Spark Structured Streaming's own stateful query on the same data.

    .venv/bin/python benchmarks/recovery.py [--quick] [--kills N]

The job, the same on both: a generator source at a fixed rate (a finite number of rows,
10,000 keys), a running count and sum per key, each batch's updated keys written to Parquet,
one directory per batch (overwritten by a replay):

- Sluice: ``key_by("meter").aggregate(n=count(), total=sum("units"))`` into a files sink,
  run by ``sluice run`` semantics (``Pipeline.run`` with a checkpoint);
- Spark: ``groupBy("meter").agg(count, sum)``, update mode, written by ``foreachBatch`` to
  ``batch=<id>`` (Spark's documented exactly-once pattern for foreachBatch), with its own
  checkpoint (offset and commit logs, HDFS-backed state store).

Each system runs in a child process; the parent kills the child's whole process group (the
Python driver and its JVM) with SIGKILL at a random moment (uniform in ``--kill-after``
seconds after the run caught up with its source), relaunches it with the same checkpoint, and
measures:

- **first commit**: restart (process launch) to the first batch committed by the new run
  (Sluice: a new ``batches/<id>.done.json``; Spark: a new ``commits/<id>``);
- **caught up**: restart to the commit of the first batch that was planned with less than
  one second of input left waiting at the source (from its offsets in Spark's offset log,
  which both systems write: rows admitted and planning time, against the source's clock).
  The rows that piled up while the job was down have then been processed.

After the last kill the job runs to the end of its input. Then every key's final count and
sum (from the latest batch that updated it) is compared with the source's rows, generated
again: rows counted too few times are lost, too many times duplicated. Both must be 0.

Writes docs/results/recovery.json and recovery.png; the last line printed is a JSON object
whose ``ratio`` is Spark's median time to first commit over Sluice's (larger: Sluice is
back sooner).
"""

from __future__ import annotations

import argparse
import glob
import json
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
from measure import Anchor, Record

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"
KEYS = 10_000
STANDBY = "sluice_standby"  # Sluice with a hot standby beside the job (`sluice run --standby`)
SOURCE = "readings"


def make_spec(rate: float, total_rows: int, per_batch: int):
    from sluice import sources

    return sources.generator(
        fields={"meter": sources.Keys(KEYS, prefix="meter-"), "units": sources.Uniform(0, 100), "ts": sources.EventTime()},
        rate=rate,
        total_rows=total_rows,
        seed=11,
        max_rows_per_batch=per_batch,
    )


# ---- the child: one run of one system ------------------------------------------------------------
def child(system: str, workdir: str, rate: float, total_rows: int, per_batch: int, standby: bool = False) -> None:
    spec = make_spec(rate, total_rows, per_batch)
    out = os.path.join(workdir, system, "out")
    if system in ("sluice", STANDBY):
        from sluice import Pipeline, agg, sinks

        p = Pipeline("recovery", partitions=2)
        (
            p.source(spec, name=SOURCE)
            .with_columns(units="CAST(units AS BIGINT)")
            .key_by("meter")
            .aggregate(n=agg.count(), total=agg.sum("units"), name="per_meter")
            .sink(sinks.files(out), name="out")
        )
        ready = os.path.join(workdir, system, f"standby-{os.getpid()}.ready")

        def on_standby(line: str) -> None:
            if "waiting for" in line:  # the parent kills the active driver only once this exists
                open(ready, "w").close()

        p.run(os.path.join(workdir, system, "checkpoint"), master="local[2]", standby=standby, on_standby=on_standby)
        return
    from pyspark.sql import functions as F

    from sluice.runtime.session import spark_session
    from sluice.runtime.sources import is_exhausted, open_stream, set_max_rows

    spark = spark_session("local[2]", "recovery_anchor", conf={"spark.sql.shuffle.partitions": "2"})
    controls = os.path.join(workdir, system, "checkpoint", "sources")
    set_max_rows(controls, SOURCE, per_batch)
    counts = (
        open_stream(spark, spec, controls, SOURCE)
        .groupBy("meter")
        .agg(F.count(F.lit(1)).alias("n"), F.sum(F.col("units").cast("bigint")).alias("total"))
    )

    def write(df, batch_id):
        df.write.mode("overwrite").parquet(os.path.join(out, f"batch={batch_id}"))

    query = (
        counts.writeStream.outputMode("update")
        .foreachBatch(write)
        .option("checkpointLocation", os.path.join(workdir, system, "checkpoint", "spark"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    while query.isActive and not is_exhausted(controls, SOURCE):
        time.sleep(0.1)
    query.processAllAvailable()
    query.stop()


# ---- the parent: kill, restart, measure ------------------------------------------------------------
def commits(workdir: str, system: str) -> dict[int, float]:
    """Batch id -> when it was committed (Sluice: its done record; Spark: its commit log entry)."""
    checkpoint = os.path.join(workdir, system, "checkpoint")
    if system != "spark":
        paths = glob.glob(os.path.join(checkpoint, "batches", "*.done.json"))
        return {int(os.path.basename(p).split(".")[0]): os.path.getmtime(p) for p in paths}
    paths = glob.glob(os.path.join(checkpoint, "spark", "commits", "[0-9]*"))
    return {int(os.path.basename(p)): os.path.getmtime(p) for p in paths}


def backlog_when_planned(workdir: str, system: str, batch_id: int, rate: float, total_rows: int) -> int | None:
    """Rows that had arrived at the source but were left for later batches when Spark
    planned ``batch_id`` (from its end offset in the offset log: rows admitted, planning time)."""
    from sluice.graph.rates import rows_arrived

    path = os.path.join(workdir, system, "checkpoint", "spark", "offsets", str(batch_id))
    try:
        offset = json.loads(open(path).read().splitlines()[2])
    except (OSError, IndexError, ValueError):
        return None
    return min(rows_arrived(offset["start_us"], rate, offset["at_us"]), total_rows) - offset["rows"]


def launch(system: str, workdir: str, args, standby: bool = False) -> subprocess.Popen:
    log = open(os.path.join(workdir, f"{system}.log"), "ab")
    return subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--child",
            system,
            "--workdir",
            workdir,
            "--rate",
            str(args.rate),
            "--total-rows",
            str(args.total_rows),
            "--rows-per-batch",
            str(args.rows_per_batch),
        ]
        + (["--as-standby"] if standby else []),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def watch_restart(
    system: str,
    workdir: str,
    proc: subprocess.Popen,
    launched: float,
    before: set[int],
    rate: float,
    total_rows: int,
    timeout: float = 900,
) -> dict:
    """Seconds from launch to the first batch the new run commits, and to the commit of the
    first batch planned with less than a second of input left waiting (caught up)."""
    first = caught = None
    while time.time() - launched < timeout and caught is None:
        new = {b: t for b, t in commits(workdir, system).items() if b not in before}
        if new and first is None:
            first = min(new.values()) - launched
        for b in sorted(new):
            waiting = backlog_when_planned(workdir, system, b, rate, total_rows)
            if waiting is not None and waiting < rate:
                caught = new[b] - launched
                break
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    return {
        "first_commit_s": None if first is None else round(first, 2),
        "caught_up_s": None if caught is None else round(caught, 2),
    }


def start(system: str, workdir: str, args, before: set[int]) -> tuple[subprocess.Popen, dict]:
    """Launch the job and watch it come back. A launch that dies of the environment (Spark's
    Python process missing its 10 s to connect back on this loaded machine) is launched
    again, and its time counts: the job was not back."""
    launched = time.time()
    for _ in range(3):
        proc = launch(system, workdir, args)
        r = watch_restart(system, workdir, proc, launched, before, args.rate, args.total_rows)
        if proc.poll() in (None, 0):
            return proc, r
        print(
            f"  {system}: the job died while starting ({proc.returncode}, see {workdir}/{system}.log); launched again", flush=True
        )
    raise SystemExit(f"{system} failed to start three times; see {workdir}/{system}.log")


def launch_standby(workdir: str, args) -> tuple[subprocess.Popen, str]:
    """A hot standby beside the running job; and the file it creates once ready."""
    proc = launch(STANDBY, workdir, args, standby=True)
    return proc, os.path.join(workdir, STANDBY, f"standby-{proc.pid}.ready")


def run_with_standby(workdir: str, args, rng: random.Random) -> dict:
    """Like ``run_system``, with a hot standby beside the job: each kill comes once the standby
    is ready; the standby takes over (measured from the kill), and a new standby is started
    beside it for the next kill."""
    system = STANDBY
    shutil.rmtree(os.path.join(workdir, system), ignore_errors=True)
    os.makedirs(os.path.join(workdir, system))
    restarts = []
    proc, start_times = start(system, workdir, args, set())
    print(f"  {system}: started, first commit after {_s(start_times['first_commit_s'])}", flush=True)
    for k in range(args.kills):
        standby, ready = launch_standby(workdir, args)
        while not os.path.exists(ready):
            if standby.poll() is not None or proc.poll() is not None:
                raise SystemExit(f"{system}: a driver ended before kill {k + 1}; see {workdir}/{system}.log")
            time.sleep(0.1)
        wait = rng.uniform(*args.kill_after)
        time.sleep(wait)
        if proc.poll() is not None:
            print(f"  {system}: the job ended before kill {k + 1}; lower --kill-after or raise --total-rows")
            os.killpg(standby.pid, signal.SIGKILL)
            break
        before = set(commits(workdir, system))
        killed = time.time()
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its JVM, no goodbyes
        proc.wait()
        proc = standby
        r = watch_restart(system, workdir, proc, killed, before, args.rate, args.total_rows)
        r["killed_after_s"] = round(wait, 2)
        restarts.append(r)
        print(
            f"  {system}: kill {k + 1} after {wait:.1f} s; the standby took over: first commit "
            f"{_s(r['first_commit_s'])} after the kill, caught up {_s(r['caught_up_s'])}",
            flush=True,
        )
    return finish(system, workdir, args, proc, start_times, restarts)


def run_system(system: str, workdir: str, args, rng: random.Random) -> dict:
    if system == STANDBY:
        return run_with_standby(workdir, args, rng)
    shutil.rmtree(os.path.join(workdir, system), ignore_errors=True)
    restarts = []
    proc, start_times = start(system, workdir, args, set())
    print(f"  {system}: started, first commit after {_s(start_times['first_commit_s'])}", flush=True)
    for k in range(args.kills):
        wait = rng.uniform(*args.kill_after)
        time.sleep(wait)
        if proc.poll() is not None:
            print(f"  {system}: the job ended before kill {k + 1}; lower --kill-after or raise --total-rows")
            break
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its JVM, no goodbyes
        proc.wait()
        proc, r = start(system, workdir, args, set(commits(workdir, system)))
        r["killed_after_s"] = round(wait, 2)
        restarts.append(r)
        print(
            f"  {system}: kill {k + 1} after {wait:.1f} s; back: first commit {_s(r['first_commit_s'])}, "
            f"caught up {_s(r['caught_up_s'])}",
            flush=True,
        )
    return finish(system, workdir, args, proc, start_times, restarts)


def finish(system: str, workdir: str, args, proc, start_times: dict, restarts: list) -> dict:
    """Let the last run end, then count the rows lost and duplicated against the source."""
    proc.wait()
    if proc.returncode != 0:
        raise SystemExit(f"{system}'s last run failed ({proc.returncode}); see {workdir}/{system}.log")
    lost, duplicated = check_output(workdir, system, args)
    print(f"  {system}: lost {lost} rows, duplicated {duplicated} rows", flush=True)
    return {"start": start_times, "restarts": restarts, "lost_rows": lost, "duplicated_rows": duplicated}


def _s(x: float | None) -> str:
    return "never" if x is None else f"{x:.1f} s"


def check_output(workdir: str, system: str, args) -> tuple[int, int]:
    """Rows lost and rows counted twice, from each key's final count against the source."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    spec = make_spec(args.rate, args.total_rows, args.rows_per_batch)
    source = pa.Table.from_batches(spec.generate(0, args.total_rows, 0))
    counted = source.group_by("meter").aggregate([("meter", "count")])
    truth = pa.table({"meter": counted["meter"], "true_n": counted["meter_count"]})
    parts = []
    for d in glob.glob(os.path.join(workdir, system, "out", "batch=*")):
        files = [f for f in glob.glob(os.path.join(d, "*.parquet")) if os.path.getsize(f) > 0]
        if files:
            t = ds.dataset(files).to_table(columns=["meter", "n"])
            parts.append(t.append_column("batch", pa.array(np.full(t.num_rows, int(d.rsplit("=", 1)[1])))))
    if not parts:
        return args.total_rows, 0
    out = pa.concat_tables(parts)
    latest = out.group_by("meter").aggregate([("batch", "max")])
    final = latest.join(out, keys=["meter", "batch_max"], right_keys=["meter", "batch"]).select(["meter", "n"])
    both = truth.join(final, keys="meter", join_type="full outer")
    true_n = pc.fill_null(both["true_n"], 0).to_numpy()
    n = pc.fill_null(both["n"], 0).to_numpy()
    return int(np.maximum(true_n - n, 0).sum()), int(np.maximum(n - true_n, 0).sum())


def summary(runs: dict) -> dict:
    def med(values):
        values = [v for v in values if v is not None]
        return round(statistics.median(values), 2) if values else None

    return {
        "first_commit_s_median": med([r["first_commit_s"] for r in runs["restarts"]]),
        "caught_up_s_median": med([r["caught_up_s"] for r in runs["restarts"]]),
        "first_commit_s_max": max((r["first_commit_s"] or 0 for r in runs["restarts"]), default=None),
        "cold_start_first_commit_s": round(runs["start"]["first_commit_s"] or 0, 2),
    }


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.8))
    for i, (system, color) in enumerate((("sluice", "tab:blue"), ("spark", "tab:orange"))):
        restarts = results[system]["restarts"]
        for j, what in enumerate(("first_commit_s", "caught_up_s")):
            ys = [r[what] for r in restarts if r[what] is not None]
            xs = [i * 3 + j + (k - len(ys) / 2) * 0.08 for k in range(len(ys))]
            ax.scatter(xs, ys, color=color, marker="o" if j == 0 else "s", alpha=0.8)
    ax.set_xticks([0, 1, 3, 4], ["Sluice\nfirst commit", "Sluice\ncaught up", "Spark\nfirst commit", "Spark\ncaught up"])
    ax.set_ylabel("seconds after restart")
    ax.set_title(
        f"Restart after SIGKILL, {results['setup']['kills']} kills each, local[2]\n"
        f"lost/duplicated rows: Sluice {results['sluice']['lost_rows']}/{results['sluice']['duplicated_rows']}, "
        f"Spark {results['spark']['lost_rows']}/{results['spark']['duplicated_rows']}",
        fontsize=10,
    )
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 kills each")
    parser.add_argument("--kills", type=int, default=None, help="kills per system (default 2 quick, 6 full)")
    parser.add_argument("--rate", type=float, default=5_000, help="source rows per second")
    parser.add_argument("--total-rows", type=int, default=None)
    parser.add_argument("--rows-per-batch", type=int, default=100_000)
    parser.add_argument(
        "--kill-after",
        type=float,
        nargs=2,
        default=(3.0, 12.0),
        metavar=("MIN", "MAX"),
        help="a kill comes uniformly MIN..MAX s after the job caught up (after its start or restart)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--name", default="recovery", help="results file name (docs/results/NAME.json and .png)")
    parser.add_argument(
        "--systems",
        default=None,
        help="comma-separated subset of sluice,spark,sluice_standby (default: sluice,spark, and sluice_standby with --standby)",
    )
    parser.add_argument(
        "--standby",
        action="store_true",
        help="also Sluice with a hot standby beside the job (sluice run --standby): kill to its first commit",
    )
    parser.add_argument("--child", choices=("sluice", "spark", STANDBY), help=argparse.SUPPRESS)
    parser.add_argument("--as-standby", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.kills = args.kills if args.kills is not None else (2 if args.quick else 6)
    # enough rows that the job outlives every kill: 150 s of input a kill in full mode (a
    # restart on a loaded machine has taken over two minutes), 30 s in quick mode (a restart
    # on a quiet one takes 10-20 s); a job that ends early is killed fewer times, and says so
    args.total_rows = args.total_rows or int(args.rate * (30 if args.quick else 150) * (args.kills + 1))
    if args.child:
        child(args.child, args.workdir, args.rate, args.total_rows, args.rows_per_batch, args.as_standby)
        return 0
    record = Record("recovery", args.quick)
    workdir = tempfile.mkdtemp(prefix="sluice-recovery-")
    mode = "quick" if args.quick else "full"
    print(
        f"recovery: {args.kills} SIGKILLs each, source {args.rate:,.0f} rows/s ({args.total_rows:,} rows, "
        f"{KEYS:,} keys), at most {args.rows_per_batch:,} rows a batch, local[2] ({mode} mode); work in {workdir}",
        flush=True,
    )
    rng = random.Random(args.seed)
    runs = {}
    systems = args.systems.split(",") if args.systems else ["sluice", "spark"] + ([STANDBY] if args.standby else [])
    for system in systems:
        runs[system] = run_system(system, workdir, args, rng)
    results = {
        "benchmark": "recovery",
        "mode": mode,
        "setup": {
            "kills": args.kills,
            "rate_rows_per_s": args.rate,
            "total_rows": args.total_rows,
            "keys": KEYS,
            "rows_per_batch": args.rows_per_batch,
            "kill_after_s": list(args.kill_after),
            "master": "local[2]",
            "first_commit": "process launch to the first batch committed by the new run",
            "caught_up": "process launch to the commit of the first batch planned with less than 1 s of input waiting",
            STANDBY: "first commit and caught up counted from the kill (the standby was ready before it)",
        },
        **{s: {**runs[s], **summary(runs[s])} for s in runs},
    }
    sluice_first = results.get("sluice", {}).get("first_commit_s_median")
    spark_first = results.get("spark", {}).get("first_commit_s_median")
    results["ratio"] = round(spark_first / sluice_first, 3) if sluice_first and spark_first else None
    RESULTS.mkdir(parents=True, exist_ok=True)
    if "sluice" in results and "spark" in results:
        plot(results, RESULTS / f"{args.name}.png")
    shutil.rmtree(workdir, ignore_errors=True)
    exact = all(results[s]["lost_rows"] == 0 and results[s]["duplicated_rows"] == 0 for s in runs)
    record.publish(
        RESULTS / f"{args.name}.json",
        results,
        {
            "benchmark": "recovery",
            "ratio": results["ratio"],
            **{
                f"{s}_{k}": results[s][k]
                for s in runs
                for k in ("first_commit_s_median", "caught_up_s_median", "lost_rows", "duplicated_rows")
            },
        },
        anchor=Anchor(
            ran="Spark Structured Streaming's own stateful query, killed and restarted the same way",
            formulation="groupBy(meter).agg(count, sum), update mode, foreachBatch writing batch=<id> directories, "
            "its own checkpoint; the same generator source at the same rate",
            state_store="default (HDFS-backed)",
            shuffle_partitions=2,
        ),
        outputs_equal=exact,
        outputs_compared="every system's final count and sum per key against the source's rows, generated again "
        "(lost and duplicated rows must be 0)",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
