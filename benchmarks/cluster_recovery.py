"""Recovery and checkpoints on a standalone cluster (issue 16 item 5): incremental checkpoint
size per batch against a full snapshot, and recovery after an executor loss and after a
driver kill.

    .venv/bin/python benchmarks/cluster_recovery.py [--quick]

The job: a running count and sum per meter (``KEYS`` meters, uniform) over a generator at
``RATE`` rows/s, written to Parquet one directory per batch, on a standalone cluster of two
workers x 1 core started from the pyspark wheel. The driver runs as a child process (this
script with ``--child``), as a user's ``sluice run`` would, so it can be killed.

1. **Executor loss.** While batch ``EXECUTOR_KILL_BATCH`` runs, one executor is SIGKILLed.
   Spark re-runs its tasks on the executor left (the master starts a replacement). Measured:
   that batch's duration against the median of the others, the time from the kill to its
   commit, and to the replacement executor's registration (its ``since`` in the metrics).
2. **Driver kill.** After batch ``DRIVER_KILL_AFTER``, the driver's whole process group (the
   Python driver and its JVM) is SIGKILLed in the middle of a batch and started again with the
   same checkpoint. Measured: the time from the restart to the first batch committed by the new
   driver (its JVM and session start, the application registers with the master, executors
   start, the interrupted batch is replayed) and to the backlog being drained (under 1 s of
   input).
3. **Checkpoint size.** Per batch, the bytes the key-group store wrote for it (its deltas:
   the state of the key groups the batch changed) against a full snapshot of the state after
   it (the state bytes of every key group): what an incremental checkpoint saves.

Exactly once: after the run, every meter's count and sum (from the latest batch that updated
it) equal those of the rows the source produced up to the rows admitted. Writes
docs/results/cluster_recovery.json; the last line is one JSON object whose ``ratio`` is the
median full-snapshot bytes over the median delta bytes per batch.
"""

from __future__ import annotations

import argparse
import glob
import os
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
KEYS = 50_000
RATE = 4000.0
MAX_ROWS = 20_000  # rows a batch admits (5 s of input): enough batches before and after each kill
EXECUTOR_KILL_BATCH = 2
DRIVER_KILL_AFTER = 5


def spec(total_rows: int):
    from sluice import sources

    return sources.generator(
        fields={"meter": sources.Keys(KEYS), "kwh": sources.Sequence()},
        seed=11,
        rate=RATE,
        total_rows=total_rows,
        max_rows_per_batch=MAX_ROWS,
    )


def child(master: str, checkpoint: str, out: str, total_rows: int) -> None:
    from sluice import Pipeline, agg, sinks

    p = Pipeline("cluster_recovery", partitions=2)
    (
        p.source(spec(total_rows), name="meters")
        .key_by("meter")
        .aggregate(n=agg.count(), total=agg.sum("kwh"), name="per_meter")
        .sink(sinks.files(out), name="out")
    )
    p.run(checkpoint, master=master, ui=False)


def launch(master: str, checkpoint: str, out: str, total_rows: int, log, env) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, __file__, "--child", master, checkpoint, out, str(total_rows)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def done(ckpt_dir: str) -> list[int]:
    return sorted(int(os.path.basename(p).split(".")[0]) for p in glob.glob(os.path.join(ckpt_dir, "batches", "*.done.json")))


def started(ckpt_dir: str) -> list[int]:
    return sorted(int(os.path.basename(p).split(".")[0]) for p in glob.glob(os.path.join(ckpt_dir, "batches", "*.start.json")))


def wait_until(condition, proc, timeout: float, what: str) -> float:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return time.time()
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"the driver exited ({proc.returncode}) while waiting for {what}")
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for {what}")


def delta_bytes(ckpt_dir: str) -> dict[int, int]:
    """Bytes the key-group stores wrote for each batch (their delta files)."""
    out: dict[int, int] = {}
    for d in glob.glob(os.path.join(ckpt_dir, "**", "deltas", "*"), recursive=True):
        try:
            batch = int(os.path.basename(d))
        except ValueError:
            continue
        out[batch] = out.get(batch, 0) + sum(os.path.getsize(f) for f in glob.glob(os.path.join(d, "*")))
    return out


def check_exactly_once(out: str, admitted: int) -> dict:
    import pyarrow as pa
    import pyarrow.dataset as ds

    latest: dict = {}
    for d in sorted(glob.glob(os.path.join(out, "batch=*")), key=lambda p: int(p.rsplit("=", 1)[1])):
        files = [f for f in glob.glob(os.path.join(d, "part-*")) if os.path.getsize(f) > 0]
        if files:
            for row in ds.dataset(files, format="parquet").to_table().to_pylist():
                latest[row["meter"]] = (row["n"], row["total"])
    rows = pa.Table.from_batches(spec(admitted).generate(0, admitted, 0))
    expected: dict = {}
    for meter, kwh in zip(rows.column("meter").to_pylist(), rows.column("kwh").to_pylist()):
        n, total = expected.get(meter, (0, 0))
        expected[meter] = (n + 1, total + kwh)
    return {
        "keys": len(expected),
        "lost_or_duplicated_keys": sum(1 for k, v in expected.items() if latest.get(k) != v)
        + sum(1 for k in latest if k not in expected),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--child", nargs=4, metavar=("MASTER", "CHECKPOINT", "OUT", "ROWS"))
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.child[2], int(args.child[3]))
        return

    from sluice.runtime.batch import metrics as metrics_log
    from sluice.runtime.cluster import LocalCluster

    record = Record("cluster_recovery", args.quick)
    total_rows = int(RATE * (60 if args.quick else 120))
    workdir = tempfile.mkdtemp(prefix="cluster_recovery_")
    ckpt_dir, out = os.path.join(workdir, "ckpt"), os.path.join(workdir, "out")
    env = {k: v for k, v in os.environ.items() if k != "SLUICE_SPARK_UI"}
    figures: dict = {}
    with (
        LocalCluster(workers=2, cores=1, memory="1g", root=os.path.join(workdir, "cluster")) as cluster,
        open(os.path.join(workdir, "driver.log"), "ab") as log,
    ):
        proc = launch(cluster.master_url, f"file://{ckpt_dir}", out, total_rows, log, env)
        try:
            # 1. an executor lost mid-batch
            wait_until(
                lambda: (
                    EXECUTOR_KILL_BATCH in started(ckpt_dir)
                    and EXECUTOR_KILL_BATCH not in done(ckpt_dir)
                    and cluster.executor_pids()
                ),
                proc,
                600,
                f"batch {EXECUTOR_KILL_BATCH} to start",
            )
            victim = cluster.executor_pids()[0]
            killed_at = time.time()
            os.kill(victim, signal.SIGKILL)
            committed_at = wait_until(
                lambda: EXECUTOR_KILL_BATCH in done(ckpt_dir), proc, 600, f"batch {EXECUTOR_KILL_BATCH} to commit"
            )
            figures["executor_loss"] = {"killed_pid": victim, "kill_to_commit_s": round(committed_at - killed_at, 2)}
            # 2. the driver killed mid-batch
            wait_until(
                lambda: DRIVER_KILL_AFTER in done(ckpt_dir) and max(started(ckpt_dir)) > DRIVER_KILL_AFTER,
                proc,
                600,
                f"batch {DRIVER_KILL_AFTER + 1} to start",
            )
            before = set(done(ckpt_dir))
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            relaunched = time.time()
            proc = launch(cluster.master_url, f"file://{ckpt_dir}", out, total_rows, log, env)
            first = wait_until(lambda: set(done(ckpt_dir)) - before, proc, 600, "the restarted driver's first commit")
            proc.wait(timeout=900)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    if proc.returncode != 0:
        raise SystemExit(f"the driver failed ({proc.returncode}); see {workdir}/driver.log")

    batches = [m for m in metrics_log.read(ckpt_dir) if m.rows_in]
    by_id = {m.batch_id: m for m in batches}
    others = [m.duration_s for m in batches if m.batch_id not in (EXECUTOR_KILL_BATCH, 0)]
    lost = by_id.get(EXECUTOR_KILL_BATCH)
    held_before = {e["id"] for e in (by_id[EXECUTOR_KILL_BATCH - 1].executors if EXECUTOR_KILL_BATCH - 1 in by_id else [])}
    replacement = sorted(
        float(e["since"])
        for m in batches
        for e in m.executors
        if e.get("id") not in held_before
        and e.get("id") != "driver"
        and float(e.get("since", 0)) > killed_at
        and m.batch_id < DRIVER_KILL_AFTER + 1
    )
    figures["executor_loss"].update(
        {
            "batch_s": None if lost is None else round(lost.duration_s, 2),
            "median_other_batch_s": round(statistics.median(others), 2) if others else None,
            "kill_to_replacement_registered_s": round(replacement[0] - killed_at, 2) if replacement else None,
        }
    )
    restart_batches = [m for m in batches if m.started_at >= relaunched]
    caught_up = next((m.started_at - relaunched for m in restart_batches if sum(v or 0 for v in m.backlog.values()) < RATE), None)
    figures["driver_kill"] = {
        "restart_to_first_commit_s": round(first - relaunched, 2),
        "restart_to_caught_up_s": None if caught_up is None else round(caught_up, 2),
    }
    deltas = delta_bytes(ckpt_dir)
    sizes = []
    for m in batches:
        state = sum(load.total_state_bytes for load in m.key_groups.values())
        if m.batch_id in deltas and state:
            sizes.append(
                {"batch": m.batch_id, "delta_bytes": deltas[m.batch_id], "full_snapshot_bytes": state, "rows": m.rows_in}
            )
    figures["checkpoint"] = {
        "per_batch": sizes,
        "median_delta_bytes": statistics.median([s["delta_bytes"] for s in sizes]) if sizes else None,
        "median_full_snapshot_bytes": statistics.median([s["full_snapshot_bytes"] for s in sizes]) if sizes else None,
    }
    admitted = sum(m.rows_in for m in metrics_log.read(ckpt_dir))
    figures["exactly_once"] = check_exactly_once(out, admitted)
    c = figures["checkpoint"]
    ratio = round(c["median_full_snapshot_bytes"] / c["median_delta_bytes"], 2) if c["median_delta_bytes"] else None
    result = {
        "benchmark": "cluster_recovery",
        "quick": args.quick,
        "ratio": ratio,
        "ratio_is": "median full-snapshot bytes over median delta bytes per batch",
        "keys": KEYS,
        "rate": RATE,
        "rows": admitted,
        "figures": figures,
    }
    exact = figures["exactly_once"]
    record.publish(
        RESULTS / "cluster_recovery.json",
        result,
        {k: result[k] for k in ("benchmark", "ratio")} | {"figures": {k: v for k, v in figures.items() if k != "checkpoint"}},
        anchor=Anchor(
            ran="a full snapshot of the same state after each batch (the state bytes of every key group), computed",
            formulation="ratio = median full-snapshot bytes over median delta bytes per batch; the recovery times "
            "have no anchor (Spark's own restart is in benchmarks/recovery.py)",
        ),
        outputs_equal=exact["lost_or_duplicated_keys"] == 0,
        outputs_compared="every meter's final count and sum against the source's rows up to the rows admitted",
        indent=1,
    )


if __name__ == "__main__":
    sys.exit(main())
