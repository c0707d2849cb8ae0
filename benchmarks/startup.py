"""Start and restart of the demo pipeline: how long until its first batch is committed, and
where that time goes.

    .venv/bin/python benchmarks/startup.py [--quick] [--runs N]

The demo (``sluice demo``'s smart-meter pipeline: a Python parse, a SQL filter, two keyed
operators, two file sinks) runs in a child process on local[2]:

- **cold start**: a fresh checkpoint; process launch to the first committed batch;
- **restart**: the same job SIGKILLed (driver and JVM) once it has committed a few batches
  and relaunched on its checkpoint; launch to the first batch the new run commits;
- **standby** (Sluice only): the job runs again on its checkpoint with a hot standby beside it
  (``RunOptions(standby=True)``, ``sluice run --standby``); once the standby is ready and the
  job has run two more batches, the job's driver and JVM are SIGKILLed: kill to the first
  batch the standby commits, and the standby's CPU seconds in that time.

The child marks each phase as it passes it (the interpreter and imports, the JVM and
SparkSession, validating the graph (Spark types the SQL expressions), opening the source,
starting the query, Spark's planning of the first batch, the batch itself by step), and
Spark's own progress report splits its first trigger (offsets, planning, the
``foreachBatch`` call). Steady batches of the same run are the yardstick.

The anchor is Spark Structured Streaming's own stateful query over the same source
(``groupBy(meter).agg(count, avg, max, sum)``, update mode, written with ``foreachBatch``), cold
and restarted the same way. Every time is from the launch of the job's process (the parent's
clock just before it starts the child interpreter) to the first batch the job commits: the
interpreter, the imports, the JVM and SparkSession and everything a system does before its
query starts count, for both. The split at the query's start (``before_query_s``: launch to
the query's start; ``first_batch_s``: the query's start to its first commit) is reported
beside, never the second part alone. Best of ``--runs`` (the machine is shared). Writes
docs/results/startup.json; the last line printed is a JSON object whose ``ratio`` is Spark's
launch-to-first-commit time over Sluice's on a cold start (larger: Sluice commits sooner),
``restart_ratio`` the same after a SIGKILL and relaunch on the checkpoint, and
``standby_ratio`` Spark's restart time over Sluice's kill-to-commit with a hot standby.
"""

from __future__ import annotations

import time

T0 = time.time()  # before any heavy import: the phases count from here

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"
RATE = 20_000
STANDBY_MARKS = "standby_marks.jsonl"


# ---- the child ---------------------------------------------------------------------------------
class Marks:
    """Phase marks of one run, appended to a JSON-lines file as they happen (a SIGKILL may
    come at any time)."""

    def __init__(self, path: str, launched: float):
        self.path = path
        self.launched = launched

    def __call__(self, phase: str, **extra) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps({"phase": phase, "t": round(time.time() - self.launched, 3), **extra}) + "\n")


def instrument(mark: Marks) -> None:
    """Mark the phases of ``run_pipeline`` by wrapping the functions it calls (measurement
    only: behaviour unchanged)."""
    import pyspark.sql.streaming.readwriter as rw

    import sluice.runtime.batch.executor as executor
    import sluice.runtime.rehearsal as rehearsal
    import sluice.runtime.schemas as schemas
    import sluice.runtime.session as session
    import sluice.runtime.sources as src

    def after(module, name, phase):
        original = getattr(module, name)

        def wrapped(*args, **kwargs):
            result = original(*args, **kwargs)
            mark(phase)
            return result

        setattr(module, name, wrapped)

    after(session, "spark_session", "spark_session")
    after(src, "open_stream", "source_opened")
    after(rehearsal, "rehearse_batch", "rehearsed")
    after(rw.DataStreamWriter, "start", "query_started")
    typer = schemas.SparkTyper.__call__

    def typed(self, op, schema):
        out = typer(self, op, schema)
        mark("typed", op=op.name)
        return out

    schemas.SparkTyper.__call__ = typed
    run = executor.BatchExecutor._run
    first: list[int] = []

    def batch(self, df, batch_id, *args, **kwargs):
        if not first:
            mark("first_batch_called", batch=batch_id)
        run(self, df, batch_id, *args, **kwargs)
        if not first:
            first.append(batch_id)
            mark("first_commit", batch=batch_id)

    executor.BatchExecutor._run = batch
    write_sink = executor.BatchExecutor._write_sink

    def sink(self, op, *args, **kwargs):
        out = write_sink(self, op, *args, **kwargs)
        if len(first) == 0:
            mark("first_batch_sink", sink=op.id)
        return out

    executor.BatchExecutor._write_sink = sink


def child(system: str, workdir: str, launched: float, standby: bool = False) -> None:
    mark = Marks(os.path.join(workdir, STANDBY_MARKS if standby else "marks.jsonl"), launched)
    mark("interpreter", t_abs=T0)
    import pyspark  # noqa: F401

    import sluice  # noqa: F401

    mark("imports")
    instrument(mark)
    from sluice.demo import build_pipeline
    from sluice.runtime.session import spark_session

    out = os.path.join(workdir, "out")
    if system == "sluice":
        pipeline = build_pipeline(out, rate=RATE)
        done = []

        def on_batch(m):
            done.append(m)
            mark("batch_done", batch=m.batch_id, duration_s=m.duration_s, rows=m.rows_in)
            if len(done) == 2:  # Spark's split of the first trigger (its progress is final by now)
                mark("first_trigger", progress=_first_progress())

        def on_standby(line: str) -> None:
            for words, phase in (
                ("rehearsed", "rehearsed"),
                ("rehearsal failed", "rehearsal_failed"),
                ("waiting for", "standby_ready"),
                ("took over", "took_over"),
            ):
                if words in line:
                    mark(phase, line=line)

        pipeline.run(
            os.path.join(workdir, "checkpoint"), master="local[2]", on_batch=on_batch, standby=standby, on_standby=on_standby
        )
        return
    from pyspark.sql import functions as F

    from sluice.runtime.sources import open_stream, set_max_rows

    spark = spark_session("local[2]", "startup_anchor", conf={"spark.sql.shuffle.partitions": "2"})
    spec = build_pipeline(out, rate=RATE).graph["readings"].connector
    controls = os.path.join(workdir, "checkpoint", "sources")
    set_max_rows(controls, "readings", spec.max_rows_per_batch)
    stats = (
        open_stream(spark, spec, controls, "readings")
        .filter("voltage BETWEEN 210 AND 250 AND kwh >= 0")
        .groupBy("meter")
        .agg(
            F.count(F.lit(1)).alias("readings"),
            F.avg("kwh").alias("mean_kwh"),
            F.max("kwh").alias("max_kwh"),
            F.sum("kwh").alias("total_kwh"),
        )
    )
    state = {"first": None}

    def write(df, batch_id):
        t = time.time()
        if state["first"] is None:
            state["first"] = batch_id
            mark("first_batch_called", batch=batch_id)
        df.write.mode("overwrite").parquet(os.path.join(out, f"batch={batch_id}"))
        if state["first"] == batch_id:
            mark("first_commit", batch=batch_id)
        mark("batch_done", batch=batch_id, duration_s=round(time.time() - t, 4))

    query = (
        stats.writeStream.outputMode("update")
        .foreachBatch(write)
        .option("checkpointLocation", os.path.join(workdir, "checkpoint", "spark"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    query.awaitTermination()


def _first_progress() -> dict | None:
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    for query in spark.streams.active if spark else []:
        if query.recentProgress:
            return query.recentProgress[0]["durationMs"]
    return None


# ---- the parent --------------------------------------------------------------------------------
def read_marks(workdir: str, name: str = "marks.jsonl") -> list[dict]:
    path = os.path.join(workdir, name)
    if not os.path.exists(path):
        return []
    return [json.loads(line) for line in open(path) if line.strip()]


def one_run(system: str, workdir: str, batches_before_kill: int, timeout: float = 600) -> dict:
    """Launch the child, wait for ``batches_before_kill`` committed batches (then SIGKILL it)
    or, with 0, until its first commit and a few steady batches."""
    marks_path = os.path.join(workdir, "marks.jsonl")
    if os.path.exists(marks_path):
        os.remove(marks_path)
    launched = time.time()
    proc = launch_child(system, workdir, launched)
    want = max(batches_before_kill, 6)
    cpu: dict[int, float] = {}  # pid -> CPU seconds, of every process of the job (driver, JVM, workers)
    cpu_to_first_commit = cpu_at_query_start = None
    while time.time() - launched < timeout:
        marks = read_marks(workdir)
        _sample_cpu(proc.pid, cpu)
        if cpu_at_query_start is None and any(m["phase"] == "query_started" for m in marks):
            cpu_at_query_start = round(sum(cpu.values()), 2)
        if cpu_to_first_commit is None and any(m["phase"] == "first_commit" for m in marks):
            cpu_to_first_commit = round(sum(cpu.values()), 2)
        if sum(m["phase"] == "batch_done" for m in marks) >= want or proc.poll() is not None:
            break
        time.sleep(0.05)
    died = proc.poll()
    if died is not None:
        raise SystemExit(f"the {system} job died ({died}); see {workdir}/child.log")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    marks = read_marks(workdir)
    phases = {}
    for m in marks:
        phases.setdefault(m["phase"], m["t"])
    steady = [m["duration_s"] for m in marks if m["phase"] == "batch_done"][2:]
    return {
        "phases": phases,
        "cpu_s_to_first_commit": cpu_to_first_commit,
        "cpu_s_to_query_start": cpu_at_query_start,
        "steady_batch_s": round(sorted(steady)[len(steady) // 2], 3) if steady else None,
        "first_trigger_ms": next((m.get("progress") for m in marks if "progress" in m), None),
    }


def launch_child(system: str, workdir: str, launched: float, standby: bool = False) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, __file__, "--child", system, "--workdir", workdir, "--launched", repr(launched)]
        + (["--standby"] if standby else []),
        stdout=open(os.path.join(workdir, "standby.log" if standby else "child.log"), "ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _wait_for(workdir: str, name: str, done, proc: subprocess.Popen, what: str, timeout: float = 600) -> list[dict]:
    """Wait until ``done(marks)`` of the marks file ``name``; SystemExit if ``proc`` dies first."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        marks = read_marks(workdir, name)
        if done(marks):
            return marks
        if proc.poll() is not None:
            raise SystemExit(f"the job died ({proc.returncode}) waiting for {what}; see {workdir}")
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for {what}; see {workdir}")


def standby_run(workdir: str) -> dict:
    """The job running on its checkpoint with a hot standby beside it (``--standby``): once
    the standby is ready and the job steady, SIGKILL the job's driver and JVM and time the
    standby's takeover: kill to its first committed batch (a replay of the batch the kill
    interrupted, or the next one), with its CPU seconds in that time."""
    for name in ("marks.jsonl", STANDBY_MARKS):
        if os.path.exists(os.path.join(workdir, name)):
            os.remove(os.path.join(workdir, name))
    active = launch_child("sluice", workdir, time.time())
    try:
        _wait_for(workdir, "marks.jsonl", lambda m: _count(m, "batch_done") >= 2, active, "the active job's batches")
        launched = time.time()
        standby = launch_child("sluice", workdir, launched, standby=True)
        try:
            marks = _wait_for(
                workdir, STANDBY_MARKS, lambda m: _count(m, "standby_ready") > 0, standby, "the standby to be ready"
            )
            ready_s = next(m["t"] for m in marks if m["phase"] == "standby_ready")
            seen = _count(read_marks(workdir), "batch_done")
            _wait_for(
                workdir, "marks.jsonl", lambda m: _count(m, "batch_done") >= seen + 2, active, "the active job's steady batches"
            )
            cpu: dict[int, float] = {}
            _sample_cpu(standby.pid, cpu)
            cpu_before = sum(cpu.values())
            killed = time.time()
            os.killpg(active.pid, signal.SIGKILL)  # the driver and its JVM, no goodbyes
            active.wait()
            cpu_to_commit = None
            deadline = time.time() + 600
            while time.time() < deadline:
                marks = read_marks(workdir, STANDBY_MARKS)
                _sample_cpu(standby.pid, cpu)
                if cpu_to_commit is None and _count(marks, "first_commit"):
                    cpu_to_commit = round(sum(cpu.values()) - cpu_before, 2)
                if _count(marks, "batch_done") >= 4 or standby.poll() is not None:
                    break
                time.sleep(0.05)
            if standby.poll() is not None:
                raise SystemExit(f"the standby died ({standby.returncode}); see {workdir}/standby.log")
        finally:
            if standby.poll() is None:
                os.killpg(standby.pid, signal.SIGKILL)
                standby.wait()
    finally:
        if active.poll() is None:
            os.killpg(active.pid, signal.SIGKILL)
            active.wait()
    marks = read_marks(workdir, STANDBY_MARKS)
    kill_t = killed - launched
    after = {}
    for m in marks:
        if m["t"] >= kill_t and m["phase"] not in after:
            after[m["phase"]] = round(m["t"] - kill_t, 3)
    before = {m["phase"]: m["t"] for m in marks if m["t"] < kill_t}
    return {
        "standby_ready_s": ready_s,
        "phases_before_kill": before,
        "phases_after_kill": after,
        "kill_to_first_commit_s": after.get("first_commit"),
        "cpu_s_kill_to_first_commit": cpu_to_commit,
    }


def _count(marks: list[dict], phase: str) -> int:
    return sum(m["phase"] == phase for m in marks)


def _sample_cpu(group: int, cpu: dict[int, float]) -> None:
    """Record the CPU seconds (user + system) so far of each process in session ``group``
    (the child's: its JVM, and Spark's Python daemons, which make process groups of their
    own, inherit it): the work a start costs, which the other tenants of this machine slow down
    much less than they slow its wall-clock time."""
    tick = os.sysconf("SC_CLK_TCK")
    for pid in os.listdir("/proc"):  # (a worker that exited before a sample is missed)
        if not pid.isdigit():
            continue
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == group:  # field 6 of stat: the session
            cpu[int(pid)] = (int(fields[11]) + int(fields[12])) / tick


def measure(system: str, root: str) -> dict:
    workdir = os.path.join(root, system)
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    cold = one_run(system, workdir, 8)
    restart = one_run(system, workdir, 0)
    out = {"cold": cold, "restart": restart}
    if system == "sluice":
        out["standby"] = standby_run(workdir)
    return out


def split(run: dict) -> dict:
    """A run's launch to first commit, and its two parts: launch to the query's start (the
    interpreter, imports, JVM, session and whatever the system does before it starts its
    query) and the query's start to the first commit."""
    phases = run["phases"]
    total, started = phases.get("first_commit"), phases.get("query_started")
    return {
        "launch_to_first_commit_s": total,
        "before_query_s": started,
        "first_batch_s": round(total - started, 3) if total is not None and started is not None else None,
    }


def _ratio(anchor: float | None, sluice: float | None) -> float | None:
    return round(anchor / sluice, 3) if anchor and sluice else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one run of each")
    parser.add_argument("--runs", type=int, default=None, help="runs of each system, best kept (1 quick, 3 full)")
    parser.add_argument("--child", choices=("sluice", "spark"), help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    parser.add_argument("--launched", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--standby", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--name", default="startup", help="results file name (docs/results/NAME.json)")
    parser.add_argument("--sluice-only", action="store_true", help="no Spark anchor (before/after comparisons)")
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.workdir, args.launched, args.standby)
        return 0
    # imported here, not at the top: the child's start-up is what is measured
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from measure import Anchor, Record, no_outputs

    record = Record("startup", args.quick)
    runs = args.runs or (1 if args.quick else 3)
    root = tempfile.mkdtemp(prefix="sluice-startup-")
    print(f"startup: the demo pipeline on local[2], cold start and restart after SIGKILL, best of {runs}", flush=True)
    systems = ("sluice",) if args.sluice_only else ("sluice", "spark")
    results: dict[str, list[dict]] = {s: [] for s in systems}
    for i in range(runs):
        for system in systems if i % 2 == 0 else systems[::-1]:
            r = measure(system, root)
            results[system].append(r)
            print(
                f"  {system:<7} launch to first commit, cold: {r['cold']['phases'].get('first_commit')} s "
                f"({r['cold']['cpu_s_to_first_commit']} CPU s; query started at {r['cold']['phases'].get('query_started')} s), "
                f"restart: "
                f"{r['restart']['phases'].get('first_commit')} s ({r['restart']['cpu_s_to_first_commit']} CPU s), "
                f"steady batch {r['cold']['steady_batch_s']} s",
                flush=True,
            )
            print("          cold phases:    " + json.dumps(r["cold"]["phases"]), flush=True)
            print("          restart phases: " + json.dumps(r["restart"]["phases"]), flush=True)
            if "standby" in r:
                print(
                    f"          standby: kill to first commit {r['standby']['kill_to_first_commit_s']} s "
                    f"({r['standby']['cpu_s_kill_to_first_commit']} CPU s); after the kill: "
                    + json.dumps(r["standby"]["phases_after_kill"]),
                    flush=True,
                )

    def best(system: str, which: str) -> dict:
        return min(results[system], key=lambda r: r[which]["phases"].get("first_commit", 1e9))[which]

    summary = {s: {w: best(s, w) for w in ("cold", "restart")} for s in results}
    summary["sluice"]["standby"] = min(
        (r["standby"] for r in results["sluice"]), key=lambda r: r["kill_to_first_commit_s"] or 1e9
    )
    out = {
        "benchmark": "startup",
        "runs": runs,
        "setup": {"pipeline": "sluice demo (smart meters)", "rate": RATE, "master": "local[2]"},
        "best": summary,
        "all": results,
    }
    launch = {s: {w: split(summary[s][w]) for w in ("cold", "restart")} for s in summary}
    out["launch_to_first_commit"] = launch
    sluice_cold = launch["sluice"]["cold"]["launch_to_first_commit_s"]
    sluice_restart = launch["sluice"]["restart"]["launch_to_first_commit_s"]
    spark_cold = launch["spark"]["cold"]["launch_to_first_commit_s"] if "spark" in launch else None
    spark_restart = launch["spark"]["restart"]["launch_to_first_commit_s"] if "spark" in launch else None
    out["ratio"] = _ratio(spark_cold, sluice_cold)
    out["restart_ratio"] = _ratio(spark_restart, sluice_restart)
    standby = summary["sluice"]["standby"]["kill_to_first_commit_s"]
    # Spark's restart against Sluice's hot standby (larger: the standby is back sooner)
    out["standby_ratio"] = _ratio(spark_restart, standby)
    shutil.rmtree(root, ignore_errors=True)
    record.publish(
        RESULTS / f"{args.name}.json",
        out,
        {
            "benchmark": "startup",
            "ratio": out["ratio"],
            "restart_ratio": out["restart_ratio"],
            "standby_ratio": out["standby_ratio"],
            "sluice_cold_launch_to_first_commit_s": sluice_cold,
            "spark_cold_launch_to_first_commit_s": spark_cold,
            "sluice_restart_launch_to_first_commit_s": sluice_restart,
            "spark_restart_launch_to_first_commit_s": spark_restart,
            "sluice_cold_before_query_s": launch["sluice"]["cold"]["before_query_s"],
            "spark_cold_before_query_s": launch["spark"]["cold"]["before_query_s"] if "spark" in launch else None,
            "sluice_standby_kill_to_first_commit_s": standby,
            "sluice_steady_batch_s": summary["sluice"]["cold"]["steady_batch_s"],
        },
        anchor=Anchor(
            ran="Spark Structured Streaming's own stateful query over the same source, cold and restarted the same way",
            formulation="groupBy(meter).agg(count, avg, max, sum), update mode, written with foreachBatch; both "
            "timed from the launch of the job's process to its first committed batch (cold, and after a SIGKILL "
            "and relaunch)",
            state_store="default (HDFS-backed)",
            shuffle_partitions=2,
        ),
        **no_outputs("times to the first commit; the two jobs' outputs are not compared"),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
