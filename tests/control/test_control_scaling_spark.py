"""Scaling before escalation on Spark: a latency bound no batch size can hold makes the batch
sizing policy give the keyed stage more partitions first (through the plan log, state
following its key groups), and escalate only after that was applied and measured."""

from __future__ import annotations

import os
import time

import pytest
from tests.control.test_control_spark import _final_counts

import sluice
from sluice import sinks, sources
from sluice.control import ModelBatchSizing, OneStepScaling, read_decisions
from sluice.control.actions import partitions_of

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore::sluice.control.EscalationWarning")]

ROWS, CAP = 20_000, 2000


def count_slowly(key, rows, state):
    """A keyed stage with real work (20 us a row), so DS2 measures its useful time."""
    time.sleep(rows.num_rows * 20e-6)
    n = (state.value or 0) + rows.num_rows
    state.update(n)
    return [{"meter": key[0], "n": n}]


def test_the_keyed_stage_is_scaled_out_before_the_bound_is_escalated(spark, tmp_path):
    out = str(tmp_path)
    p = sluice.Pipeline("scaled", partitions=1, max_parallelism=16)
    p.source(
        sources.generator(fields={"meter": sources.Keys(40, prefix="m")}, seed=3, total_rows=ROWS, max_rows_per_batch=CAP),
        name="readings",
    ).key_by("meter").process(count_slowly, schema={"meter": "string", "n": "int"}, name="counts").sink(
        sinks.files(os.path.join(out, "counts")), name="counts_out"
    )
    # 50 ms: no micro-batch on Spark is that short, so batch sizing cannot hold the bound; a
    # low target utilization makes DS2 ask for every core the job has for the keyed stage
    p.constrain("50ms", over="2s", name="bound")
    scaling = OneStepScaling(target_utilization=0.01, window=2)
    result = p.run(os.path.join(out, "checkpoint"), spark=spark, policies=[ModelBatchSizing(scaling=scaling)])
    records = read_decisions(os.path.join(out, "checkpoint"))
    scaled = [r for r in records if r["type"] == "decision" and r["action"]["kind"] == "partitions"]
    escalated = [r for r in records if r["type"] == "escalation" and r["state"] == "started"]
    assert scaled and scaled[0]["policy"] == "batch_sizing" and partitions_of(scaled[0]["action"]["value"]) == 2
    assert "before escalating" in scaled[0]["action"]["reason"]
    # while the scale-out is applied and measured (three batches under the new Plan), the
    # policy does not escalate. (It may have escalated before, if DS2 had then measured no
    # useful time in the keyed stage: tiny batches whose tasks mostly wait for their input.)
    decided = scaled[0]["batch_id"]
    after = [m for m in result.metrics if m.batch_id > decided]
    assert after and all(m.plan_version == decided + 1 for m in after)
    assert not [r for r in escalated if decided <= r["batch_id"] < decided + 3]
    # exactly once across the re-partitioning: every meter counted once per row
    counts = _final_counts(out)
    assert sum(counts.values()) == ROWS and len(counts) == 40
