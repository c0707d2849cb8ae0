"""Exactly once: kill the driver at several moments, restart from the checkpoint, and the
output equals a run that never failed; move key groups between partitions while running,
and results stay exact."""

from __future__ import annotations

import glob
import os
import random
import signal
import subprocess
import sys
import time

import pyarrow.dataset as ds
import pytest

from tests.pipelines import exactly_once

pytestmark = pytest.mark.spark

ROWS, PER_BATCH = 24000, 2000
BATCHES = ROWS // PER_BATCH


def batch_outputs(out: str) -> dict[str, dict[int, list]]:
    """sink -> batch id -> sorted rows, from the complete batch directories a file sink wrote."""
    result = {}
    for sink, fmt in (("raw", "json"), ("stats", "parquet"), ("jumps", "parquet")):
        per_batch = {}
        for d in sorted(glob.glob(os.path.join(out, sink, "batch=*"))):
            assert os.path.exists(os.path.join(d, "_SUCCESS")), f"incomplete batch directory {d}"
            files = sorted(glob.glob(os.path.join(d, "part-*")))
            rows = ds.dataset(files, format=fmt).to_table().to_pylist() if files else []
            per_batch[int(d.rsplit("=", 1)[1])] = sorted(tuple(sorted(r.items())) for r in rows)
        result[sink] = per_batch
    return result


def done_batches(checkpoint: str) -> set[int]:
    return {int(os.path.basename(p).split(".")[0]) for p in glob.glob(os.path.join(checkpoint, "batches", "*.done.json"))}


def started_batches(checkpoint: str) -> set[int]:
    return {int(os.path.basename(p).split(".")[0]) for p in glob.glob(os.path.join(checkpoint, "batches", "*.start.json"))}


def launch(out: str, checkpoint: str) -> subprocess.Popen:
    env = dict(os.environ, SLUICE_TEST_OUT=out, SLUICE_TEST_ROWS=str(ROWS), SLUICE_TEST_PER_BATCH=str(PER_BATCH),
               SLUICE_MASTER="local[2]")
    return subprocess.Popen([sys.executable, "-m", "sluice", "run", exactly_once.__file__, "--checkpoint", checkpoint,
                             "--quiet"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def kill_when(proc: subprocess.Popen, condition, timeout: float = 240) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the pipeline exited ({proc.returncode}) before the moment to kill it")
        if condition():
            os.killpg(proc.pid, signal.SIGKILL)  # the driver and its Spark JVM, no goodbyes
            proc.wait()
            return
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    pytest.fail("the moment to kill never came")


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
    kill_when(proc, lambda: bool(glob.glob(os.path.join(checkpoint, "state", "*", "deltas", "*8", "*.arrow")))
              and 8 not in done_batches(checkpoint))
    # 4. restart and let it finish
    proc = launch(out, checkpoint)
    assert proc.wait(timeout=300) == 0
    got = batch_outputs(out)
    assert got["raw"] == reference["raw"]
    assert got["stats"] == reference["stats"]
    assert got["jumps"] == reference["jumps"]
    assert sorted(reference["stats"]) == list(range(BATCHES))


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
