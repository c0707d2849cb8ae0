"""A dress rehearsal of a job's batch: its whole lineage run once over no rows, on a scratch
checkpoint, so that the batch that counts finds Spark warm.

The first batch of a fresh driver pays for work no later batch repeats: Spark loads and
just-in-time compiles the classes of the batch's physical plan and generates its code, the
Python workers import the stages' modules and the pipeline's functions, the keyed stages
open their stores. A hot standby (``RunOptions(standby=True)``) has time for all of it
while it waits: it rehearses the batch before it waits for the lease, and its first batch
after a takeover is then a warm one.

The rehearsal writes only under a temporary directory (its own pipeline record, plan log,
key-group stores and side outputs); it writes no sink (each sink's input is counted
instead) and never touches the job's checkpoint.
"""

from __future__ import annotations

import shutil
import tempfile
import time

from sluice.runtime.batch.compile import SourceInfo
from sluice.runtime.batch.executor import MICROS, BatchExecutor
from sluice.runtime.checkpoint import Checkpoint
from sluice.runtime.kernels.keyed import BatchContext
from sluice.runtime.pipeline_record import open_checkpoint
from sluice.runtime.planlog import PlanLog


def rehearse_batch(
    spark, graph, partitions: int, schema, sources: list[SourceInfo], *, fuse: bool = True, collocate: bool = True
) -> float:
    """Run ``graph``'s batch lineage over an empty DataFrame of the stream's ``schema``;
    returns the seconds it took. ``graph`` is the validated job graph, ``sources`` what the
    executor knows of its sources."""
    started = time.time()
    scratch = tempfile.mkdtemp(prefix="sluice-rehearsal-")
    try:
        checkpoint = Checkpoint(scratch)
        plan_log = PlanLog(checkpoint)
        planned = open_checkpoint(graph, checkpoint, plan_log, partitions, fuse=fuse, collocate=collocate)
        executor = BatchExecutor(spark, planned, checkpoint, plan_log, sources)
        plan = plan_log.plan_for(0)
        assert plan is not None  # a new checkpoint's first plan
        spark.sparkContext.setJobDescription("sluice: rehearse a batch")
        empty = spark.createDataFrame([], schema)
        frames, lineage = executor._build(empty, 0, plan, BatchContext(0, 0, None, int(started * MICROS)))
        for sink in planned.sinks():
            frames[sink.inputs[0]].count()
        lineage.release()
        spark.sparkContext.setJobDescription(None)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return time.time() - started
