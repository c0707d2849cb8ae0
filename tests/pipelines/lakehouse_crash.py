"""The pipeline of the lakehouse crash tests. ``SLUICE_TEST_MODE``:

- ``sinks``: a finite generator of ids; every row appended to a Delta table (``raw``) and an
  Iceberg table (SQLite catalog), and a per-key count and sum upserted into a Delta table
  (``per_key``).
- ``source``: the rows of the Delta table ``bronze`` appended to the Delta table ``copy``.

``SLUICE_TEST_OUT`` is the directory of the tables (and the Iceberg catalog)."""

from __future__ import annotations

import os

import sluice
from sluice import agg, sinks, sources

OUT = os.environ.get("SLUICE_TEST_OUT", "/tmp/sluice-lakehouse-crash")
MODE = os.environ.get("SLUICE_TEST_MODE", "sinks")
ROWS = int(os.environ.get("SLUICE_TEST_ROWS", "6000"))
PER_BATCH = int(os.environ.get("SLUICE_TEST_PER_BATCH", "500"))
KEYS = 13

pipeline = sluice.Pipeline(f"lakehouse_{MODE}", partitions=2, max_parallelism=16)
if MODE == "sinks":
    rows = pipeline.source(
        sources.generator(
            fields={"id": sources.Sequence(), "key": sources.Keys(KEYS, prefix="k")},
            total_rows=ROWS,
            max_rows_per_batch=PER_BATCH,
            seed=7,
        ),
        name="rows",
    )
    rows.sink(sinks.delta(f"{OUT}/raw"), name="raw")
    rows.sink(sinks.iceberg(f"sqlite:///{OUT}/catalog.db", "crash.raw", warehouse=f"file://{OUT}/warehouse"), name="iceberg")
    rows.key_by("key").aggregate(n=agg.count(), total=agg.sum("id"), name="per_key").sink(
        sinks.delta(f"{OUT}/per_key", mode="upsert", key="key"), name="per_key_out"
    )
else:
    pipeline.source(sources.delta(f"{OUT}/bronze", max_rows_per_batch=PER_BATCH), name="bronze").sink(
        sinks.delta(f"{OUT}/copy"), name="copy"
    )
