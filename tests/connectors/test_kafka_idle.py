"""Idle partitions and idle sources on Kafka, live: a topic of two partitions gets records on
both, then on one only; a second topic sends one record and then nothing.

- A partition that stops receiving records never holds its source's watermark back (a
  source's watermark is the latest event time over its partitions, ``connectors.kafka``):
  the windows of the time only one partition carried close.
- The quiet second source does hold the watermark: without ``idle_timeout`` no event-time
  window closes; with it the watermark follows the busy source and every window whose end
  it passed is emitted, exactly once.
- Processing-time windows over the same records close by the clock once the stream is quiet,
  in batches without input, each record counted once.
"""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from tests.connector_services import KAFKA, kafka_delete, kafka_topic, require, unique

import sluice
from sluice import agg, sinks, sources
from sluice import windows as W
from sluice.runtime.sinks import clear_memory, memory_batches

pytestmark = pytest.mark.spark

BASE_MS = 1_700_000_000_000
STEP_MS, BOTH, ONE = 250, 40, 80  # records on both partitions, then on partition 0 only
WINDOW_S, DELAY_S = 5, 1
METERS = 3


def produce(busy: str, quiet: str) -> list[tuple[str, int]]:
    """Write the records; return (meter, Kafka time in ms) of the busy topic's."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": KAFKA, "linger.ms": 5})
    records = []
    for i in range(BOTH + ONE):
        meter, at = f"m{i % METERS}", BASE_MS + STEP_MS * i
        partition = i % 2 if i < BOTH else 0
        producer.produce(busy, json.dumps({"meter": meter}).encode(), partition=partition, timestamp=at)
        records.append((meter, at))
    producer.produce(quiet, json.dumps({"meter": "q"}).encode(), partition=0, timestamp=BASE_MS)
    producer.flush(30)
    return records


def build(busy: str, quiet: str, idle_timeout) -> sluice.Pipeline:
    p = sluice.Pipeline("kafka_idle_sources", partitions=2, max_parallelism=8)
    schema = pa.schema([("meter", pa.string())])

    def kafka(topic):
        return sources.kafka(
            topic,
            schema,
            metadata=("timestamp", "partition"),
            event_time="kafka_timestamp",
            watermark_delay=DELAY_S,
            max_rows_per_batch=40,
        )

    readings = p.source(kafka(busy), name="busy").key_by("meter")
    readings.window(W.tumbling(WINDOW_S)).aggregate(n=agg.count(), name="windows").sink(sinks.memory("idle_windows"))
    readings.window(W.tumbling(2), time="processing").aggregate(n=agg.count(), name="proc").sink(sinks.memory("idle_proc"))
    p.source(kafka(quiet), name="quiet", idle_timeout=idle_timeout).sink(sinks.memory("idle_quiet"))
    return p


def emitted(sink: str) -> list[tuple[str, int, int]]:
    """(meter, window start in ms, n) of every row the sink got, over all batches."""
    rows = []
    for table in memory_batches(sink).values():
        starts = pc.cast(table["window_start"], pa.timestamp("ms", tz="UTC")).cast(pa.int64()).to_pylist()
        rows += list(zip(table["meter"].to_pylist(), starts, table["n"].to_pylist()))
    return rows


def test_a_quiet_partition_never_holds_the_watermark_and_a_quiet_source_only_without_idle_timeout(spark, tmp_path):
    require("Kafka")
    busy, quiet = unique("idle_busy"), unique("idle_quiet")
    kafka_topic(busy, partitions=2)
    kafka_topic(quiet, partitions=1)
    try:
        records = produce(busy, quiet)
        # the busy source's watermark: its latest record minus the delay; the windows it closes
        watermark_ms = max(at for _, at in records) - DELAY_S * 1000
        counts: dict[tuple[str, int], int] = {}
        for meter, at in records:
            start = at - (at - BASE_MS) % (WINDOW_S * 1000)
            counts[(meter, start)] = counts.get((meter, start), 0) + 1
        want = {(m, s, n) for (m, s), n in counts.items() if s + WINDOW_S * 1000 <= watermark_ms}
        # windows whose records all came from partition 0 alone, the other partition silent
        assert any(s >= BASE_MS + STEP_MS * BOTH for _, s, _ in want)

        # without an idle timeout the quiet source holds every window back
        clear_memory()
        total, seen, read = len(records) + 1, [0], []  # rows read so far; when all were

        def count(m) -> None:
            seen[0] += m.rows_in
            if seen[0] >= total and not read:
                read.append(time.time())

        held = build(busy, quiet, None).run(
            str(tmp_path / "held"),
            spark=spark,
            duration=90,
            on_batch=count,
            # twice the idle timeout of the run below after the last record: long enough
            # for that run to have closed its windows
            stop_when=lambda ex: bool(read) and time.time() - read[0] > 4,
        )
        assert sum(m.rows_in for m in held.metrics) == total
        assert emitted("idle_windows") == []
        assert max(m.watermark or 0 for m in held.metrics) == (BASE_MS - DELAY_S * 1000) * 1000

        # with one, 2 s after its last record it stops doing so, and the windows close
        clear_memory()
        result = build(busy, quiet, "2s").run(
            str(tmp_path / "idle"),
            spark=spark,
            duration=60,
            stop_when=lambda ex: (
                len(emitted("idle_windows")) >= len(want) and sum(n for _, _, n in emitted("idle_proc")) >= len(records)
            ),
        )
        got = emitted("idle_windows")
        assert len(got) == len(set(got)) and set(got) == want
        assert max(m.watermark or 0 for m in result.metrics) == watermark_ms * 1000

        # processing-time windows: every record counted once, the last closed by the clock
        # in a batch without input
        proc = emitted("idle_proc")
        assert len({(m, s) for m, s, _ in proc}) == len(proc) and sum(n for _, _, n in proc) == len(records)
        rows_in = {m.batch_id: m.rows_in for m in result.metrics}
        assert rows_in[max(memory_batches("idle_proc"))] == 0
    finally:
        kafka_delete(busy, quiet)
