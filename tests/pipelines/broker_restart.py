"""The pipeline of the broker-restart tests: ``SLUICE_TEST_KIND=kafka``: JSON records of a
Kafka topic (the test's private broker) into a Parquet files sink; ``postgres``: generated
rows at a fixed rate into a PostgreSQL table (the test's private server). The environment
names the broker, topic or table, and the output directory."""

from __future__ import annotations

import os

import pyarrow as pa

import sluice
from sluice import sinks, sources

KIND = os.environ.get("SLUICE_TEST_KIND", "kafka")
BOOTSTRAP = os.environ.get("SLUICE_TEST_KAFKA", "127.0.0.1:9092")
TOPIC = os.environ.get("SLUICE_TEST_TOPIC", "restart_in")
OUT = os.environ.get("SLUICE_TEST_OUT", "/tmp/sluice-broker-restart")
DSN = os.environ.get("SLUICE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
TABLE = os.environ.get("SLUICE_TEST_TABLE", "restart_out")
ROWS = int(os.environ.get("SLUICE_TEST_ROWS", "20000"))
RATE = float(os.environ.get("SLUICE_TEST_RATE", "1000"))
PER_BATCH = int(os.environ.get("SLUICE_TEST_PER_BATCH", "1000"))
SCHEMA = pa.schema([("id", pa.int64()), ("key", pa.string()), ("v", pa.int64())])

pipeline = sluice.Pipeline("broker_restart", partitions=2)
if KIND == "kafka":
    records = pipeline.source(sources.kafka(TOPIC, SCHEMA, bootstrap=BOOTSTRAP, max_rows_per_batch=PER_BATCH), name="records")
    records.sink(sinks.files(OUT), name="out")
else:
    rows = pipeline.source(
        sources.generator(
            fields={"id": sources.Sequence(), "key": sources.Keys(13, prefix="k"), "v": sources.Keys(100)},
            rate=RATE,
            total_rows=ROWS,
            max_rows_per_batch=PER_BATCH,
        ),
        name="records",
    )
    rows.sink(sinks.postgres(DSN, TABLE), name="out")
