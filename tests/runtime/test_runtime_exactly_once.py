"""Exactly once: kill the driver at several moments, restart from the checkpoint, and the
output equals a run that never failed; move key groups between partitions while running,
and results stay exact."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest
from tests import crash_harness as harness
from tests.crash_harness import batch_rows, done_batches, kill_when, started_batches, state_written
from tests.pipelines import exactly_once

from sluice.runtime.checkpoint import Checkpoint
from sluice.runtime.lease import Lease

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
    # every data batch wrote rows; the batches after them (end of input, a batch without input
    # that closes windows) write a directory only when they emit something
    assert set(range(BATCHES)) <= set(reference["stats"]) <= set(range(BATCHES + 3))


def wait_until(condition, what: str, *procs, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while not condition():
        for proc in procs:
            if proc.poll() is not None:
                pytest.fail(f"a driver exited ({proc.returncode}) while waiting for {what}")
        if time.time() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.mark.slow
def test_standby_takes_over_from_a_killed_driver_exactly_once(reference, tmp_path):
    """A hot standby (``sluice run --standby``) waits while the active driver runs, takes over
    when it is SIGKILLed in the middle of a batch, and the output equals a run that never failed."""
    out, checkpoint, hold = str(tmp_path / "out"), str(tmp_path / "checkpoint"), str(tmp_path / "hold")
    env = dict(SLUICE_TEST_OUT=out, SLUICE_TEST_ROWS=str(ROWS), SLUICE_TEST_PER_BATCH=str(PER_BATCH), SLUICE_TEST_HOLD=hold)
    active = harness.launch(exactly_once.__file__, checkpoint, env)
    log = tmp_path / "standby.log"
    standby = subprocess.Popen(
        [sys.executable, "-m", "sluice", "run", exactly_once.__file__, "--checkpoint", checkpoint, "--quiet", "--standby"],
        env=dict(os.environ, SLUICE_MASTER="local[2]", **env),
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        # after batch 1 the active's next batch waits in its first operator: killed mid-batch
        wait_until(lambda: 1 in done_batches(checkpoint), "batch 1", active, standby)
        open(hold, "w").close()
        wait_until(lambda: b"standby: ready" in log.read_bytes(), "the standby", active, standby)
        wait_until(lambda: started_batches(checkpoint) - done_batches(checkpoint), "a held batch", active, standby)
        lease = Lease(Checkpoint(checkpoint)).read()
        assert lease is not None and lease.epoch == 1  # the standby waited
        os.killpg(active.pid, signal.SIGKILL)  # the driver and its Spark JVM, no goodbyes
        active.wait()
        os.remove(hold)
        assert standby.wait(timeout=300) == 0, log.read_text()
    finally:
        for proc in (active, standby):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert b"standby: took over" in log.read_bytes()
    assert Lease(Checkpoint(checkpoint)).read().epoch == 2
    got = batch_outputs(out)
    assert got["raw"] == reference["raw"]
    assert got["stats"] == reference["stats"]
    assert got["jumps"] == reference["jumps"]


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
