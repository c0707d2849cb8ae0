"""Exactly once: kill the driver at several moments, restart from the checkpoint, and the
output equals a run that never failed; move key groups between partitions while running,
and results stay exact."""

from __future__ import annotations

import os
import random

import pytest

from tests import crash_harness as harness
from tests.crash_harness import batch_rows, done_batches, kill_when, started_batches, state_written
from tests.pipelines import exactly_once

pytestmark = pytest.mark.spark

ROWS, PER_BATCH = 24000, 2000
BATCHES = ROWS // PER_BATCH


def batch_outputs(out: str) -> dict[str, dict[int, list]]:
    """sink -> batch id -> sorted rows."""
    return {sink: batch_rows(out, sink, fmt) for sink, fmt in (("raw", "json"), ("stats", "parquet"), ("jumps", "parquet"))}


def launch(out: str, checkpoint: str):
    env = dict(SLUICE_TEST_OUT=out, SLUICE_TEST_ROWS=str(ROWS), SLUICE_TEST_PER_BATCH=str(PER_BATCH))
    return harness.launch(exactly_once.__file__, checkpoint, env)


@pytest.fixture(scope="module")
def reference(spark, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("reference"))
    pipeline = exactly_once.build(out, ROWS, PER_BATCH)
    pipeline.run(os.path.join(out, "checkpoint"), spark=spark)
    return batch_outputs(out)


@pytest.mark.slow
def test_sigkill_at_several_moments_then_restart_equals_uninterrupted_run(reference, tmp_path):
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    # 1. in the middle of batch 2 (started, not done)
    proc = launch(out, checkpoint)
    kill_when(proc, lambda: 2 in started_batches(checkpoint) and 2 not in done_batches(checkpoint))
    # 2. right after batch 5 is recorded done (Spark may not have committed it yet)
    proc = launch(out, checkpoint)
    kill_when(proc, lambda: 5 in done_batches(checkpoint))
    # 3. as soon as a keyed stage has written state for batch 8, before the commit
    proc = launch(out, checkpoint)
    kill_when(proc, lambda: state_written(checkpoint, 8) and 8 not in done_batches(checkpoint))
    # 4. restart and let it finish
    proc = launch(out, checkpoint)
    assert proc.wait(timeout=300) == 0
    got = batch_outputs(out)
    assert got["raw"] == reference["raw"]
    assert got["stats"] == reference["stats"]
    assert got["jumps"] == reference["jumps"]
    assert sorted(reference["stats"]) == list(range(BATCHES + 1))  # + the end-of-input batch


def test_moving_key_groups_between_batches_keeps_results_exact(reference, spark, tmp_path):
    out = str(tmp_path)
    pipeline = exactly_once.build(out, ROWS, PER_BATCH)
    rng = random.Random(7)
    partition_counts = [1, 4, 2, 3]
    moves = []

    def rebalance(metrics, plan):
        partitions = partition_counts[metrics.batch_id % len(partition_counts)]
        new_plan = plan
        for op_id in plan.keyed:
            routing = [rng.randrange(partitions) for _ in range(plan.max_parallelism)]
            moves.append(sum(a != b for a, b in zip(plan.keyed[op_id].routing, routing)))
            new_plan = new_plan.with_routing(metrics.batch_id + 1, op_id, routing, partitions)
        return new_plan

    pipeline.run(os.path.join(out, "checkpoint"), spark=spark, controller=rebalance)
    assert sum(moves) > 100  # key groups really moved, many times
    from sluice.runtime.planlog import PlanLog

    assert len(PlanLog(os.path.join(out, "checkpoint")).versions()) >= BATCHES - 1
    got = batch_outputs(out)
    assert got == reference
