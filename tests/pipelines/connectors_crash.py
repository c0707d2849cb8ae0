"""The pipeline of the connector crash test: JSON messages from a NATS JetStream stream,
every record appended to one PostgreSQL table and a per-key count upserted into another.
``SLUICE_TEST_STREAM`` and ``SLUICE_TEST_TABLE`` (a prefix) name them."""

from __future__ import annotations

import os

import pyarrow as pa

import sluice
from sluice import agg, sinks, sources

STREAM = os.environ.get("SLUICE_TEST_STREAM", "crash")
TABLE = os.environ.get("SLUICE_TEST_TABLE", "crash")
DSN = os.environ.get("SLUICE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
PER_BATCH = int(os.environ.get("SLUICE_TEST_PER_BATCH", "400"))
SCHEMA = pa.schema([("id", pa.int64()), ("key", pa.string()), ("v", pa.int64())])

pipeline = sluice.Pipeline("connectors_crash", partitions=2, max_parallelism=16)
records = pipeline.source(sources.nats(STREAM, SCHEMA, max_rows_per_batch=PER_BATCH), name="records")
records.sink(sinks.postgres(DSN, f"{TABLE}_raw"), name="raw")
records.key_by("key").aggregate(n=agg.count(), total=agg.sum("v"), name="per_key").sink(
    sinks.postgres(DSN, f"{TABLE}_per_key", key="key"), name="per_key_out"
)
