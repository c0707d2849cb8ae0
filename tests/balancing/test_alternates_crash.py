"""An alternate switch mid-run keeps exactly-once output: a guard switches both operators'
alternates after batch 1; the driver is SIGKILLed while batch 2, the first with the new
alternates, runs; the restart replays batch 2 with the alternates it ran with (from the plan
log), every input row comes out exactly once, each batch's output is that of the alternate
its plan names, and the keyed alternates' shared state carries each key's count across the
switch and the crash."""

from __future__ import annotations

import collections
import json
import os

import pytest
from tests import crash_harness as harness
from tests.crash_harness import batch_rows, done_batches, kill_when, started_batches
from tests.pipelines import alternates_crash

from sluice.runtime.batch import metrics as metrics_log
from sluice.runtime.planlog import PlanLog

pytestmark = pytest.mark.spark

ROWS, PER_BATCH = 8000, 2000  # four batches; the switch applies from batch 2
POLICIES = 'policies:\n  - guards:\n      rules:\n        - when: "batch_id >= 1"\n          use: {scale: scaled, count: b}\n'


def switch_decisions(checkpoint: str) -> list[dict]:
    path = os.path.join(checkpoint, "decisions.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return [r for r in records if r.get("type") == "decision" and r["action"]["kind"] == "alternate"]


@pytest.mark.slow
def test_crash_after_an_alternate_switch_replays_with_the_alternate_it_ran_with(tmp_path):
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "ckpt")
    policies = tmp_path / "policies.yaml"
    policies.write_text(POLICIES)
    env = {"SLUICE_TEST_OUT": out, "SLUICE_TEST_ROWS": str(ROWS), "SLUICE_TEST_PER_BATCH": str(PER_BATCH)}

    def first_batch_after_the_switch_runs() -> bool:
        started, done = started_batches(checkpoint), done_batches(checkpoint)
        return any(d["batch_id"] + 1 in started and d["batch_id"] + 1 not in done for d in switch_decisions(checkpoint))

    proc = harness.launch(alternates_crash.__file__, checkpoint, env, "--policies", str(policies))
    kill_when(proc, first_batch_after_the_switch_runs)
    switched_after = {d["action"]["target"]: d["batch_id"] for d in switch_decisions(checkpoint)}
    assert set(switched_after) == {"scale", "count"}
    first_new = switched_after["scale"] + 1
    assert first_new not in done_batches(checkpoint)  # killed inside the first batch with the new alternates
    proc = harness.launch(alternates_crash.__file__, checkpoint, env, "--policies", str(policies))
    assert proc.wait(timeout=600) == 0

    log = PlanLog(checkpoint)
    assert log.plan_for(0).alternates == {"scale": "plain", "count": "a"}
    assert log.plan_for(first_new).alternates == {"scale": "scaled", "count": "b"}
    ran = {m.batch_id: m.alternates for m in metrics_log.read(checkpoint) if not m.skipped}
    assert ran[first_new] == {"scale": "scaled", "count": "b"}

    # every input row exactly once, each batch's values made by the alternate its plan names
    values = batch_rows(out, "values")
    ids = []
    for batch_id, rows in values.items():
        scale = log.plan_for(batch_id).alternates["scale"]
        for row in rows:
            r = dict(row)
            ids.append(r["id"])
            assert r["v"] == (r["id"] * 1000 if scale == "scaled" else r["id"]), (batch_id, r)
    assert sorted(ids) == list(range(ROWS))
    assert {log.plan_for(b).alternates["scale"] for b in values} == {"plain", "scaled"}

    # the keyed alternates share the count: it runs on across the switch and the crash
    counts = batch_rows(out, "counts")
    final = {}
    for batch_id, rows in sorted(counts.items()):
        mode = log.plan_for(batch_id).alternates["count"]
        for row in rows:
            r = dict(row)
            assert r["mode"] == mode, (batch_id, r)
            final[r["meter"]] = r["n"]
    per_meter = collections.Counter(dict(row)["meter"] for rows in values.values() for row in rows)
    assert sum(per_meter.values()) == ROWS
    assert final == dict(per_meter)
