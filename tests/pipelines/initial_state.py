"""The pipeline of the initial-state crash test: a running count and sum per user primed from
a backfill table (``SLUICE_TEST_INITIAL``, a Parquet file), written to a file sink.
``SLUICE_TEST_SLOW`` (seconds) holds each batch after the aggregate has written its state, so
a test can kill the job inside its first batch."""

from __future__ import annotations

import os
import time

import pyarrow as pa

import sluice
from sluice import agg, sinks, sources

OUT = os.environ.get("SLUICE_TEST_OUT", "/tmp/sluice-initial-state")
INITIAL = os.environ.get("SLUICE_TEST_INITIAL")
SLOW = float(os.environ.get("SLUICE_TEST_SLOW", "0"))
ROWS, PER_BATCH = 6_000, 1_000


def hold(batch: pa.RecordBatch) -> pa.RecordBatch:
    time.sleep(SLOW)
    return batch


def build(out: str = OUT, initial=INITIAL) -> sluice.Pipeline:
    p = sluice.Pipeline("initial_state", partitions=2, max_parallelism=16)
    raw = p.source(
        sources.generator(
            fields={"k": sources.Keys(300, prefix="u"), "v": sources.Sequence()},
            total_rows=ROWS,
            seed=7,
            max_rows_per_batch=PER_BATCH,
        ),
        name="raw",
    )
    counts = raw.key_by("k").aggregate(n=agg.count(), s=agg.sum("v"), initial_state=initial, name="counts")
    if SLOW:
        counts = counts.map_batches(hold, name="hold")
    counts.sink(sinks.files(os.path.join(out, "counts")), name="counts_out")
    return p


pipeline = build()
