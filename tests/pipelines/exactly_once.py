"""The pipeline of the crash and rerouting tests: keyed state of three kinds, a fused
Python chain and file sinks. Integer values keep every result exact (no float summation
order to worry about). ``SLUICE_TEST_OUT`` says where its sinks write."""

from __future__ import annotations

import os
import time

import pyarrow as pa
import pyarrow.compute as pc

import sluice
from sluice import agg, sinks, sources

OUT = os.environ.get("SLUICE_TEST_OUT", "/tmp/sluice-exactly-once")
ROWS = int(os.environ.get("SLUICE_TEST_ROWS", "24000"))
PER_BATCH = int(os.environ.get("SLUICE_TEST_PER_BATCH", "2000"))
# while this file exists, a batch waits in its first operator: the standby test holds the
# active driver in the middle of a batch until the standby is ready, then kills it
HOLD = os.environ.get("SLUICE_TEST_HOLD")


def to_watts(batch: pa.RecordBatch) -> pa.RecordBatch:
    while HOLD and os.path.exists(HOLD):
        time.sleep(0.05)
    watts = pc.cast(pc.multiply(batch.column("kwh"), 1000.0), pa.int64(), safe=False)
    return pa.RecordBatch.from_arrays([batch.column("id"), batch.column("meter"), watts], names=["id", "meter", "watts"])


def running_max_jump(key, rows: pa.Table, state):
    """Per meter: the largest jump between consecutive readings so far (state: last, best)."""
    last, best = state.value or (None, 0)
    for w in rows.column("watts").to_pylist():
        if last is not None:
            best = max(best, abs(w - last))
        last = w
    state.update((last, best))
    return [{"meter": key[0], "max_jump": best}]


def build(out: str = OUT, rows: int = ROWS, per_batch: int = PER_BATCH) -> sluice.Pipeline:
    p = sluice.Pipeline("exactly_once", partitions=3, max_parallelism=32)
    readings = p.source(
        sources.generator(
            fields={
                "id": sources.Sequence(),
                "meter": sources.Keys(200, distribution="zipf", skew=1.1, prefix="m"),
                "kwh": sources.Uniform(0.0, 2.0),
            },
            seed=11,
            total_rows=rows,
            max_rows_per_batch=per_batch,
        ),
        name="readings",
    )
    watts = readings.map_batches(to_watts, schema={"id": "int64", "meter": "string", "watts": "int64"}, name="watts").filter(
        lambda r: r["id"] % 97 != 5, name="drop_some"
    )
    watts.sink(sinks.files(os.path.join(out, "raw"), format="json"), name="raw")
    by_meter = watts.key_by("meter")
    by_meter.aggregate(n=agg.count(), total=agg.sum("watts"), hi=agg.max("watts"), name="stats").sink(
        sinks.files(os.path.join(out, "stats")), name="stats_out"
    )
    by_meter.process(running_max_jump, schema={"meter": "string", "max_jump": "int64"}, name="jumps").sink(
        sinks.files(os.path.join(out, "jumps")), name="jumps_out"
    )
    return p


pipeline = build()
