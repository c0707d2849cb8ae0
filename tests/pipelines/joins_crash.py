"""The pipeline of the join crash test: a windowed outer join, an interval join and a table
lookup, whose buffered records and table rows live in the key-group store across batches,
written to file sinks. Records are up to 3 s out of order and the watermark waits 1 s, so
some are late. ``SLUICE_TEST_OUT`` says where its sinks write."""

from __future__ import annotations

import os

import sluice
from sluice import sinks, sources
from sluice import windows as W

OUT = os.environ.get("SLUICE_TEST_OUT", "/tmp/sluice-joins-crash")
ROWS = int(os.environ.get("SLUICE_TEST_ROWS", "6000"))
PER_BATCH = int(os.environ.get("SLUICE_TEST_PER_BATCH", "1000"))
START = 1_750_000_000.0


def _side(p, name: str, seed: int, value: str, rows: int, per_batch: int):
    return p.source(
        sources.generator(
            fields={
                "meter": sources.Keys(80, prefix="m"),
                value: sources.Sequence(),
                "ts": sources.EventTime(jitter=3.0, step=0.005),
            },
            seed=seed,
            total_rows=rows,
            max_rows_per_batch=per_batch,
            start_time=START,
            watermark_delay=1.0,
        ),
        name=name,
    )


def build(out: str = OUT, rows: int = ROWS, per_batch: int = PER_BATCH) -> sluice.Pipeline:
    p = sluice.Pipeline("joins_crash", partitions=2, max_parallelism=32)
    readings = _side(p, "readings", 11, "reading", rows, per_batch).key_by("meter")
    prices = _side(p, "prices", 12, "price", rows, per_batch).key_by("meter")
    tariffs = p.source(
        sources.generator(
            fields={"meter": sources.Keys(80, prefix="m"), "seq": sources.Sequence(), "tariff": sources.Keys(7)},
            seed=13,
            total_rows=rows // 4,
            max_rows_per_batch=per_batch // 4,
        ),
        name="tariffs",
    ).key_by("meter")
    readings.join(prices, window=W.tumbling("2s"), how="outer", name="wjoin").sink(
        sinks.files(os.path.join(out, "wjoin"), format="parquet"), name="wjoin_out"
    )
    readings.join(prices, between=("-0.5s", "+0.2s"), name="ijoin").sink(
        sinks.files(os.path.join(out, "ijoin"), format="parquet"), name="ijoin_out"
    )
    readings.lookup(tariffs, version="seq", name="tariffs_of").sink(
        sinks.files(os.path.join(out, "lookup"), format="parquet"), name="lookup_out"
    )
    return p


pipeline = build()
