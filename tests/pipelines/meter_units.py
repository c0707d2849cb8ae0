"""A helper module the cluster test's pipeline imports by name: on a cluster, executors can
import it only because ``sluice run`` ships the modules beside the pipeline file."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


def to_watts(batch: pa.RecordBatch) -> pa.RecordBatch:
    watts = pc.cast(pc.multiply(batch.column("kwh"), 1000.0), pa.int64(), safe=False)
    return pa.RecordBatch.from_arrays([batch.column("meter"), batch.column("ts"), watts], names=["meter", "ts", "watts"])
