"""Kafka source and sink against the real broker on loopback (see connector_services).

- The source reads every record once, within the admission limit, spread over partitions;
  a batch read again from Spark's offset log gives the same rows; partitions added while
  the job runs are read; an undecodable record is a dead letter naming topic, partition and
  offset; the backlog is the lag per partition.
- The sink writes each batch once, skips replays, and a transaction left open by a killed
  writer is never seen by a ``read_committed`` consumer.
- SIGKILL of ``sluice run`` (driver and JVM) with a sink transaction open, and again in the
  middle of a run: the output topic ends with every input record exactly once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pytest
from tests import crash_harness as harness
from tests.connector_services import (
    KAFKA,
    free_port,
    kafka_add_partitions,
    kafka_delete,
    kafka_offsets,
    kafka_produce,
    kafka_records,
    kafka_topic,
    require,
    unique,
)
from tests.pipelines import kafka_crash

import sluice
from sluice import sinks, sources
from sluice.runtime import connectors
from sluice.runtime.checkpoint import Checkpoint
from sluice.runtime.connectors.kafka import fair_share
from sluice.runtime.sinks import clear_memory, memory_batches, memory_table
from sluice.runtime.sources import read_backlog

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("v", pa.float64())])
BAD = [b"not json at all", b'{"id": "seven", "name": "x", "v": 1.0}']


def record(i: int) -> bytes:
    return json.dumps({"id": i, "name": f"n{i}", "v": i / 4}).encode()


def test_admission_is_spread_evenly_over_the_partitions_with_lag():
    assert fair_share(np.array([5, 100, 0, 7, 50]), 40).tolist() == [5, 14, 0, 7, 14]
    assert fair_share(np.array([5, 100]), 200).tolist() == [5, 100]
    assert fair_share(np.array([10, 10, 10]), 10).tolist() == [4, 3, 3]
    assert fair_share(np.array([3, 9]), None).tolist() == [3, 9]


@pytest.mark.spark
def test_kafka_source_reads_each_record_once_replays_exactly_and_finds_new_partitions(spark, tmp_path):
    require("Kafka")
    topic = unique("src")
    kafka_topic(topic, partitions=2)
    try:
        n = 300
        evens = kafka_produce(topic, [record(i) for i in range(0, n, 2)], partition=0)
        odds = kafka_produce(topic, [record(i) for i in range(1, n, 2)], partition=1)
        where = [(evens + odds)[i // 2 + (i % 2) * (n // 2)] for i in range(n)]
        bad_at = kafka_produce(topic, BAD[:1], partition=0) + kafka_produce(topic, BAD[1:], partition=1)
        clear_memory()
        p = sluice.Pipeline("kafka_src")
        spec = sources.kafka(
            topic, SCHEMA, max_rows_per_batch=70, metadata=("partition", "offset", "timestamp"), event_time="kafka_timestamp"
        )
        p.source(spec, name="orders").sink(sinks.memory("kafka_out"))
        p.dead_letter(sinks.memory("kafka_dead"))
        checkpoint = str(tmp_path / "ckpt")

        def rows_at_least(k):
            def enough(_):
                table = memory_table("kafka_out")
                return table is not None and table.num_rows >= k

            return enough

        p.run(checkpoint, spark=spark, duration=180, stop_when=rows_at_least(n))
        got = memory_table("kafka_out").sort_by("id")
        assert got["id"].to_pylist() == list(range(n))  # each once
        assert got.select(["id", "name", "v"]).to_pylist() == [json.loads(record(i)) for i in range(n)]
        assert list(zip(got["kafka_partition"].to_pylist(), got["kafka_offset"].to_pylist())) == where
        batches = memory_batches("kafka_out")
        assert max(t.num_rows for t in batches.values()) <= 70
        letters = memory_table("kafka_dead").to_pylist()
        assert sorted(r["record"] for r in letters) == sorted(json.dumps(b.decode()) for b in BAD)
        assert sorted(r["location"].split("message ")[1] for r in letters) == sorted(
            f"topic {topic} partition {p_} offset {o}" for p_, o in bad_at
        )
        assert all("does not parse as {id: int64, name: string, v: double}" in r["error"] for r in letters)
        status = read_backlog(f"{checkpoint}/sources", "orders")
        assert status["backlog"] == 0 and status["partitions"] == {f"{topic}:0": 0, f"{topic}:1": 0}

        # a batch read again from Spark's offset log (as a replay after a crash would) gives
        # the same rows
        from sluice.runtime.sources.datasource import stream_reader

        log = Checkpoint.of(checkpoint)
        reader = stream_reader(spec, "orders", f"{checkpoint}/sources", 2)
        batch = max(b for b, t in batches.items() if t.num_rows == 70 and b > 0)  # a full one: no dead letter

        def logged(b):
            return json.loads(log.read_bytes(Checkpoint.spark_offsets(b)).decode().splitlines()[2])

        reader.dead_letters = None
        again = pa.concat_tables(
            pa.Table.from_batches(list(reader.read(s))) for s in reader.partitions(logged(batch - 1), logged(batch))
        )
        assert again.drop_columns(["__ingest_ts"]).sort_by("id").equals(batches[batch].sort_by("id"))

        # partitions added while the pipeline is stopped and while it runs are read from their start
        kafka_add_partitions(topic, 3)
        later = kafka_produce(topic, [record(i) for i in range(n, n + 30)], partition=2)
        clear_memory("kafka_out")

        def add_more(executor):
            if executor.batches_done == 1 and not getattr(add_more, "done", False):
                kafka_add_partitions(topic, 4)
                later.extend(kafka_produce(topic, [record(i) for i in range(n + 30, n + 50)], partition=3))
                add_more.done = True
            return rows_at_least(50)(executor)

        p.run(checkpoint, spark=spark, duration=180, stop_when=add_more)
        got = memory_table("kafka_out").sort_by("id")
        assert got["id"].to_pylist() == list(range(n, n + 50))
        assert sorted(zip(got["kafka_partition"].to_pylist(), got["kafka_offset"].to_pylist())) == sorted(later)
    finally:
        kafka_delete(topic)


ROWS = pa.table(
    {
        "k": ["a", "b", "a", "c"],
        "n": [1, 2, 3, 4],
        "at": pa.array([0, 1, 2, 3], pa.timestamp("us", tz="UTC")),
        "ok": [True, False, None, True],
    }
)


def test_kafka_sink_writes_each_batch_once_with_keys_and_headers(tmp_path):
    require("Kafka")
    topic = unique("out")
    job = str(tmp_path / "ckpt")
    try:
        spec = sinks.kafka(topic, bootstrap=KAFKA, key="k", headers={"n": "n"})
        for batch in (0, 1, 1, 0):  # replays of 1 and 0 write nothing
            connectors.write(spec, ROWS, batch, job)
        got = kafka_records(topic)
        assert [json.loads(v)["n"] for _, _, _, v, _ in got] == [1, 2, 3, 4] * 2
        assert json.loads(got[0][3]) == {"k": "a", "n": 1, "at": "1970-01-01T00:00:00.000000Z", "ok": True}
        assert [k for _, _, k, _, _ in got[:4]] == [b"a", b"b", b"a", b"c"]
        assert got[1][4] == [("n", b"2")]

        # a new writer (a restarted driver) learns from Kafka which batches are written
        connectors._WRITERS.clear()
        connectors.write(spec, ROWS, 1, job)
        connectors.write(spec, ROWS.slice(0, 1), 2, job)
        assert len(kafka_records(topic)) == 9
    finally:
        kafka_delete(topic)


def test_a_transaction_left_open_by_a_killed_writer_is_never_seen(tmp_path):
    """The kill between producing and committing, without Spark: a process opens the sink's
    transaction for batch 1, produces its records and dies by SIGKILL. The next writer of the
    job (the restarted driver) fences it, Kafka aborts the open transaction, the batch is
    written again, and a read_committed consumer sees each record once."""
    require("Kafka")
    topic = unique("open")
    job = str(tmp_path / "ckpt")
    spec = sinks.kafka(topic, bootstrap=KAFKA)
    try:
        connectors.write(spec, ROWS, 0, job)
        script = textwrap.dedent(f"""
            import os, signal
            import pyarrow as pa
            from sluice import sinks
            from sluice.runtime.connectors.kafka import KafkaWriter
            writer = KafkaWriter(sinks.kafka({topic!r}, bootstrap={KAFKA!r}))
            writer._open({connectors.job_id(job)!r})
            writer.producer.begin_transaction()
            for i in range(50):
                writer.producer.produce({topic!r}, b'{{"n": 100}}')
            writer.producer.flush()  # on the broker, uncommitted
            os.kill(os.getpid(), signal.SIGKILL)
        """)
        proc = subprocess.run([sys.executable, "-c", script], check=False, env=dict(os.environ), timeout=60)
        assert proc.returncode == -9
        assert kafka_offsets(topic, committed=False)[0] > kafka_offsets(topic)[0]  # the transaction is open
        assert len(kafka_records(topic, committed=False)) == 54  # a read_uncommitted consumer sees it

        connectors._WRITERS.clear()  # the restarted driver
        connectors.write(spec, ROWS, 1, job)
        got = kafka_records(topic)
        assert [json.loads(v)["n"] for _, _, _, v, _ in got] == [1, 2, 3, 4] * 2
    finally:
        kafka_delete(topic)


def test_avro_values_round_trip_through_sink_and_source(tmp_path):
    """Avro written by the sink (schema from the columns) reads back through the source."""
    from sluice.runtime.sources.datasource import stream_reader

    require("Kafka")
    topic = unique("avro")
    try:
        connectors.write(sinks.kafka(topic, bootstrap=KAFKA, format="avro"), ROWS, 0, str(tmp_path / "ckpt"))
        kafka_produce(topic, [b"\xff\xfe not avro"], partition=0)
        schema = pa.schema([("k", pa.string()), ("n", pa.int64()), ("at", pa.timestamp("us", tz="UTC")), ("ok", pa.bool_())])
        spec = sources.kafka(topic, schema, format="avro", bootstrap=KAFKA)
        reader = stream_reader(spec, "avro", str(tmp_path / "sources"), 1)
        from pyspark.sql.streaming.datasource import ReadMaxRows

        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadMaxRows(100))
        parsed, _, locations, _ = reader.fetch(reader.partitions(start, end)[0])
        assert parsed.table.to_pylist() == ROWS.to_pylist()
        assert [(locations[i], reason.split(":")[0]) for i, reason in parsed.rejects] == [
            (f"topic {topic} partition 0 offset 5", "does not decode as Avro record")
        ]
    finally:
        kafka_delete(topic)


@pytest.mark.slow
def test_sigkill_with_a_sink_transaction_open_and_mid_run_leave_every_record_once(tmp_path):
    """Driver SIGKILLs: first between producing and committing (part of a batch's records
    on the broker in an open transaction), then at an arbitrary point of a later run; the last
    run finishes the input. The output topic holds every input id exactly once, and the
    records of the transaction the kill left open are there, aborted."""
    require("Kafka")
    topic, out = unique("crash_in"), unique("crash_out")
    kafka_topic(topic, partitions=3)
    kafka_topic(out, partitions=1)
    checkpoint = str(tmp_path / "ckpt")
    per_batch = 2000
    env = {
        "SLUICE_TEST_TOPIC": topic,
        "SLUICE_TEST_OUT": out,
        "SLUICE_TEST_KAFKA": KAFKA,
        "SLUICE_TEST_PER_BATCH": str(per_batch),
    }
    n = 36_000
    payloads = [json.dumps({"id": i, "key": f"k{i % 13}", "v": i % 100}).encode() for i in range(n)]

    def all_written(checkpoint: str) -> bool:
        """The batch whose offset admits the last input record is done."""
        log = Checkpoint.of(checkpoint)
        for batch in sorted(harness.done_batches(checkpoint), reverse=True)[:1]:
            entry = log.read_bytes(Checkpoint.spark_offsets(batch))
            return entry is not None and json.loads(entry.decode().splitlines()[2])["rows"] >= n
        return False

    def producing() -> bool:
        """Part of a batch's records are on the broker, uncommitted: its transaction is open
        and its commit has not begun (a commit sends every record first)."""
        return 0 < kafka_offsets(out, committed=False)[0] - kafka_offsets(out)[0] < per_batch

    try:
        # the first run's input spans a dozen batches: the kill comes while one of them is
        # being produced
        kafka_produce(topic, payloads[: 2 * n // 3])
        proc = harness.launch(kafka_crash.__file__, checkpoint, env)
        harness.kill_when(proc, producing, timeout=240)
        kafka_produce(topic, payloads[2 * n // 3 :])  # more arrives while it is down
        done = len(harness.done_batches(checkpoint))
        proc = harness.launch(kafka_crash.__file__, checkpoint, env)
        harness.kill_when(proc, lambda: len(harness.done_batches(checkpoint)) >= done + 3, timeout=240)
        proc = harness.launch(kafka_crash.__file__, checkpoint, env)
        harness.kill_when(proc, lambda: all_written(checkpoint), timeout=240)

        got = kafka_records(out)
        ids = sorted(int(h[0][1]) for *_, h in got)
        assert ids == list(range(n))  # no duplicate, no gap
        assert sorted(json.loads(v)["id"] for _, _, _, v, _ in got) == ids
        assert {k.decode() for _, _, k, _, _ in got} == {f"k{i}" for i in range(13)}
        assert len(kafka_records(out, committed=False)) > n  # the killed transaction's records, aborted
    finally:
        kafka_delete(topic, out)


def test_a_kafka_broker_that_is_down_is_named_by_the_source_and_the_sink(tmp_path):
    """While the broker is away the source plans no rows (its backlog file says why); after
    ``patience_s`` source and sink fail with an error naming it and its address."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from sluice.errors import SinkError, SluiceError
    from sluice.graph.kafka import KafkaSink
    from sluice.runtime.sources.datasource import stream_reader

    port = free_port()  # nothing listens there
    spec = sources.kafka("nothing", SCHEMA, bootstrap=f"127.0.0.1:{port}", patience_s=1)
    reader = stream_reader(spec, "src", str(tmp_path), 2)
    start = reader.initialOffset()
    with pytest.raises(SluiceError) as error:
        for _ in range(10):
            assert reader.latestOffset(start, ReadMaxRows(100)) == start
            assert "unreachable" in read_backlog(str(tmp_path), "src")["error"]
    assert f"Kafka at 127.0.0.1:{port}" in str(error.value) and "unreachable" in str(error.value)
    with pytest.raises(SinkError, match=f"Kafka at 127.0.0.1:{port}.*unreachable"):
        connectors.write(KafkaSink(topic="t", bootstrap=f"127.0.0.1:{port}", patience_s=1), ROWS, 0, str(tmp_path))


@pytest.mark.spark
def test_an_idle_partition_does_not_hold_back_windows_on_the_kafka_timestamp(spark, tmp_path):
    """Event time from the Kafka timestamp; one partition never receives a record: the
    source's watermark follows the partition that does, and its windows close."""
    from confluent_kafka import Producer

    from sluice import agg, windows

    require("Kafka")
    topic = unique("idle")
    kafka_topic(topic, partitions=2)
    try:
        producer = Producer({"bootstrap.servers": KAFKA})
        base_ms = 1_700_000_000_000
        for i in range(40):  # 0.25 s apart in Kafka time, all to partition 0
            producer.produce(topic, json.dumps({"id": i}).encode(), partition=0, timestamp=base_ms + 250 * i)
        producer.flush()
        clear_memory()
        p = sluice.Pipeline("kafka_idle")
        spec = sources.kafka(
            topic,
            pa.schema([("id", pa.int64())]),
            metadata=("timestamp", "partition"),
            event_time="kafka_timestamp",
            max_rows_per_batch=10,
        )
        p.source(spec).key_by("kafka_partition").window(windows.tumbling("1s")).aggregate(n=agg.count()).sink(
            sinks.memory("idle_windows")
        )

        def closed(_):
            table = memory_table("idle_windows")
            return table is not None and table.num_rows >= 9

        p.run(str(tmp_path / "ckpt"), spark=spark, duration=120, stop_when=closed)
        got = memory_table("idle_windows").sort_by("window_start")
        # the first nine seconds, closed while partition 1 is empty
        assert got["n"].to_pylist()[:9] == [4] * 9
        assert got["window_start"][0].as_py().timestamp() == base_ms / 1000
    finally:
        kafka_delete(topic)
