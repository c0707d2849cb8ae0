"""The pipeline of the balancing crash test: Zipf-skewed keys, a running count and sum of the
row numbers per key (exact integers), written by a file sink. ``SLUICE_TEST_OUT`` says where
sinks write; ``SLUICE_TEST_ROWS`` and ``SLUICE_TEST_PER_BATCH`` size the input."""

from __future__ import annotations

import os

import sluice
from sluice import agg, sinks, sources

OUT = os.environ.get("SLUICE_TEST_OUT", "/tmp/sluice-skewed")
ROWS = int(os.environ.get("SLUICE_TEST_ROWS", "48000"))
PER_BATCH = int(os.environ.get("SLUICE_TEST_PER_BATCH", "4000"))


def build(out: str = OUT, rows: int = ROWS, per_batch: int = PER_BATCH) -> sluice.Pipeline:
    p = sluice.Pipeline("skewed_keys", partitions=2, max_parallelism=32)
    events = p.source(
        sources.generator(
            fields={"k": sources.Keys(500, distribution="zipf", skew=1.3), "seq": sources.Sequence()},
            seed=23,
            total_rows=rows,
            max_rows_per_batch=per_batch,
        ),
        name="events",
    )
    events.key_by("k").aggregate(n=agg.count(), total=agg.sum("seq"), name="per_key").sink(
        sinks.files(os.path.join(out, "per_key"), format="parquet"), name="per_key_out"
    )
    return p


pipeline = build()
