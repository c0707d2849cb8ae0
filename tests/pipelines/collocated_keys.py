"""The pipeline of the collocation tests: a running count and sum per key (``aggregate``),
then, keyed on the same key, a ``reduce`` adding up those running figures over the batches,
written by a file sink. The two keyed operators share one stage (no exchange between them)
unless collocation is off. ``SLUICE_TEST_OUT`` says where sinks write; ``SLUICE_TEST_ROWS``
and ``SLUICE_TEST_PER_BATCH`` size the input."""

from __future__ import annotations

import os

import sluice
from sluice import agg, sinks, sources

OUT = os.environ.get("SLUICE_TEST_OUT", "/tmp/sluice-collocated")
ROWS = int(os.environ.get("SLUICE_TEST_ROWS", "24000"))
PER_BATCH = int(os.environ.get("SLUICE_TEST_PER_BATCH", "4000"))


def add_up(acc: dict, row: dict) -> dict:
    """Exact integers, so any order of the same rows gives the same result."""
    return {"k": row["k"], "n": acc["n"] + row["n"], "total": acc["total"] + row["total"]}


def build(out: str = OUT, rows: int = ROWS, per_batch: int = PER_BATCH) -> sluice.Pipeline:
    p = sluice.Pipeline("collocated_keys", partitions=2, max_parallelism=32)
    events = p.source(
        sources.generator(
            fields={"k": sources.Keys(300, distribution="zipf", skew=1.2), "seq": sources.Sequence()},
            seed=29,
            total_rows=rows,
            max_rows_per_batch=per_batch,
        ),
        name="events",
    )
    (
        events.key_by("k")
        .aggregate(n=agg.count(), total=agg.sum("seq"), name="per_key")
        .key_by("k")
        .reduce(add_up, name="summed")
        .sink(sinks.files(os.path.join(out, "summed"), format="parquet"), name="summed_out")
    )
    return p


pipeline = build()
