"""Chaos: SIGKILL a running job's driver at random moments, many times, and check that no
row was lost or counted twice; recovery time (restart to first commit) as a distribution.

    .venv/bin/python benchmarks/chaos.py [--quick] [--kills N] [--kafka HOST:PORT]

The job: a generator source at a fixed rate (a finite number of rows, 10,000 keys, event
times in order) and a second, sparser one of the same keys, feeding three stateful
operators, each into a Parquet files sink (one directory per batch, replaced by a replay):

- a running count per key (``key_by("meter").aggregate(n=count())``);
- a tumbling one-minute window per key (``key_by("meter").window(tumbling("1m"))``), whose
  windows close as the watermark passes them and at the end of the input; the same window
  counts also go to a Kafka topic of this run's own (one transaction per batch);
- a windowed inner join of the two sources per key (one-minute tumbling windows).

A child process runs the job (``Pipeline.run`` with a checkpoint, as ``sluice run`` does);
the parent kills its whole process group (the Python driver and its JVM) at a random
moment, uniform in ``--kill-after`` seconds after the restart committed its first batch,
relaunches it with the same checkpoint, and measures recovery: launch to the first batch
the new run commits. After the last kill the job runs to the end of its input, and each
output is checked against the sources' rows, generated again (with the start times the
checkpoint's offset log recorded):

- counts: per key, the running count of the latest batch that updated it;
- windows (files) and windows (Kafka, read back ``read_committed``): per key, the sum of its
  windows' counts plus the records the windows took as late;
- join: per key, the pairs the join emitted against the pairs of the two sides' rows that
  share a key and a window.

Rows counted too few times are lost, too many times duplicated; both must be 0 for every
output.

Prints one JSON line: ``kills``, ``lost``, ``duplicated``, ``recovery_p50_s``,
``recovery_p95_s`` (and the per-output counts); writes docs/results/chaos.json.
``--quick``: 20 kills. Full mode: 100 kills.

Then the scenarios of other failures, each checked against an undisturbed run or the
sources' rows the same way (``--scenarios`` picks them; none needs more than this machine):

- ``cluster`` (``chaos_cluster.py``): a standalone cluster whose master and two workers each
  run in a network namespace of their own; a worker's network cut mid-batch and restored, a
  worker SIGKILLed and replaced, the driver SIGKILLed and restarted (needs root and iproute2);
- ``disk`` (``chaos_disk.py``): the checkpoint's and the outputs' disk (a small tmpfs) filled
  mid-run and freed; the job stops with a clear error and resumes exactly once (needs root);
- ``soak`` (``soak.py``, full mode only): the job undisturbed for an hour at a steady rate;
  the slopes of its processes' memory, its checkpoint's size and its batch times.

Broker restarts are tests (tests/connectors/test_broker_restarts.py).
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
import uuid
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import recovery  # the kill-and-watch machinery of the recovery benchmark
from measure import Anchor, Record

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"
SYSTEM = "chaos"


JOIN_SOURCE = "prices"
JOIN_EVERY = 20  # the join's second side has one row for every 20 of the first
WINDOW_US = 60_000_000  # the windows and the join: tumbling, one minute


def prices_spec(rate: float, total_rows: int, per_batch: int):
    """The join's second side: the same keys, a twentieth of the rows at a twentieth of the
    rate, so both sources end together and their event times advance in step."""
    from sluice import sources

    return sources.generator(
        fields={"meter": sources.Keys(recovery.KEYS, prefix="meter-"), "price": sources.Uniform(0, 1), "ts": sources.EventTime()},
        rate=rate / JOIN_EVERY,
        total_rows=total_rows // JOIN_EVERY,
        seed=12,
        max_rows_per_batch=max(1, per_batch // JOIN_EVERY),
    )


def child(workdir: str, rate: float, total_rows: int, per_batch: int, kafka: str, topic: str) -> None:
    from sluice import Pipeline, agg, sinks
    from sluice import windows as W

    p = Pipeline("chaos", partitions=2)
    readings = p.source(recovery.make_spec(rate, total_rows, per_batch), name=recovery.SOURCE)
    prices = p.source(prices_spec(rate, total_rows, per_batch), name=JOIN_SOURCE)
    out = os.path.join(workdir, SYSTEM, "out")
    (
        readings.key_by("meter")
        .aggregate(n=agg.count(), name="counts")
        .sink(sinks.files(os.path.join(out, "counts")), name="counts_out")
    )
    windows = readings.key_by("meter").window(W.tumbling("1m")).aggregate(n=agg.count(), name="per_minute")
    windows.sink(sinks.files(os.path.join(out, "windows")), name="windows_out")
    windows.sink(sinks.kafka(topic, bootstrap=kafka, key="meter"), name="windows_kafka")
    (
        readings.key_by("meter")
        .join(prices.key_by("meter"), window=W.tumbling("1m"), name="priced")
        .sink(sinks.files(os.path.join(out, "join")), name="join_out")
    )
    p.run(os.path.join(workdir, SYSTEM, "checkpoint"), master="local[2]")


def make_topic(kafka: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka})
    try:
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    except Exception as e:
        raise SystemExit(f"chaos: cannot create Kafka topic {topic} at {kafka} (is Kafka running?): {e}") from None


def delete_topic(kafka: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": kafka})  # kept alive until the futures resolve
    for future in admin.delete_topics([topic]).values():
        try:
            future.result(30)
        except Exception as e:
            print(f"  could not delete Kafka topic {topic}: {e}", flush=True)


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
                "--kafka",
                args.kafka,
                "--topic",
                args.topic,
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


def start_us(workdir: str) -> dict[str, int]:
    """Source name -> when its row 0 was due, from the newest entry of Spark's offset log
    (every entry carries it, so a replay regenerates identical event times)."""
    import json

    offsets = os.path.join(workdir, SYSTEM, "checkpoint", "spark", "offsets")
    newest = max((int(f) for f in os.listdir(offsets) if f.isdigit()), default=None)
    if newest is None:
        raise SystemExit(f"no entry in Spark's offset log {offsets}")
    found = {}
    for line in open(os.path.join(offsets, str(newest))).read().splitlines()[2:]:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and "source" in entry:
            found[entry["source"]] = int(entry["start_us"])
    return found


def regenerate(spec, start: int):
    import pyarrow as pa

    return pa.Table.from_batches(spec.generate(0, spec.total_rows, start))


def kafka_window_counts(kafka: str, topic: str, timeout: float = 120):
    """Per key, the window counts summed over every record of ``topic`` a ``read_committed``
    consumer sees (records of aborted transactions are skipped by Kafka)."""
    import io

    import pyarrow.json as pj
    from confluent_kafka import Consumer, IsolationLevel, KafkaError, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": kafka})
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions

    def ends(level) -> dict[int, int]:
        futures = admin.list_offsets(
            {TopicPartition(topic, q): OffsetSpec.latest() for q in partitions}, isolation_level=level, request_timeout=10
        )
        return {tp.partition: f.result().offset for tp, f in futures.items()}

    deadline = time.time() + timeout
    # a commit returns before Kafka has written its markers: read once no transaction is pending
    stable = ends(IsolationLevel.READ_COMMITTED)
    while stable != ends(IsolationLevel.READ_UNCOMMITTED) and time.time() < deadline:
        time.sleep(0.1)
        stable = ends(IsolationLevel.READ_COMMITTED)
    consumer = Consumer(
        {
            "bootstrap.servers": kafka,
            "group.id": f"{topic}-check",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition(topic, q, 0) for q in stable])
    left = {q for q, end in stable.items() if end > 0}
    values: list[bytes] = []
    while left and time.time() < deadline:
        for m in consumer.consume(10_000, 0.5):
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF and m.offset() >= stable[m.partition()]:
                    left.discard(m.partition())
                continue
            if m.offset() < stable[m.partition()]:
                values.append(m.value())
            if m.offset() >= stable[m.partition()] - 1:
                left.discard(m.partition())
    consumer.close()
    if left:
        raise SystemExit(f"Kafka topic {topic}: partitions {sorted(left)} not read to their end in {timeout:g} s")
    if not values:
        return None, 0
    table = pj.read_json(io.BytesIO(b"\n".join(values)))
    return table.group_by("meter").aggregate([("n", "sum")]).rename_columns(["meter", "n"]), len(values)


def check(workdir: str, args) -> dict:
    import numpy as np
    import pyarrow as pa

    from sluice.runtime.batch import metrics as metrics_log

    starts = start_us(workdir)
    source = regenerate(recovery.make_spec(args.rate, args.total_rows, args.rows_per_batch), starts[recovery.SOURCE])
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
    late = sum(m.late_records for m in metrics_log.read(os.path.join(workdir, SYSTEM, "checkpoint")))

    def windows_against_truth(summed) -> tuple[int, int]:
        if summed is None:
            return args.total_rows, 0
        lost, dup = compare(truth, summed)
        return max(0, lost - late), dup  # records the windows took as late are accounted for

    windows = latest_per_key(os.path.join(out, "windows"), ["meter", "n"])
    summed = None if windows is None else windows.group_by("meter").aggregate([("n", "sum")]).rename_columns(["meter", "n"])
    window_lost, window_dup = windows_against_truth(summed)
    in_kafka, kafka_records = kafka_window_counts(args.kafka, args.topic)
    kafka_lost, kafka_dup = windows_against_truth(in_kafka)

    # the join: per key, the pairs of rows of the two sides that share a key and a window
    prices = regenerate(prices_spec(args.rate, args.total_rows, args.rows_per_batch), starts[JOIN_SOURCE])

    def per_window(side: pa.Table, name: str) -> pa.Table:
        window = side["ts"].cast(pa.int64()).to_numpy() // WINDOW_US
        keyed = pa.table({"meter": side["meter"], "w": window})
        return keyed.group_by(["meter", "w"]).aggregate([("w", "count")]).rename_columns(["meter", "w", name])

    both = per_window(source, "l").join(per_window(prices, "r"), keys=["meter", "w"], join_type="inner")
    pairs = pa.table({"meter": both["meter"], "p": pa.array(both["l"].to_numpy() * both["r"].to_numpy(), type=pa.int64())})
    joined_truth = pairs.group_by("meter").aggregate([("p", "sum")]).rename_columns(["meter", "true_n"])
    joined = latest_per_key(os.path.join(out, "join"), ["meter"])
    if joined is None:
        join_lost, join_dup = int(np.sum(pairs["p"].to_numpy())), 0
    else:
        found = joined.group_by("meter").aggregate([("meter", "count")]).rename_columns(["meter", "n"])
        join_lost, join_dup = compare(joined_truth, found)
    return {
        "counts": {"lost": count_lost, "duplicated": count_dup},
        "windows": {"lost": window_lost, "duplicated": window_dup, "late": late},
        "windows_kafka": {"lost": kafka_lost, "duplicated": kafka_dup, "records": kafka_records},
        "join": {
            "lost": join_lost,
            "duplicated": join_dup,
            "pairs": int(np.sum(pairs["p"].to_numpy())),
            "found": 0 if joined is None else joined.num_rows,
        },
    }


def scenario(name: str, quick: bool) -> dict:
    """One scenario's figures (it raises when it cannot run here: not root, no iproute2)."""
    if name == "cluster":
        import chaos_cluster

        return chaos_cluster.run(quick)
    if name == "disk":
        import chaos_disk

        return chaos_disk.run(quick)
    raise SystemExit(f"chaos: unknown scenario {name!r}; known: cluster, disk")


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))], 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 kills")
    parser.add_argument("--kills", type=int, default=None, help="driver kills (default 20 quick, 100 full)")
    parser.add_argument("--rate", type=float, default=2_000, help="source rows per second")
    parser.add_argument(
        "--seconds-per-kill",
        type=float,
        default=33.0,
        help="seconds of input per kill (the total is this times kills + 1, at --rate)",
    )
    parser.add_argument("--total-rows", type=int, default=None, help="overrides --seconds-per-kill")
    parser.add_argument("--kafka", default="127.0.0.1:9092", help="the Kafka broker of the windows' Kafka sink")
    parser.add_argument("--topic", help=argparse.SUPPRESS)  # the run's own topic, made by the parent
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
    parser.add_argument(
        "--scenarios",
        default="cluster,disk",
        help="the other failures to run after the kills, comma-separated: cluster, disk ('' for none)",
    )
    parser.add_argument(
        "--soak-s",
        type=float,
        default=None,
        help="seconds of the undisturbed soak after the kills (default 0 quick, 3600 full; benchmarks/soak.py)",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.kills = args.kills if args.kills is not None else (20 if args.quick else 100)
    args.soak_s = args.soak_s if args.soak_s is not None else (0.0 if args.quick else 3600.0)
    # enough input that the job outlives every kill: a kill's cycle (restart to first commit,
    # some 20-30 s here, plus the wait before the kill) stays under --seconds-per-kill
    args.total_rows = args.total_rows or int(args.rate * args.seconds_per_kill * (args.kills + 1))
    if args.child:
        child(args.workdir, args.rate, args.total_rows, args.rows_per_batch, args.kafka, args.topic)
        return 0
    args.topic = f"sluice_chaos_{uuid.uuid4().hex[:10]}"
    make_topic(args.kafka, args.topic)
    record = Record("chaos", args.quick)
    workdir = tempfile.mkdtemp(prefix="sluice-chaos-")
    mode = "quick" if args.quick else "full"
    print(
        f"chaos: {args.kills} driver SIGKILLs, source {args.rate:,.0f} rows/s ({args.total_rows:,} rows), "
        f"keyed count, tumbling windows (files and Kafka topic {args.topic} at {args.kafka}) and a windowed join, "
        f"local[2] ({mode} mode); work in {workdir}",
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
    try:
        checked = check(workdir, args)
    finally:
        delete_topic(args.kafka, args.topic)
    outputs = ("counts", "windows", "windows_kafka", "join")
    lost = sum(checked[o]["lost"] for o in outputs)
    duplicated = sum(checked[o]["duplicated"] for o in outputs)
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
    unequal = False  # a scenario's outputs differ from its undisturbed run
    for name in [n for n in args.scenarios.split(",") if n]:
        found = scenario(name, args.quick)
        line[name] = found
        lost, duplicated = lost + found.get("lost", 0), duplicated + found.get("duplicated", 0)
        unequal = unequal or found.get("outputs_equal") is False
    if args.soak_s > 0:
        import soak

        soaked = soak.run(args.soak_s, args.rate, args.kafka)["figures"]
        line["soak"] = {k: soaked[k] for k in ("seconds", "batches", "slopes", "slopes_second_half", "lost", "duplicated")}
        lost, duplicated = lost + soaked["lost"], duplicated + soaked["duplicated"]
    results = {
        **line,
        "setup": {
            "rate_rows_per_s": args.rate,
            "total_rows": args.total_rows,
            "rows_per_batch": args.rows_per_batch,
            "seconds_of_input_per_kill": args.seconds_per_kill,
            "join_side_rows": args.total_rows // JOIN_EVERY,
            "kafka": args.kafka,
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
            formulation="per key: the final count, the window counts summed (files, and the Kafka topic read "
            "read_committed) and the join's pairs, against the sources' rows; lost and duplicated must both be 0",
        ),
        outputs_equal=lost == 0 and duplicated == 0 and not unequal,
        outputs_compared="per key: the final count, the windows' counts summed in the files and in Kafka, and the "
        "join's pairs, against the sources' rows generated again; each scenario's outputs against its undisturbed "
        "run (cluster: every batch of both sinks; disk: see its figures)",
    )
    return 0 if lost == 0 and duplicated == 0 and not unequal else 1


if __name__ == "__main__":
    sys.exit(main())
