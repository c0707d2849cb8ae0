"""Joins survive a crash and move with their key groups: SIGKILL the driver while join state
is buffered (mid-batch, and between a delta write and its commit in the first batch after a
rescale from 2 to 3 partitions with a new routing table), restart from the checkpoint, and
every batch's join output and late records equal a run that never failed or moved."""

from __future__ import annotations

import os

import pytest
from tests import crash_harness as harness
from tests.crash_harness import batch_rows, done_batches, kill_when, started_batches, state_written
from tests.pipelines import joins_crash

from sluice.plan.physical import initial_plan
from sluice.runtime.planlog import PlanLog
from sluice.runtime.side_outputs import read_side_output

pytestmark = pytest.mark.spark

ROWS, PER_BATCH = 6000, 1000
BATCHES = ROWS // PER_BATCH
SINKS = ("wjoin", "ijoin", "lookup")
RESCALE_AT = 3  # the first batch with 3 partitions and a new routing table


def outputs(out: str, checkpoint: str) -> dict[str, dict[int, list]]:
    result = {sink: batch_rows(out, sink) for sink in SINKS}
    for op in ("wjoin", "ijoin"):
        late: dict[int, list] = {}
        for record in read_side_output(checkpoint, f"side/{op}/late"):
            late.setdefault(record["batch_id"], []).append(str(record["record"]))
        result[f"late:{op}"] = {b: sorted(records) for b, records in late.items()}
    return result


def rescale_from(checkpoint: str, batch: int) -> None:
    """Log the plans before the first run: from ``batch`` on every join runs on 3 partitions
    with a routing table unlike the first (key groups dealt round-robin, backwards)."""
    graph = joins_crash.build(os.devnull).graph
    graph.validate()
    first = initial_plan(graph, 2)
    log = PlanLog(checkpoint)
    log.write(first)
    moved = first
    for op_id, stage in first.keyed.items():
        routing = [(len(stage.routing) - 1 - kg) % 3 for kg in range(len(stage.routing))]
        moved = moved.with_routing(batch, op_id, routing, partitions=3)
    log.write(moved)


@pytest.mark.slow
def test_joins_survive_sigkill_and_rescaling(spark, tmp_path):
    reference_out = str(tmp_path / "reference")
    reference_ckpt = os.path.join(reference_out, "checkpoint")
    joins_crash.build(reference_out, ROWS, PER_BATCH).run(reference_ckpt, spark=spark)
    reference = outputs(reference_out, reference_ckpt)
    # every data batch wrote rows; the batches after them (end of input, a batch without input
    # that closes windows) write a directory only when they emit something
    assert set(range(BATCHES)) <= set(reference["wjoin"]) <= set(range(BATCHES + 3))
    assert sum(len(rows) for rows in reference["ijoin"].values()) > 0
    assert all(sum(map(len, reference[f"late:{op}"].values())) > 0 for op in ("wjoin", "ijoin")), "late records"

    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    rescale_from(checkpoint, RESCALE_AT)
    env = {"SLUICE_TEST_OUT": out, "SLUICE_TEST_ROWS": str(ROWS), "SLUICE_TEST_PER_BATCH": str(PER_BATCH)}
    # 1. in the middle of batch 2: records of batches 0-1 are buffered
    proc = harness.launch(joins_crash.__file__, checkpoint, env)
    kill_when(proc, lambda: 2 in started_batches(checkpoint) and 2 not in done_batches(checkpoint))
    # 2. in the first batch after the rescale, once a join has written state, before the commit
    proc = harness.launch(joins_crash.__file__, checkpoint, env)
    kill_when(proc, lambda: state_written(checkpoint, RESCALE_AT) and RESCALE_AT not in done_batches(checkpoint))
    # 3. restart and let it finish
    proc = harness.launch(joins_crash.__file__, checkpoint, env)
    assert proc.wait(timeout=600) == 0
    assert PlanLog(checkpoint).plan_for(RESCALE_AT).keyed["wjoin"].partitions == 3
    got = outputs(out, checkpoint)
    for name in reference:
        assert got[name] == reference[name], name
