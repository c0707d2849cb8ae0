"""A crash in the batch right after a migration: SIGKILL the driver while the first batch
with the new routing runs (its moved key groups' state read by their new partition), restart
from the checkpoint, and every key's final count and sum equal a run that never moved
anything."""

from __future__ import annotations

import json
import os

import pytest
from tests import crash_harness as harness
from tests.crash_harness import batch_rows, done_batches, kill_when, started_batches
from tests.pipelines import skewed_keys

from sluice.runtime.planlog import PlanLog

pytestmark = pytest.mark.spark

ROWS, PER_BATCH = 24000, 4000  # six batches: the first migration comes after batch 1
POLICIES = "policies:\n  - balancing: {threshold: 0.05, min_gain: 0.2, window: 2}\n"


def final_per_key(out: str) -> dict:
    """key -> (count, sum) as of the last batch that emitted the key."""
    latest = {}
    for _, rows in sorted(batch_rows(out, "per_key").items()):
        for row in rows:
            r = dict(row)
            latest[r["k"]] = (r["n"], r["total"])
    return latest


def routing_decisions(checkpoint: str) -> list[int]:
    """Batch ids after which the controller decided a new routing."""
    path = os.path.join(checkpoint, "decisions.jsonl")
    if not os.path.exists(path):
        return []
    records = [json.loads(line) for line in open(path) if line.strip()]
    return [r["batch_id"] for r in records if r.get("type") == "decision" and r["action"]["kind"] == "routing"]


@pytest.mark.slow
def test_crash_in_the_batch_after_a_migration_restarts_to_the_same_output(spark, tmp_path):
    from sluice.job import RunOptions
    from sluice.job.run import run_pipeline

    env = dict(SLUICE_TEST_ROWS=str(ROWS), SLUICE_TEST_PER_BATCH=str(PER_BATCH))
    fixed_out, fixed_checkpoint = str(tmp_path / "fixed_out"), str(tmp_path / "fixed")
    run_pipeline(skewed_keys.build(fixed_out, ROWS, PER_BATCH), fixed_checkpoint, RunOptions(spark=spark))  # no controller
    expected = final_per_key(fixed_out)
    assert sum(n for n, _ in expected.values()) == ROWS
    assert PlanLog(fixed_checkpoint).latest().version == 0  # the reference never moved anything

    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "balanced")
    policies = tmp_path / "policies.yaml"
    policies.write_text(POLICIES)

    def in_the_batch_after_a_migration() -> bool:
        started, done = started_batches(checkpoint), done_batches(checkpoint)
        return any(b + 1 in started and b + 1 not in done for b in routing_decisions(checkpoint))

    env |= {"SLUICE_TEST_OUT": out}
    proc = harness.launch(skewed_keys.__file__, checkpoint, env, "--policies", str(policies))
    kill_when(proc, in_the_batch_after_a_migration)
    (moved_after, *_) = routing_decisions(checkpoint)
    assert moved_after + 1 not in done_batches(checkpoint)
    proc = harness.launch(skewed_keys.__file__, checkpoint, env, "--policies", str(policies))
    assert proc.wait(timeout=600) == 0

    log = PlanLog(checkpoint)
    (op_id,) = log.latest().keyed
    assert log.plan_for(moved_after + 1).keyed[op_id].routing != log.plan_for(0).keyed[op_id].routing
    assert final_per_key(out) == expected  # every key's count and sum, as if nothing had moved
