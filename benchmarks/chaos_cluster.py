"""Chaos on a cluster of separate hosts: a worker's network cut, a worker killed, the driver
killed, on a standalone cluster whose master and two workers each run in a network namespace
of their own (``LocalCluster(network_namespaces=True)``, a bridge between them and the driver).

Run by ``benchmarks/chaos.py`` (its ``cluster`` figures), after the driver kills.

The job: ``tests/pipelines/cluster_meters.py``, a keyed running aggregate and an event-time
sliding window over a generator, with a checkpoint, driven by ``sluice run --master
spark://...`` as a user would. During one run:

1. while a batch runs (the first seen running after batch 0), worker 0's network is cut (its bridge port down: nothing
   reaches it, its connections stay open) and restored ``cut_s`` later;
2. while a later batch runs, worker 1 is SIGKILLed with its executor, and a
   replacement worker starts in a new namespace;
3. while a later batch still runs, the driver's process group (the Python driver and
   its JVM) is SIGKILLed; ``sluice run`` starts again on the same checkpoint and runs to the
   end of the input.

The outputs are compared with an undisturbed run of the same pipeline on local Spark, batch
by batch: rows the disturbed run lacks are lost, rows it has more of are duplicated; both
must be 0 and every batch equal. Recovery times, from the batch records' commit times:
restore to the cut batch's commit (negative: it committed while the worker was cut off, its
tasks run on the other worker), worker kill to the commit of the batch it hit (and to the
replacement's registration), driver relaunch to its first commit. Needs root and iproute2.

``run(quick)`` returns the figures. Quick: 8 batches of 1,500 rows, a 4 s cut. Full: 24
batches of 1,500 rows, an 8 s cut.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PIPELINE = str(ROOT / "tests" / "pipelines" / "cluster_meters.py")
SINKS = ("totals", "sliding")
PER_BATCH = 1500
DRIVER_CONF = {
    "spark.executor.memory": "512m",
    # a link down longer than this fails the calls over it instead of waiting two minutes
    "spark.network.timeout": "30s",
    "spark.network.timeoutInterval": "10s",
    "spark.executor.heartbeatInterval": "3s",
}


def run(quick: bool) -> dict:
    """The scenario once, against an undisturbed reference; the figures as a dict."""
    from sluice.runtime.cluster import LocalCluster

    rows = PER_BATCH * (8 if quick else 24)
    cut_s = 4.0 if quick else 8.0
    workdir = tempfile.mkdtemp(prefix="sluice-chaos-cluster-")
    started = time.time()
    try:
        reference_out = os.path.join(workdir, "reference")
        reference = drive(["--master", "local[2]"], reference_out, os.path.join(workdir, "reference-ckpt"), rows, workdir)
        if reference.wait() != 0:
            raise SystemExit(f"the undisturbed run failed: see {workdir}/driver.log")
        out, checkpoint = os.path.join(workdir, "out"), os.path.join(workdir, "ckpt")
        cluster = LocalCluster(workers=2, cores=1, memory="1g", root=os.path.join(workdir, "cluster"), network_namespaces=True)
        with cluster:
            master = ["--master", cluster.master_url, *conf_args({**cluster.spark_conf(), **DRIVER_CONF})]
            events, struck = disturb(cluster, lambda: drive(master, out, checkpoint, rows, workdir), checkpoint, cut_s)
        lost, duplicated, equal = compare(reference_out, out)
        result = {
            "workers": 2,
            "batches": rows // PER_BATCH,
            "network_cut_s": round(events["restored"] - events["cut"], 2),
            "batches_struck": struck,
            "worker_killed": True,
            "driver_killed": True,
            "lost": lost,
            "duplicated": duplicated,
            "outputs_equal": equal,
            "recovery_s": {
                "network_cut_to_commit": commit_after(checkpoint, struck["cut"], events["restored"]),
                "worker_kill_to_commit": commit_after(checkpoint, struck["worker_killed"], events["worker_killed"]),
                "worker_kill_to_replacement": round(events["replaced"] - events["worker_killed"], 2),
                "driver_restart_to_commit": commit_after(checkpoint, struck["relaunched"], events["relaunched"]),
            },
            "wall_s": round(time.time() - started, 1),
        }
    except BaseException:
        print(f"chaos_cluster: failed; its logs are in {workdir}", file=sys.stderr, flush=True)
        raise
    shutil.rmtree(workdir, ignore_errors=True)
    return result


def disturb(cluster, launch, checkpoint: str, cut_s: float) -> tuple[dict[str, float], dict[str, int]]:
    """Run the job through the three failures, then to its end; when each happened, and the
    batch each struck."""
    events: dict[str, float] = {}
    batches_struck: dict[str, int] = {}  # event -> the batch it struck
    first = launch()
    try:
        # each failure strikes the first batch seen running after the last one struck (a
        # batch of this size can start and commit between two looks on a quiet machine)
        batches_struck["cut"] = wait_mid_batch(first, checkpoint, after=0)
        events["cut"] = time.time()
        cluster.cut_worker(0)
        try:
            time.sleep(cut_s)
        finally:
            cluster.restore_worker(0)
            events["restored"] = time.time()
        batches_struck["worker_killed"] = wait_mid_batch(first, checkpoint, after=batches_struck["cut"])
        cluster.kill_worker(1)
        events["worker_killed"] = time.time()
        cluster.add_worker()
        events["replaced"] = time.time()
        batches_struck["relaunched"] = wait_mid_batch(first, checkpoint, after=batches_struck["worker_killed"])
    finally:
        kill(first)
    events["relaunched"] = time.time()
    second = launch()
    try:
        if second.wait(timeout=1200) != 0:
            raise SystemExit(f"the restarted driver failed ({second.returncode}): see its log")
    finally:
        kill(second)
    return events, batches_struck


def drive(args: list[str], out: str, checkpoint: str, rows: int, workdir: str) -> subprocess.Popen:
    """``sluice run`` the pipeline in its own process group (a kill takes its JVM too)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(SLUICE_TEST_OUT=out, SLUICE_TEST_ROWS=str(rows), SLUICE_TEST_PER_BATCH=str(PER_BATCH), SLUICE_SPARK_UI="0")
    command = [sys.executable, "-m", "sluice", "run", PIPELINE, "--checkpoint", f"file://{checkpoint}", "--quiet", *args]
    with open(os.path.join(workdir, "driver.log"), "ab") as log:
        return subprocess.Popen(command, env=env, cwd=workdir, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def conf_args(conf: dict[str, str]) -> list[str]:
    return [arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")]


def batches(checkpoint: str, record: str) -> set[int]:
    return {int(os.path.basename(p).split(".")[0]) for p in glob.glob(os.path.join(checkpoint, "batches", f"*.{record}.json"))}


def wait_mid_batch(proc: subprocess.Popen, checkpoint: str, after: int, timeout: float = 600) -> int:
    """The first batch after ``after`` seen running (started, not done); returns while it runs."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the driver exited ({proc.returncode}) before a batch after {after} was seen running")
        done = batches(checkpoint, "done")
        running = [b for b in batches(checkpoint, "start") if b > after and b not in done]
        if running:
            return min(running)
        time.sleep(0.02)
    raise SystemExit(f"no batch after {after} started in {timeout:.0f} s")


def kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def commit_after(checkpoint: str, batch: int, since: float) -> float:
    """Seconds from ``since`` to the commit of ``batch`` (its done record's time)."""
    return round(os.path.getmtime(os.path.join(checkpoint, "batches", f"{batch:09d}.done.json")) - since, 2)


def outputs(out: str) -> Counter:
    """(sink, batch, row) -> how many times the sinks' committed batches hold it."""
    import pyarrow.dataset as ds

    counts: Counter = Counter()
    for sink in SINKS:
        for d in glob.glob(os.path.join(out, sink, "batch=*")):
            files = [f for f in glob.glob(os.path.join(d, "part-*")) if os.path.getsize(f) > 0]
            if not files:
                continue
            batch = int(d.rsplit("=", 1)[1])
            rows = ds.dataset(files, format="parquet").to_table().to_pylist()
            counts.update((sink, batch, tuple(sorted(r.items()))) for r in rows)
    return counts


def compare(reference_out: str, out: str) -> tuple[int, int, bool]:
    """Rows lost and rows duplicated against the reference, and whether every batch is equal."""
    reference, got = outputs(reference_out), outputs(out)
    return sum((reference - got).values()), sum((got - reference).values()), reference == got
