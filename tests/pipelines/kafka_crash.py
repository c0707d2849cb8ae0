"""The pipeline of the Kafka crash test: JSON records of a Kafka topic (several partitions),
each written again, with its key and a header, to another topic by the transactional sink.
``SLUICE_TEST_TOPIC`` and ``SLUICE_TEST_OUT`` name them."""

from __future__ import annotations

import os

import pyarrow as pa

import sluice
from sluice import sinks, sources

TOPIC = os.environ.get("SLUICE_TEST_TOPIC", "crash_in")
OUT = os.environ.get("SLUICE_TEST_OUT", "crash_out")
BOOTSTRAP = os.environ.get("SLUICE_TEST_KAFKA", "127.0.0.1:9092")
PER_BATCH = int(os.environ.get("SLUICE_TEST_PER_BATCH", "1000"))
SCHEMA = pa.schema([("id", pa.int64()), ("key", pa.string()), ("v", pa.int64())])

pipeline = sluice.Pipeline("kafka_crash", partitions=2, max_parallelism=16)
records = pipeline.source(sources.kafka(TOPIC, SCHEMA, bootstrap=BOOTSTRAP, max_rows_per_batch=PER_BATCH), name="records")
# A small producer queue sends a batch's records in many requests, so the test can kill the
# driver while they are arriving (the transaction open, its commit not begun).
records.sink(
    sinks.kafka(
        OUT,
        bootstrap=BOOTSTRAP,
        key="key",
        headers={"id": "id"},
        config={"queue.buffering.max.messages": "100", "linger.ms": "1"},
    ),
    name="out",
)
