"""The pipeline of the window crash test: event-time windows whose state (open panes and
sessions) lives across batches, written to file sinks. Integer values keep every result
exact whatever order a replayed exchange delivers rows in. ``SLUICE_TEST_OUT`` says where its
sinks write."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.compute as pc

import sluice
from sluice import agg, sinks, sources
from sluice import windows as W

OUT = os.environ.get("SLUICE_TEST_OUT", "/tmp/sluice-windows-crash")
ROWS = int(os.environ.get("SLUICE_TEST_ROWS", "24000"))
PER_BATCH = int(os.environ.get("SLUICE_TEST_PER_BATCH", "2000"))


def to_watts(batch: pa.RecordBatch) -> pa.RecordBatch:
    watts = pc.cast(pc.multiply(batch.column("kwh"), 1000.0), pa.int64(), safe=False)
    return pa.RecordBatch.from_arrays([batch.column("meter"), batch.column("ts"), watts], names=["meter", "ts", "watts"])


def build(out: str = OUT, rows: int = ROWS, per_batch: int = PER_BATCH) -> sluice.Pipeline:
    p = sluice.Pipeline("windows_crash", partitions=2, max_parallelism=32)
    readings = p.source(
        sources.generator(
            fields={
                "meter": sources.Keys(50, prefix="m"),
                "kwh": sources.Uniform(0.0, 2.0),
                # 5 ms of event time per row: a batch of 2000 rows spans 10 s; records are up to
                # 15 s out of order and the watermark waits 1 s, so some records are late
                "ts": sources.EventTime(jitter=15.0, step=0.005),
            },
            seed=5,
            total_rows=rows,
            max_rows_per_batch=per_batch,
            start_time=1_750_000_000.0,
            watermark_delay=1.0,
        ),
        name="readings",
    )
    watts = readings.map_batches(to_watts, schema={"meter": "string", "ts": "timestamp", "watts": "int64"}, name="watts")
    meters = watts.key_by("meter")
    meters.window(W.sliding("30s", "5s"), allowed_lateness="2s").aggregate(
        n=agg.count(), total=agg.sum("watts"), avg=agg.mean("watts"), hi=agg.max("watts"), name="sliding"
    ).sink(sinks.files(os.path.join(out, "sliding")), name="sliding_out")
    meters.windows(
        W.query(W.tumbling("10s"), name="10s", n=agg.count(), lo=agg.min("watts")),
        W.query(W.sliding("20s", "2s"), name="20s", total=agg.sum("watts")),
        name="shared",
    ).sink(sinks.files(os.path.join(out, "shared")), name="shared_out")
    meters.window(W.session("0.5s")).aggregate(n=agg.count(), total=agg.sum("watts"), name="sessions").sink(
        sinks.files(os.path.join(out, "sessions")), name="sessions_out"
    )
    return p


pipeline = build()
