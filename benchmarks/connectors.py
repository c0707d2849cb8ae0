"""Sustained rows/s of each connector against the broker's own client on the same data.

Sources (NATS JetStream, Redis Streams, PostgreSQL table, MQTT): the same N JSON records are
put into the broker; Sluice reads them with a pipeline ``source -> callback sink`` on local
Spark (rows/s over the batches after the first, so Spark's start-up is not counted), and
the broker's Python client reads them alone (NATS: a pull consumer; Redis: XRANGE; PostgreSQL:
psycopg ``COPY TO``; MQTT: a paho subscriber while a publisher sends them, as for Sluice).
MQTT has no stored stream to read at leisure, so both sides are timed end to end there: from
the publisher's start to the last record delivered (to the subscriber, or to Sluice's sink).

Sinks (PostgreSQL, Redis, NATS): a generator source writes N rows through the sink; the
rows/s is N over the time the executor spent in the sink's writes (``write_s`` of each
batch: collecting the batch to the driver, converting and writing it transactionally). The
client alone writes the same rows (psycopg ``COPY FROM`` with ``write_row``; a redis-py
pipeline of XADD; nats-py JetStream publishes awaited in windows).

Kafka (``kafka_source``, ``kafka_sink`` in the JSON line) has two anchors measured in the same
run on the same topic and batch size: the bare confluent-kafka client (a consumer assigned to
every partition; a transactional producer, one transaction per batch) and Spark's own Kafka
connector (``spark-sql-kafka-0-10`` from Maven Central through ``spark.jars.packages``, in a
second process whose session has the jar): its streaming source with ``maxOffsetsPerTrigger``,
values parsed with ``from_json`` and collected by ``foreachBatch`` as Sluice's callback sink
collects them; its sink writing the same batches with ``to_json`` (at least once: Spark's
Kafka sink has no transactions). Kafka's ``ratio`` (in the headline mean) is against the bare
client, as for every connector; ``ratio_to_spark`` is against Spark's connector.

Delta Lake and Iceberg sinks (``delta_sink``, ``iceberg_sink`` in the JSON line): the
generator's N rows through ``sinks.delta`` (one delta-rs commit per batch with its
application transaction) and ``sinks.iceberg`` (SQLite catalog, one snapshot per batch),
against the libraries alone writing the same batches: ``write_deltalake(mode="append")``
and pyiceberg's ``table.append``, one call per batch. ``sluice_writer_rows_s``: Sluice's
writer called on the same batches in the benchmark's process, without Spark (the sink's own
cost: its idempotence check, casts and commit); the gap between it and ``sluice_rows_s`` is
Spark computing and collecting each batch, which every sink's ``write_s`` includes.

``ratio`` per connector = Sluice rows/s / client rows/s; the headline ``ratio`` is their
geometric mean (``min_ratio`` is the worst one). The machine is shared with other work while
this runs: figures move between runs.

    .venv/bin/python benchmarks/connectors.py [--quick] [--only "kafka source" "kafka sink"]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "docs" / "results"

from benchmarks.measure import Anchor, Record  # noqa: E402
from tests.connector_services import (  # noqa: E402
    KAFKA,
    MQTT_HOST,
    MQTT_PORT,
    NATS_URL,
    PG_DSN,
    REDIS_URL,
    kafka_delete,
    kafka_produce,
    kafka_records,
    kafka_topic,
    nats_delete,
    nats_publish,
    nats_run,
    nats_stream,
    pg,
    redis_client,
)

import sluice  # noqa: E402
from sluice import sinks, sources  # noqa: E402
from sluice.runtime.batch import metrics as metrics_log  # noqa: E402

SCHEMA = pa.schema([("id", pa.int64()), ("key", pa.string()), ("v", pa.float64())])


def records(n: int) -> list[dict]:
    return [{"id": i, "key": f"k{i % 1000}", "v": i / 8} for i in range(n)]


def sustained(checkpoint: str) -> float:
    """Rows/s over the batches after the first (from their own start and end times)."""
    batches = [m for m in metrics_log.read(checkpoint) if m.rows_in][1:]
    if not batches:
        return float("nan")
    span = batches[-1].started_at + batches[-1].duration_s - batches[0].started_at
    return sum(m.rows_in for m in batches) / span


def run_source(spark, spec, n: int, feed=None) -> float:
    """Sluice's rows/s reading ``spec``: sustained over its batches, or, with a ``feed`` (the
    input is produced while the pipeline runs), end to end: N rows over the time from the
    feed's start (``feed`` returns when it starts producing, as ``marks["start"]``) to the
    sink seeing the last row, the way the client alone is timed."""
    seen = [0]
    marks: dict[str, float] = {}

    def count(batch_id, table):
        seen[0] += table.num_rows
        if seen[0] >= n and "done" not in marks:
            marks["done"] = time.perf_counter()

    p = sluice.Pipeline("bench_source")
    p.source(spec, name="src").sink(sinks.callback(count))
    checkpoint = tempfile.mkdtemp(prefix="bench-connectors-")
    if feed is not None:
        threading.Thread(target=feed, args=(checkpoint, marks), daemon=True).start()
    p.run(checkpoint, spark=spark, duration=600, stop_when=lambda _: seen[0] >= n)
    if feed is not None:
        return n / (marks["done"] - marks["start"]) if "done" in marks else float("nan")
    return sustained(checkpoint)


def run_sink(spark, spec, n: int, per_batch: int) -> float:
    p = sluice.Pipeline("bench_sink")
    p.source(
        sources.generator(
            fields={"id": sources.Sequence(), "key": sources.Keys(1000, prefix="k"), "v": sources.Uniform()},
            total_rows=n,
            max_rows_per_batch=per_batch,
        ),
        name="gen",
    ).sink(spec, name="out")
    checkpoint = tempfile.mkdtemp(prefix="bench-connectors-")
    p.run(checkpoint, spark=spark)
    batches = [m for m in metrics_log.read(checkpoint) if "out" in m.sinks and m.sinks["out"].rows]
    return sum(m.sinks["out"].rows for m in batches) / sum(m.sinks["out"].write_s for m in batches)


def timed(work) -> float:
    t0 = time.perf_counter()
    work()
    return time.perf_counter() - t0


# --- sources ---------------------------------------------------------------------------------------


def nats_source(spark, n, per_batch):
    stream = f"bench_{uuid.uuid4().hex[:8]}"
    nats_stream(stream)
    try:
        nats_publish(stream, [json.dumps(r).encode() for r in records(n)])

        async def read_all(js):
            from nats.js.api import AckPolicy, ConsumerConfig

            sub = await js.pull_subscribe("", stream=stream, config=ConsumerConfig(ack_policy=AckPolicy.NONE))
            got = 0
            while got < n:
                got += len(await sub.fetch(1000, timeout=5))

        client = n / timed(lambda: nats_run(read_all))
        ours = run_source(spark, sources.nats(stream, SCHEMA, max_rows_per_batch=per_batch), n)
        return ours, client
    finally:
        nats_delete(stream)


def redis_source(spark, n, per_batch):
    key = f"bench_{uuid.uuid4().hex[:8]}"
    r = redis_client()
    try:
        pipe = r.pipeline(transaction=False)
        for row in records(n):
            pipe.xadd(key, {k: str(v) for k, v in row.items()})
        pipe.execute()

        def read_all():
            after, got = "0-0", 0
            while got < n:
                chunk = r.xrange(key, min="(" + after, count=10_000)
                got += len(chunk)
                after = chunk[-1][0].decode()

        client = n / timed(read_all)
        ours = run_source(spark, sources.redis(key, SCHEMA, url=REDIS_URL, max_rows_per_batch=per_batch), n)
        return ours, client
    finally:
        r.delete(key)


def postgres_source(spark, n, per_batch):
    import psycopg

    table = f"bench_{uuid.uuid4().hex[:8]}"
    pg(f"CREATE TABLE {table} (id bigint PRIMARY KEY, key text, v double precision)")
    try:
        pg(f"INSERT INTO {table} SELECT g, 'k' || (g % 1000), g / 8.0 FROM generate_series(0, {n - 1}) g")

        def read_all():
            with (
                psycopg.connect(PG_DSN) as conn,
                conn.cursor().copy(f"COPY (SELECT id, key, v FROM {table} ORDER BY id) TO STDOUT") as copy,
            ):
                for _ in copy.rows():
                    pass

        client = n / timed(read_all)
        ours = run_source(spark, sources.postgres(PG_DSN, table, "id", max_rows_per_batch=per_batch), n)
        return ours, client
    finally:
        pg(f"DROP TABLE IF EXISTS {table}")


def _mqtt_publisher(topic: str, n: int):
    import paho.mqtt.client as mqtt

    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    client.max_inflight_messages_set(1000)
    client.connect(MQTT_HOST, MQTT_PORT)
    client.loop_start()
    infos = [client.publish(topic, json.dumps(r).encode(), qos=1) for r in records(n)]
    for info in infos:
        info.wait_for_publish(60)
    client.loop_stop()
    client.disconnect()


def mqtt_source(spark, n, per_batch):
    import paho.mqtt.client as mqtt
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    from sluice.runtime.connectors.mqtt import RECEIVE_MAXIMUM

    topic = f"bench/{uuid.uuid4().hex[:8]}"
    got, done = [0], threading.Event()

    def on_message(client, userdata, message):
        got[0] += 1
        if got[0] >= n:
            done.set()

    # The ceiling subscribes as Sluice's session does: MQTT 5 with Receive Maximum 65535.
    # Without it Mosquitto keeps 20 unacknowledged messages in flight to a subscriber and
    # the client alone receives about 140 messages/s here: a floor, not a ceiling.
    sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    sub.on_message = on_message
    properties = Properties(PacketTypes.CONNECT)
    properties.ReceiveMaximum = RECEIVE_MAXIMUM
    sub.connect(MQTT_HOST, MQTT_PORT, properties=properties)
    sub.subscribe(topic, qos=1)
    sub.loop_start()
    time.sleep(0.5)
    t0 = time.perf_counter()
    _mqtt_publisher(topic, n)
    done.wait(120)
    client = got[0] / (time.perf_counter() - t0)
    sub.loop_stop()
    sub.disconnect()

    def feed(checkpoint, marks):  # publish once the source's session is subscribed
        while not os.path.exists(os.path.join(checkpoint, "sources", "src.backlog.json")):
            time.sleep(0.1)
        time.sleep(1.0)
        marks["start"] = time.perf_counter()
        _mqtt_publisher(topic, n)

    spec = sources.mqtt(topic, SCHEMA, client_id=f"bench_{uuid.uuid4().hex[:8]}", max_rows_per_batch=per_batch)
    return run_source(spark, spec, n, feed), client


# --- sinks -----------------------------------------------------------------------------------------


def rows_table(n: int) -> pa.Table:
    return pa.Table.from_pylist(records(n), schema=SCHEMA)


def postgres_sink(spark, n, per_batch):
    import psycopg

    table, theirs = f"bench_{uuid.uuid4().hex[:8]}", f"bench_{uuid.uuid4().hex[:8]}"
    pg(f"CREATE TABLE {theirs} (id bigint, key text, v double precision)")
    try:
        rows = [tuple(r.values()) for r in records(n)]

        def write_all():
            with psycopg.connect(PG_DSN) as conn:
                for i in range(0, n, per_batch):
                    with conn.transaction(), conn.cursor().copy(f"COPY {theirs} (id, key, v) FROM STDIN") as copy:
                        for row in rows[i : i + per_batch]:
                            copy.write_row(row)

        client = n / timed(write_all)
        ours = run_sink(spark, sinks.postgres(PG_DSN, table), n, per_batch)
        return ours, client
    finally:
        pg(f"DROP TABLE IF EXISTS {table}")
        pg(f"DROP TABLE IF EXISTS {theirs}")
        pg("DELETE FROM sluice_batches WHERE sink = %s", (table,))


def redis_sink(spark, n, per_batch):
    r = redis_client()
    ours_key, theirs = f"bench_{uuid.uuid4().hex[:8]}", f"bench_{uuid.uuid4().hex[:8]}"
    try:
        rows = [{k: str(v) for k, v in row.items()} for row in records(n)]

        def write_all():
            for i in range(0, n, per_batch):
                pipe = r.pipeline(transaction=True)
                for row in rows[i : i + per_batch]:
                    pipe.xadd(theirs, row)
                pipe.execute()

        client = n / timed(write_all)
        ours = run_sink(spark, sinks.redis(ours_key, url=REDIS_URL), n, per_batch)
        return ours, client
    finally:
        r.delete(ours_key, theirs, f"sluice:batches:{ours_key}")


def nats_sink(spark, n, per_batch):
    stream = f"bench_{uuid.uuid4().hex[:8]}"
    nats_stream(stream)
    try:
        payloads = [json.dumps(r).encode() for r in records(n)]

        async def publish_all(js):
            for i in range(0, n, 2000):
                await asyncio.gather(*(js.publish(f"{stream}.theirs", p) for p in payloads[i : i + 2000]))

        client = n / timed(lambda: nats_run(publish_all))
        ours = run_sink(spark, sinks.nats(f"{stream}.ours", url=NATS_URL), n, per_batch)
        return ours, client
    finally:
        nats_delete(stream)


# --- Kafka: the bare client and Spark's own connector ----------------------------------------------

SPARK_KAFKA = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"
"""Spark's Kafka connector: Maven Central has no 4.3.0 build yet; 4.2.0 (the newest) runs on
PySpark 4.3.0's Spark here (checked: batch and streaming reads, batch writes)."""
KAFKA_PARTITIONS = 3


def kafka_client_read(topic: str, n: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": KAFKA, "group.id": "bench", "enable.auto.commit": False})
    t0 = time.perf_counter()
    consumer.assign([TopicPartition(topic, p, 0) for p in range(KAFKA_PARTITIONS)])
    got = 0
    while got < n:
        got += sum(1 for m in consumer.consume(10_000, 1.0) if m.error() is None)
    elapsed = time.perf_counter() - t0
    consumer.close()
    return n / elapsed


def kafka_source(spark, n, per_batch):
    topic = f"bench_{uuid.uuid4().hex[:8]}"
    kafka_topic(topic, KAFKA_PARTITIONS)
    try:
        kafka_produce(topic, [json.dumps(r).encode() for r in records(n)])
        client = kafka_client_read(topic, n)
        ours = run_source(spark, sources.kafka(topic, SCHEMA, bootstrap=KAFKA, max_rows_per_batch=per_batch), n)
        spark_native = _native("source", topic, n, per_batch)
        return ours, client, spark_native
    finally:
        kafka_delete(topic)


def kafka_sink(spark, n, per_batch):
    from confluent_kafka import Producer

    ours_topic, theirs = f"bench_{uuid.uuid4().hex[:8]}", f"bench_{uuid.uuid4().hex[:8]}"
    native_topic = f"bench_{uuid.uuid4().hex[:8]}"
    for t in (ours_topic, theirs, native_topic):
        kafka_topic(t, KAFKA_PARTITIONS)
    try:
        table = rows_table(n)

        def write_all():  # as the sink does: JSON values, one transaction per batch
            from sluice.runtime.connectors.payloads import rows_as_json

            producer = Producer({"bootstrap.servers": KAFKA, "transactional.id": f"bench-{theirs}", "linger.ms": 5})
            producer.init_transactions(30)
            for i in range(0, n, per_batch):
                producer.begin_transaction()
                for value in rows_as_json(table.slice(i, per_batch)):
                    while True:
                        try:
                            producer.produce(theirs, value)
                            break
                        except BufferError:
                            producer.poll(0.05)
                producer.commit_transaction(30)

        client = n / timed(write_all)
        ours = run_sink(spark, sinks.kafka(ours_topic, bootstrap=KAFKA), n, per_batch)
        assert len(kafka_records(ours_topic)) == n  # each row once
        spark_native = _native("sink", native_topic, n, per_batch)
        return ours, client, spark_native
    finally:
        kafka_delete(ours_topic, theirs, native_topic)


def _native(kind: str, topic: str, n: int, per_batch: int) -> float:
    """Rows/s of Spark's own Kafka connector, in a process whose session loads its jar."""
    out = subprocess.run(
        [sys.executable, __file__, "--native", kind, topic, str(n), str(per_batch)], capture_output=True, text=True, check=False
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"Spark's Kafka {kind} failed: {out.stderr[-2000:]}")
    return json.loads(lines[-1])["rows_s"]


def native_main(kind: str, topic: str, n: int, per_batch: int) -> None:
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    from sluice.runtime.session import spark_session

    spark = spark_session(master="local[2]", app_name="bench-spark-kafka", conf={"spark.jars.packages": SPARK_KAFKA})
    if kind == "source":
        batches: list[tuple[float, float, int]] = []

        def collect(df, batch_id):  # as Sluice's callback sink: the batch to the driver, as Arrow
            t0 = time.perf_counter()
            rows = df.toArrow().num_rows
            batches.append((t0, time.perf_counter(), rows))

        frame = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", KAFKA)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", per_batch)
            .load()
            .select(F.from_json(F.col("value").cast("string"), from_arrow_schema(SCHEMA)).alias("r"))
            .select("r.*")
        )
        query = (
            frame.writeStream.foreachBatch(collect)
            .option("checkpointLocation", tempfile.mkdtemp(prefix="bench-spark-kafka-"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        timed_batches = [b for b in batches if b[2]][1:]  # after the first, as for Sluice
        rows_s = sum(b[2] for b in timed_batches) / (timed_batches[-1][1] - timed_batches[0][0])
    else:
        elapsed = 0.0
        for i in range(0, n, per_batch):  # each batch made in the JVM, then timed as it is written
            chunk = (
                spark.range(i, min(i + per_batch, n))
                .selectExpr("to_json(named_struct('id', id, 'key', concat('k', id % 1000), 'v', id / 8)) AS value")
                .cache()
            )
            chunk.count()
            t0 = time.perf_counter()
            chunk.write.format("kafka").option("kafka.bootstrap.servers", KAFKA).option("topic", topic).save()
            elapsed += time.perf_counter() - t0
            chunk.unpersist()
        rows_s = n / elapsed
    spark.stop()
    print(json.dumps({"rows_s": rows_s}))


# --- lakehouse sinks -------------------------------------------------------------------------------

EXTRA: dict[str, dict] = {}  # more figures of a connector, merged into its entry of the JSON line


def writer_alone(spec, batches: list, n: int) -> float:
    """Rows/s of Sluice's writer of ``spec`` called on ``batches`` in this process, without
    Spark: the sink's own cost (its idempotence check, casts and commit), apart from the
    Spark job that computes and collects each batch (which ``write_s`` includes)."""
    from sluice.runtime import connectors

    job = tempfile.mkdtemp(prefix="bench-job-")
    return n / timed(lambda: [connectors.write(spec, pa.Table.from_batches([b]), i, job) for i, b in enumerate(batches)])


def delta_sink(spark, n, per_batch):
    """Sluice's Delta sink (one commit per batch with its txn) against bare ``write_deltalake``
    appends of the same batches into a table of their own."""
    from deltalake import DeltaTable, write_deltalake

    root = tempfile.mkdtemp(prefix="bench-delta-")
    batches = rows_table(n).to_batches(max_chunksize=per_batch)

    def write_all():
        for batch in batches:
            write_deltalake(f"{root}/theirs", pa.Table.from_batches([batch]), mode="append")

    client = n / timed(write_all)
    EXTRA["delta sink"] = {"sluice_writer_rows_s": round(writer_alone(sinks.delta(f"{root}/alone"), batches, n))}
    ours = run_sink(spark, sinks.delta(f"{root}/ours"), n, per_batch)
    assert DeltaTable(f"{root}/ours").to_pyarrow_table().num_rows == n  # each row once
    return ours, client


def iceberg_sink(spark, n, per_batch):
    """Sluice's Iceberg sink (SQLite catalog; one snapshot per batch recording job and batch)
    against bare pyiceberg ``table.append`` of the same batches into a table created before
    the clock starts (Sluice's first batch creates its table)."""
    from pyiceberg.catalog.sql import SqlCatalog

    root = tempfile.mkdtemp(prefix="bench-iceberg-")
    catalog_url, warehouse = f"sqlite:///{root}/catalog.db", f"file://{root}/warehouse"
    catalog = SqlCatalog("sluice", uri=catalog_url, warehouse=warehouse)
    catalog.create_namespace("bench")
    theirs = catalog.create_table("bench.theirs", schema=SCHEMA)
    batches = rows_table(n).to_batches(max_chunksize=per_batch)

    def write_all():
        for batch in batches:
            theirs.append(pa.Table.from_batches([batch]))

    client = n / timed(write_all)
    alone = sinks.iceberg(catalog_url, "bench.alone", warehouse=warehouse)
    EXTRA["iceberg sink"] = {"sluice_writer_rows_s": round(writer_alone(alone, batches, n))}
    ours = run_sink(spark, sinks.iceberg(catalog_url, "bench.ours", warehouse=warehouse), n, per_batch)
    assert catalog.load_table("bench.ours").scan().to_arrow().num_rows == n  # each row once
    return ours, client


CONNECTORS = {
    "nats source": nats_source,
    "redis source": redis_source,
    "postgres source": postgres_source,
    "mqtt source": mqtt_source,
    "postgres sink": postgres_sink,
    "redis sink": redis_sink,
    "nats sink": nats_sink,
    "kafka source": kafka_source,
    "kafka sink": kafka_sink,
    "delta sink": delta_sink,
    "iceberg sink": iceberg_sink,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rows (a few minutes)")
    parser.add_argument("--only", nargs="*", help="connectors to run (names as in the output)")
    parser.add_argument(
        "--native", nargs=4, metavar=("KIND", "TOPIC", "N", "PER_BATCH"), help=argparse.SUPPRESS
    )  # Spark's Kafka connector, run by this script in a process of its own
    args = parser.parse_args()
    if args.native:
        kind, topic, rows, batch = args.native
        native_main(kind, topic, int(rows), int(batch))
        return 0
    record = Record("connectors", args.quick)
    n = 40_000 if args.quick else 200_000
    per_batch = n // 8

    from sluice.runtime.session import spark_session

    spark = spark_session(master="local[2]", app_name="bench-connectors")
    results = {}
    for name, bench in CONNECTORS.items():
        if args.only and name not in args.only:
            continue
        ours, client, *native = bench(spark, n, per_batch)
        results[name] = {"sluice_rows_s": round(ours), "client_rows_s": round(client), "ratio": round(ours / client, 3)}
        results[name].update(EXTRA.get(name, {}))
        print(f"{name:16s} sluice {ours:10.0f} rows/s   client {client:10.0f} rows/s   ratio {ours / client:.3f}", flush=True)
        if native:
            results[name].update(
                {"spark_kafka_rows_s": round(native[0]), "ratio_to_spark": round(ours / native[0], 3), "spark_kafka": SPARK_KAFKA}
            )
            print(f"{'':16s} spark's own connector {native[0]:10.0f} rows/s   sluice/spark {ours / native[0]:.3f}", flush=True)
    spark_cores = int(spark.sparkContext.defaultParallelism)
    spark.stop()
    ratios = [r["ratio"] for r in results.values()]
    summary = {
        "benchmark": "connectors",
        "ratio": round(math.exp(sum(math.log(r) for r in ratios) / len(ratios)), 3) if ratios else None,
        "ratio_is": "geometric mean over connectors of Sluice rows/s / the broker client's rows/s",
        "min_ratio": min(ratios) if ratios else None,
        "rows": n,
        "rows_per_batch": per_batch,
        "quick": args.quick,
        "connectors": results,
        "kafka_source": results.get("kafka source"),
        "kafka_sink": results.get("kafka sink"),
        "delta_sink": results.get("delta sink"),
        "iceberg_sink": results.get("iceberg sink"),
        "spark_cores": spark_cores,
    }
    record.publish(
        None if args.only else RESULTS / "connectors.json",
        summary,
        summary,
        anchor=Anchor(
            ran="the broker's own Python client on the same data, one call per batch (the headline ratio); "
            f"for Kafka also Spark's own Kafka source and sink ({SPARK_KAFKA}), for Delta and Iceberg also "
            "Sluice's writer alone without Spark",
            formulation="N JSON records (or N generator rows for sinks), the same batch size for every system",
            shuffle_partitions=None,
        ),
        outputs_equal=None,
        outputs_compared="nothing compared value for value: a connector run ends when it has read or written N "
        "rows, and the Kafka, Delta and Iceberg sinks' row counts are checked (each row once)",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
