"""A finite pipeline whose batches take a while (so a Ctrl-C finds one running), which a
test interrupts and then restarts: a fused Python map and a file sink. ``SLUICE_TEST_OUT``
says where its sink writes."""

from __future__ import annotations

import os
import time

import sluice
from sluice import sinks, sources

OUT = os.environ.get("SLUICE_TEST_OUT", "/tmp/sluice-interruptible")
ROWS = int(os.environ.get("SLUICE_TEST_ROWS", "3000"))
PER_BATCH = 500


def double(record: dict) -> dict:
    time.sleep(0.003)  # about 1.5 s a batch
    return {"i": record["i"], "twice": 2 * record["i"]}


pipeline = sluice.Pipeline("interruptible")
numbers = pipeline.source(
    sources.generator(fields={"i": sources.Sequence()}, total_rows=ROWS, max_rows_per_batch=PER_BATCH), name="numbers"
)
numbers.map(double, schema={"i": "int64", "twice": "int64"}, name="double").sink(
    sinks.files(os.path.join(OUT, "doubled")), name="doubled"
)
