"""The pipeline of the standalone-cluster test: a keyed running aggregate and an event-time
sliding window, after a Python map imported from a module beside this file (``meter_units``,
a plain import: executors get it only through the shipped code). Integer values keep every
result exact. ``SLUICE_TEST_OUT`` says where its sinks write."""

from __future__ import annotations

import os

import meter_units

import sluice
from sluice import agg, sinks, sources
from sluice import windows as W

OUT = os.environ.get("SLUICE_TEST_OUT", "/tmp/sluice-cluster-meters")
ROWS = int(os.environ.get("SLUICE_TEST_ROWS", "12000"))
PER_BATCH = int(os.environ.get("SLUICE_TEST_PER_BATCH", "1500"))


def build(out: str = OUT, rows: int = ROWS, per_batch: int = PER_BATCH) -> sluice.Pipeline:
    p = sluice.Pipeline("cluster_meters", partitions=2, max_parallelism=16)
    readings = p.source(
        sources.generator(
            fields={
                "meter": sources.Keys(40, prefix="m"),
                "kwh": sources.Uniform(0.0, 2.0),
                "ts": sources.EventTime(jitter=5.0, step=0.005),
            },
            seed=9,
            total_rows=rows,
            max_rows_per_batch=per_batch,
            start_time=1_750_000_000.0,
            watermark_delay=1.0,
        ),
        name="readings",
    )
    meters = readings.map_batches(
        meter_units.to_watts, schema={"meter": "string", "ts": "timestamp", "watts": "int64"}, name="watts"
    ).key_by("meter")
    meters.aggregate(n=agg.count(), total=agg.sum("watts"), hi=agg.max("watts"), name="totals").sink(
        sinks.files(os.path.join(out, "totals")), name="totals_out"
    )
    meters.window(W.sliding("10s", "5s")).aggregate(n=agg.count(), total=agg.sum("watts"), name="sliding").sink(
        sinks.files(os.path.join(out, "sliding")), name="sliding_out"
    )
    return p


pipeline = build()
