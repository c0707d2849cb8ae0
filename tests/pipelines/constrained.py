"""The pipeline of the control-loop tests: a latency-constrained Python map and keyed count.

Rows are all there from the start (a generator without rate: each row is stamped when a
batch admits it), so a batch's size alone sets its latency. The map sleeps a fixed time per
row, cheap for the first ``SLUICE_TEST_STEP_ROW`` rows and three times dearer after them:
a step in load (``SLUICE_TEST_HEAVY`` times dearer) that makes the batch size in force too
big for the bound. Sleep makes the
cost independent of how busy the machine is. ``SLUICE_TEST_OUT`` says where sinks write.
"""

from __future__ import annotations

import os
import time

import pyarrow as pa
import pyarrow.compute as pc

import sluice
from sluice import agg, sinks, sources

OUT = os.environ.get("SLUICE_TEST_OUT", "/tmp/sluice-constrained")
ROWS = int(os.environ.get("SLUICE_TEST_ROWS", "100000"))
STEP_ROW = int(os.environ.get("SLUICE_TEST_STEP_ROW", "40000"))
FIRST_CAP = int(os.environ.get("SLUICE_TEST_FIRST_CAP", "20000"))
COST_US = float(os.environ.get("SLUICE_TEST_COST_US", "100"))
HEAVY = float(os.environ.get("SLUICE_TEST_HEAVY", "5"))
BOUND = os.environ.get("SLUICE_TEST_BOUND", "4s")


def costly(batch: pa.RecordBatch) -> pa.RecordBatch:
    ids = batch.column("id")
    heavy = pc.sum(pc.greater_equal(ids, STEP_ROW)).as_py() or 0
    time.sleep(((batch.num_rows - heavy) + HEAVY * heavy) * COST_US / 1e6)
    return batch


def build(out: str = OUT, rows: int = ROWS) -> sluice.Pipeline:
    p = sluice.Pipeline("constrained", partitions=2, max_parallelism=16)
    readings = p.source(
        sources.generator(
            fields={"id": sources.Sequence(), "meter": sources.Keys(50, prefix="m")},
            seed=5,
            total_rows=rows,
            max_rows_per_batch=FIRST_CAP,
        ),
        name="readings",
    )
    mapped = readings.map_batches(costly, name="costly")
    mapped.sink(sinks.files(os.path.join(out, "raw"), format="parquet"), name="raw")
    mapped.key_by("meter").aggregate(n=agg.count(), name="counts").sink(
        sinks.files(os.path.join(out, "counts")), name="counts_out"
    )
    p.constrain(BOUND, over="8s", name="bound")
    return p


pipeline = build()
