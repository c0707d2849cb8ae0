"""A pipeline whose map leaves out a declared field for every tenth record (``SLUICE_TEST_OUT``:
where its sink writes). Those records must go to dead letters, not to the sink with NULLs."""

from __future__ import annotations

import os

import sluice
from sluice import sinks, sources

OUT = os.environ.get("SLUICE_TEST_OUT", "/tmp/sluice-half-declared")
ROWS = 2000


def double(record: dict) -> dict:
    if record["i"] % 10 == 0:
        return {"i": record["i"]}  # "twice" left out
    return {"i": record["i"], "twice": 2 * record["i"]}


pipeline = sluice.Pipeline("half_declared")
numbers = pipeline.source(
    sources.generator(fields={"i": sources.Sequence()}, total_rows=ROWS, max_rows_per_batch=1000), name="numbers"
)
numbers.map(double, schema={"i": "int64", "twice": "int64"}, name="double").sink(
    sinks.files(os.path.join(OUT, "doubled")), name="doubled"
)
