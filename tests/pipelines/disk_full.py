"""The pipeline of the disk-full chaos test and benchmark: a running count per key and a
tumbling event-time window per key, each into a files sink. A finite generator with a fixed
number of rows per batch makes every batch's rows the same in every run, so a run that
stopped on a full disk and was resumed must write exactly what an uninterrupted run writes.
``SLUICE_TEST_OUT`` says where its sinks write."""

from __future__ import annotations

import os

import sluice
from sluice import agg, sinks, sources
from sluice import windows as W
from sluice.graph.sources import GeneratorSource

OUT = os.environ.get("SLUICE_TEST_OUT", "/tmp/sluice-disk-full")
ROWS = int(os.environ.get("SLUICE_TEST_ROWS", "40000"))
PER_BATCH = int(os.environ.get("SLUICE_TEST_PER_BATCH", "2000"))
SINKS = ("counts", "windows")


START_TIME = 1_750_000_000.0


def readings(rows: int = ROWS, per_batch: int = PER_BATCH) -> GeneratorSource:
    """The source; its rows, generated again, are what the outputs must account for."""
    return sources.generator(
        fields={
            "meter": sources.Keys(200, prefix="m"),
            # 5 ms of event time per row, in order: a batch of 2000 rows spans 10 s, so 10 s
            # windows close every batch or so, and no record is late
            "ts": sources.EventTime(step=0.005),
        },
        seed=7,
        total_rows=rows,
        max_rows_per_batch=per_batch,
        start_time=START_TIME,
        watermark_delay=1.0,
    )


def build(out: str = OUT, rows: int = ROWS, per_batch: int = PER_BATCH) -> sluice.Pipeline:
    p = sluice.Pipeline("disk_full", partitions=2, max_parallelism=16)
    meters = p.source(readings(rows, per_batch), name="readings").key_by("meter")
    meters.aggregate(n=agg.count(), name="counts").sink(sinks.files(os.path.join(out, "counts")), name="counts_out")
    meters.window(W.tumbling("10s")).aggregate(n=agg.count(), name="per_10s").sink(
        sinks.files(os.path.join(out, "windows")), name="windows_out"
    )
    return p


pipeline = build()
