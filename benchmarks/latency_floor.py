"""End-to-end latency below the micro-batch floor: Sluice and Spark, micro-batch and real-time.

Two pipelines over the same Kafka topics (input: two partitions of JSON records
``{"id", "k", "v", "ts"}``, ``ts`` the producer's wall clock in microseconds when it sent the
record; output: one partition, read ``read_committed``):

- ``stateless``: ``filter("v >= 0")``, then ``id, k, ts, v * 2``;
- ``keyed``: ``key_by("k").aggregate(n=count(), ts=max(ts))`` over 100 keys (update output).

Four systems run each: ``sluice_microbatch`` (Sluice's Kafka source and transactional sink,
trigger 0), ``sluice_realtime`` (the same pipeline with a latency goal below the micro-batch
floor: ``plan.mode`` runs it in Spark's real-time mode), ``spark_microbatch`` (Spark's own
query, tuned: Kafka source and sink, RocksDB state, ``processingTime=0``, shuffle partitions
= cores) and ``spark_realtime`` (the same query with ``trigger(realTime="5 seconds")``).
Each system runs in a process of its own; this process produces at the rate and reads the
output topic.

Latency of a record = the time the output that first reflects it is read from the output
topic - the producer's ``ts``. Stateless: each output row carries its input's ``id`` and
``ts``. Keyed: the producer numbers each key's records (1, 2, ...); the record numbered s of
key k is reflected by the first output of k with ``n >= s``. Only records sent after a
warm-up count. ``outputs_equal``: every system's output holds every input id exactly (the
stateless ids; duplicates from an at-least-once sink are counted, not treated as loss) and
every key's final count equals the records sent for it.

    .venv/bin/python benchmarks/latency_floor.py [--quick] [--systems ...] [--out FILE]
    .venv/bin/python benchmarks/latency_floor.py --profile   # where one batch's time goes

One JSON line: ``p99_ms`` (and ``p50_ms``, ``p95_ms``) as ``{system: {pipeline: {rate: ms}}}``,
``null`` with a ``reasons`` entry for what could not run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from measure import Anchor, Record  # noqa: E402

KAFKA = "127.0.0.1:9092"
SYSTEMS = ("sluice_microbatch", "sluice_realtime", "spark_microbatch", "spark_realtime")
PIPELINES = ("stateless", "keyed")
RATES = (1000, 10000, 50000)
KEYS = 100
IN_PARTITIONS = 2
GOAL_REAL_TIME = "200ms"  # below the micro-batch floor: plan.mode chooses real-time mode


# --- the worker: one system's queries, one at a time, driven over stdin/stdout ----------------------


def _say(**fields) -> None:
    print("@@" + json.dumps(fields, default=str), flush=True)


def _schema():
    import pyarrow as pa

    return pa.schema([("id", pa.int64()), ("k", pa.string()), ("v", pa.float64()), ("ts", pa.int64())])


def _sluice_pipeline(kind: str, src: str, dst: str, goal: str | None):
    import sluice
    from sluice import agg, sinks, sources

    p = sluice.Pipeline(f"lat_{kind}")
    s = p.source(sources.kafka(src, _schema(), bootstrap=KAFKA))
    if kind == "stateless":
        out = s.filter("v >= 0").select("id", "k", "ts", "v * 2 AS v2")
    else:
        out = s.key_by("k").aggregate(n=agg.count(), ts=agg.max("ts"))
    out.sink(sinks.kafka(dst, bootstrap=KAFKA, key=("k",)))
    if goal is not None:
        p.goals(latency=goal)
    return p


def _spark_query(spark, kind: str, src: str, dst: str, real_time: bool, checkpoint: str):
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    raw = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", KAFKA)
        .option("subscribe", src)
        .option("startingOffsets", "earliest")
        .load()
    )
    rows = raw.select(F.from_json(F.col("value").cast("string"), from_arrow_schema(_schema())).alias("r")).select("r.*")
    if kind == "stateless":
        out = rows.filter("v >= 0").selectExpr("id", "k", "ts", "v * 2 AS v2")
    else:
        out = rows.groupBy("k").agg(F.count(F.lit(1)).alias("n"), F.max("ts").alias("ts"))
    writer = (
        out.select(F.col("k").alias("key"), F.to_json(F.struct(*out.columns)).alias("value"))
        .writeStream.format("kafka")
        .option("kafka.bootstrap.servers", KAFKA)
        .option("topic", dst)
        .option("checkpointLocation", checkpoint)
        .outputMode("update")
    )
    if real_time:
        return writer.trigger(realTime="5 seconds").start()
    return writer.trigger(processingTime="0 seconds").start()


def worker(system: str) -> None:
    from sluice.plan.mode import SPARK_KAFKA_PACKAGE
    from sluice.runtime.session import spark_session

    conf = {"spark.sql.shuffle.partitions": str(os.cpu_count() or 2), "spark.ui.enabled": "false"}
    if system != "sluice_microbatch":
        conf["spark.jars.packages"] = SPARK_KAFKA_PACKAGE
    if system.startswith("spark"):
        conf["spark.sql.streaming.stateStore.providerClass"] = (
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
        )
    # real-time mode holds a task slot per source partition and per shuffle partition for
    # the whole batch duration: 2 + 2 here, more than the 2 cores (threads, not cores)
    slots = (os.cpu_count() or 2) * (2 if system.endswith("realtime") else 1)
    spark = spark_session(master=f"local[{slots}]", app_name=f"latency-{system}", conf=conf)
    progress: list[dict] = []
    if system == "sluice_microbatch":
        from pyspark.sql.streaming import StreamingQueryListener

        class Progress(StreamingQueryListener):
            def onQueryStarted(self, event):
                pass

            def onQueryIdle(self, event):
                pass

            def onQueryTerminated(self, event):
                pass

            def onQueryProgress(self, event):
                progress.append({"rows": event.progress.numInputRows, **dict(event.progress.durationMs)})

        spark.streams.addListener(Progress())
    _say(up=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["cmd"] == "quit":
            break
        kind, src, dst = cmd["pipeline"], cmd["src"], cmd["dst"]
        checkpoint = tempfile.mkdtemp(prefix=f"lat-{system}-")
        stop = threading.Event()
        progress.clear()
        out: dict = {}
        try:
            if system.startswith("spark"):
                query = _spark_query(spark, kind, src, dst, system == "spark_realtime", checkpoint)
                _say(ready=True)
                sys.stdin.readline()  # "stop"
                error = query.exception()
                query.stop()
                if error is not None:
                    raise RuntimeError(str(error).splitlines()[0])
            else:
                out = _run_sluice(spark, system, kind, src, dst, checkpoint, stop, progress)
            _say(stopped=True, **out)
        except Exception as e:  # the parent records the system as failed with this reason
            _say(error=f"{type(e).__name__}: {str(e)[:600]}")
    spark.stop()


def _run_sluice(spark, system, kind, src, dst, checkpoint, stop, progress) -> dict:
    from sluice.plan.mode import choose_mode
    from sluice.runtime.batch.executor import BatchExecutor

    goal = GOAL_REAL_TIME if system == "sluice_realtime" else None
    pipeline = _sluice_pipeline(kind, src, dst, goal)
    decision = choose_mode(pipeline.graph)
    result: dict = {"mode": decision.mode, "reason": decision.describe()}
    done = threading.Event()
    errors: list[str] = []
    seen = {"executor": None}

    def runner():
        ready = [False]

        def stop_when(running):  # the executor of a micro-batch run, the query of a real-time one
            if isinstance(running, BatchExecutor):
                seen["executor"] = running
                up = running.batches_done >= 1
            else:
                up = True
            if up and not ready[0]:
                ready[0] = True
                _say(ready=True)
            return stop.is_set()

        try:  # Pipeline.run chooses the mode from the goal (plan.mode)
            pipeline.run(checkpoint, spark=spark, stop_when=stop_when)
        except Exception as e:
            errors.append(f"{type(e).__name__}: {str(e)[:600]}")
            _say(ready=True)
        finally:
            done.set()

    threading.Thread(target=runner, daemon=True).start()
    sys.stdin.readline()  # "stop"
    stop.set()
    done.wait(120)
    if errors:
        raise RuntimeError(errors[0])
    executor = seen["executor"]
    if executor is not None:
        result["phases"] = list(executor.phases)
        result["spark_progress"] = list(progress)
    return result


# --- the parent: produce, read, measure ---------------------------------------------------------------


class Worker:
    def __init__(self, system: str):
        self.system = system
        env = {**os.environ, "SLUICE_SPARK_UI": "0"}
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", system],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=ROOT,
        )
        self.expect("up", 300)

    def expect(self, key: str, timeout: float) -> dict:
        deadline = time.time() + timeout
        assert self.proc.stdout is not None
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{self.system}: the worker exited (code {self.proc.poll()})")
            if line.startswith("@@"):
                msg = json.loads(line[2:])
                if key in msg or "error" in msg:
                    return msg
        raise RuntimeError(f"{self.system}: no {key!r} within {timeout} s")

    def send(self, **cmd) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        try:
            self.send(cmd="quit")
            self.proc.wait(60)
        except Exception:
            self.proc.kill()


def topics(*specs: tuple[str, int]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": KAFKA})
    for f in admin.create_topics([NewTopic(t, n, 1) for t, n in specs]).values():
        f.result()


def delete_topics(*names: str) -> None:
    from confluent_kafka.admin import AdminClient

    AdminClient({"bootstrap.servers": KAFKA}).delete_topics(list(names))


class Reader(threading.Thread):
    """Reads the output topic (read_committed), keeping each record's arrival time."""

    def __init__(self, topic: str):
        super().__init__(daemon=True)
        from confluent_kafka import Consumer

        self.consumer = Consumer(
            {
                "bootstrap.servers": KAFKA,
                "group.id": f"lat-{uuid.uuid4().hex[:6]}",
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 5,
                "enable.auto.commit": False,
            }
        )
        self.consumer.subscribe([topic])
        self.arrivals: list[tuple[float, bytes]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for m in self.consumer.consume(10_000, 0.05):
                if m.error() is None:
                    self.arrivals.append((time.time(), m.value()))
        self.consumer.close()


def produce(topic: str, rate: int, seconds: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Send ``rate`` records a second for ``seconds``, paced in 10 ms steps; returns the sent
    records' ids, ts (us) and per-key sequence numbers (keys are id % KEYS)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": KAFKA, "linger.ms": 1, "queue.buffering.max.messages": 1_000_000})
    step = 0.01
    per_step = max(1, int(rate * step))
    ts_all: list[int] = []
    n = 0
    t0 = time.time()
    while time.time() - t0 < seconds:
        target = t0 + (n // per_step) * step
        pause = target - time.time()
        if pause > 0:
            time.sleep(pause)
        now_us = int(time.time() * 1e6)
        for i in range(n, n + per_step):
            producer.produce(
                topic, b'{"id":%d,"k":"k%d","v":%d.5,"ts":%d}' % (i, i % KEYS, i % 7, now_us), partition=i % IN_PARTITIONS
            )
        ts_all.extend([now_us] * per_step)
        n += per_step
        producer.poll(0)
    producer.flush(30)
    ids = np.arange(n)
    seq = ids // KEYS + 1  # the record's number within its key (keys cycle)
    return ids, np.array(ts_all, np.int64), seq


def measure(kind: str, arrivals: list[tuple[float, bytes]], ids, ts, seq, warm_us: int) -> dict:
    recv = np.array([a for a, _ in arrivals]) * 1e6
    values = [json.loads(v) for _, v in arrivals]
    counted = ts >= warm_us
    if kind == "stateless":
        out_ids = np.array([v["id"] for v in values], np.int64)
        unique, first = np.unique(out_ids, return_index=True)
        equal = bool(len(unique) == len(ids) and np.array_equal(unique, ids))
        visible = np.full(len(ids), np.nan)
        visible[unique[unique < len(ids)]] = recv[first[unique < len(ids)]]
        dup = int(len(out_ids) - len(unique))
    else:
        keys = np.array([int(v["k"][1:]) for v in values], np.int64)
        ns = np.array([v["n"] for v in values], np.int64)
        visible = np.full(len(ids), np.nan)
        equal = True
        for k in range(KEYS):
            mine = np.flatnonzero(keys == k)
            sent = ids % KEYS == k
            if len(mine) == 0:
                equal = equal and not sent.any()
                continue
            order = mine[np.argsort(recv[mine], kind="stable")]
            reach = np.maximum.accumulate(ns[order])
            want = seq[sent]
            at = np.searchsorted(reach, want, side="left")
            ok = at < len(order)
            vis = np.full(len(want), np.nan)
            vis[ok] = recv[order[at[ok]]]
            visible[sent] = vis
            equal = equal and int(reach[-1]) == int(sent.sum())
        dup = 0
    lat = (visible - ts)[counted] / 1000
    missing = int(np.isnan(lat).sum())
    lat = lat[~np.isnan(lat)]
    if len(lat) == 0:
        return {"outputs_equal": equal, "missing": missing}
    p50, p95, p99 = np.percentile(lat, [50, 95, 99])
    return {
        "outputs_equal": equal and missing == 0,
        "p50": round(float(p50), 1),
        "p95": round(float(p95), 1),
        "p99": round(float(p99), 1),
        "records": int(counted.sum()),
        "missing": missing,
        "duplicates": dup,
    }


def run_one(w: Worker, kind: str, rate: int, warm_s: float, measure_s: float) -> dict:
    tag = uuid.uuid4().hex[:8]
    src, dst = f"lat_in_{tag}", f"lat_out_{tag}"
    topics((src, IN_PARTITIONS), (dst, 1))
    reader = Reader(dst)
    reader.start()
    try:
        w.send(cmd="start", pipeline=kind, src=src, dst=dst)
        msg = w.expect("ready", 180)
        if "error" in msg:
            return {"error": msg["error"]}
        time.sleep(5.0 if w.system.endswith("realtime") else 0.5)
        warm_us = int((time.time() + warm_s) * 1e6)
        ids, ts, seq = produce(src, rate, warm_s + measure_s)
        deadline = time.time() + 30
        expected = len(ids) if kind == "stateless" else KEYS
        while time.time() < deadline and len(reader.arrivals) < expected:
            time.sleep(0.2)
        if kind == "keyed":  # until every key's last count is out, or the deadline
            last_seq = seq[-KEYS:]
            while time.time() < deadline:
                best: dict[int, int] = {}
                for _, v in list(reader.arrivals):
                    d = json.loads(v)
                    best[d["k"]] = max(best.get(d["k"], 0), d["n"])
                if len(best) == KEYS and all(best.get(f"k{i % KEYS}", 0) >= s for i, s in zip(ids[-KEYS:], last_seq)):
                    break
                time.sleep(0.3)
        time.sleep(0.5)
        w.send(cmd="stop")
        done = w.expect("stopped", 180)
        reader.stop.set()
        reader.join(10)
        result = measure(kind, reader.arrivals, ids, ts, seq, warm_us)
        if "error" in done:
            result["error"] = done["error"]
        for key in ("mode", "reason", "phases", "spark_progress"):
            if key in done:
                result[key] = done[key]
        return result
    finally:
        reader.stop.set()
        delete_topics(src, dst)


def profile_table(result: dict) -> dict:
    """Mean ms per phase over the batches with rows (after the first two)."""
    phases = [p for p in result.get("phases", []) if p.get("rows")][2:]
    spark = [p for p in result.get("spark_progress", []) if p.get("rows")][2:]
    out: dict = {"batches": len(phases)}
    for name in sorted({k for p in phases for k in p} - {"batch_id", "rows"}):
        out[f"sluice.{name}"] = round(1000 * float(np.mean([p.get(name, 0.0) for p in phases])), 1)
    for name in sorted({k for p in spark for k in p} - {"rows"}):
        out[f"spark.{name}"] = round(float(np.mean([p.get(name, 0) for p in spark])), 1)
    out["rows_per_batch"] = round(float(np.mean([p["rows"] for p in phases])), 1) if phases else 0
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--profile", action="store_true", help="one keyed run at 1k records/s: where a batch's time goes")
    ap.add_argument("--systems", nargs="*", default=list(SYSTEMS))
    ap.add_argument("--rates", nargs="*", type=int, default=None, help="records/s (default: all; quick: the two lowest)")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "results", "latency_floor.json"))
    ap.add_argument("--worker")
    args = ap.parse_args()
    if args.worker:
        worker(args.worker)
        return
    warm_s, measure_s = (2.0, 5.0) if args.quick else (10.0, 30.0)
    args.rates = args.rates or list(RATES[:2] if args.quick else RATES)
    if args.profile:
        w = Worker("sluice_microbatch")
        try:
            r = run_one(w, "keyed", 1000, 5.0, 20.0)
        finally:
            w.close()
        print(
            json.dumps(
                {
                    "profile": profile_table(r),
                    "p50_ms": r.get("p50"),
                    "p95_ms": r.get("p95"),
                    "p99_ms": r.get("p99"),
                    "outputs_equal": r.get("outputs_equal"),
                }
            )
        )
        return
    record = Record("latency_floor", args.quick)
    started = time.time()
    table: dict = {s: {p: {str(r): None for r in RATES} for p in PIPELINES} for s in SYSTEMS}
    p50 = json.loads(json.dumps(table))
    p95 = json.loads(json.dumps(table))
    reasons: dict = {}
    detail: dict = {}
    equal = True
    for system in args.systems:
        try:
            w = Worker(system)
        except Exception as e:
            reasons[system] = f"the worker did not start: {e}"
            continue
        try:
            for kind in PIPELINES:
                for rate in args.rates:
                    r = run_one(w, kind, rate, warm_s, measure_s)
                    key = f"{system}/{kind}/{rate}"
                    detail[key] = {k: v for k, v in r.items() if k not in ("phases", "spark_progress")}
                    print(json.dumps({key: detail[key]}), file=sys.stderr, flush=True)
                    if "error" in r or "p99" not in r:
                        reasons[key] = r.get("error", "no output measured")
                        equal = False
                        continue
                    if system == "sluice_realtime" and r.get("mode") != "real-time":
                        reasons[key] = f"ran in {r.get('mode')}: {r.get('reason')}"
                    table[system][kind][str(rate)] = r["p99"]
                    p50[system][kind][str(rate)] = r["p50"]
                    p95[system][kind][str(rate)] = r["p95"]
                    equal = equal and bool(r["outputs_equal"])
        finally:
            w.close()
    line = {
        "benchmark": "latency_floor",
        "quick": args.quick,
        "p99_ms": table,
        "p95_ms": p95,
        "p50_ms": p50,
        "reasons": reasons,
        "runs": detail,
        "warm_s": warm_s,
        "measure_s": measure_s,
        "elapsed_s": round(time.time() - started, 1),
    }
    record.publish(
        Path(args.out),
        line,
        line,
        anchor=Anchor(
            ran="Spark Structured Streaming's own query, tuned: spark_microbatch (processingTime=0) and "
            "spark_realtime (trigger(realTime='5 seconds'))",
            formulation="Kafka source and sink, the same topics; stateless: filter v >= 0 then v * 2; keyed: "
            "groupBy(k).agg(count, max(ts)), update mode",
            state_store="rocksdb",
            shuffle_partitions=os.cpu_count(),
        ),
        outputs_equal=equal,
        outputs_compared="every system's output holds every input id (stateless) and every key's final count "
        "equals the records sent for it (keyed)",
    )


if __name__ == "__main__":
    main()
