"""The pipeline of the real-time crash test: a count per key over a Kafka topic, with a
latency goal below the micro-batch floor, so it runs in Spark's real-time mode
(``plan.mode``). ``SLUICE_TEST_TOPIC`` and ``SLUICE_TEST_OUT`` name the topics."""

from __future__ import annotations

import os

import pyarrow as pa

import sluice
from sluice import agg, sinks, sources

TOPIC = os.environ.get("SLUICE_TEST_TOPIC", "rt_in")
OUT = os.environ.get("SLUICE_TEST_OUT", "rt_out")
SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.string())])

pipeline = sluice.Pipeline("realtime_crash")
# from the offsets at the first start: a restart that lost its state could not count the
# records sent before it again, so the counts after a restart show what state survived
(
    pipeline.source(sources.kafka(TOPIC, SCHEMA, starting_offsets="latest"), name="records")
    .key_by("k")
    .aggregate(n=agg.count(), last=agg.max("id"), name="per_key")
    .sink(sinks.kafka(OUT, key=("k",)), name="out")
)
pipeline.goals(latency="200ms")
