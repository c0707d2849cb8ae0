"""Balancing and rescaling live on Spark: Flux's greedy pairing and the consistent-hash ring
re-route a skewed keyed stage while it runs, and a scale-out followed by a rebalance in one
run keeps every key's count exactly once (state follows its key groups through both)."""

from __future__ import annotations

import os
import time
from collections import Counter

import pyarrow as pa
import pytest
from tests.control.test_control_spark import _final_counts

import sluice
from sluice import sinks, sources
from sluice.control import FluxBalancing, KeyGroupBalancing, OneStepScaling, RingBalancing, read_decisions
from sluice.control.actions import partitions_of

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore::sluice.control.EscalationWarning")]

ROWS, CAP, KEYS = 16_000, 1000, 40


def count_slowly(key, rows, state):
    """A keyed stage with real work (20 us a row), so a partition's time follows its rows."""
    time.sleep(rows.num_rows * 20e-6)
    n = (state.value or 0) + rows.num_rows
    state.update(n)
    return [{"meter": key[0], "n": n}]


def _spec():
    return sources.generator(
        fields={"meter": sources.Keys(KEYS, prefix="m", distribution="zipf", skew=1.3)},
        seed=5,
        total_rows=ROWS,
        max_rows_per_batch=CAP,
    )


def _run(spark, out: str, partitions: int, policies: list) -> tuple[list[dict], dict[str, int]]:
    p = sluice.Pipeline("balanced_live", partitions=partitions, max_parallelism=16)
    p.source(_spec(), name="readings").key_by("meter").process(
        count_slowly, schema={"meter": "string", "n": "int"}, name="counts"
    ).sink(sinks.files(os.path.join(out, "counts")), name="counts_out")
    p.run(os.path.join(out, "checkpoint"), spark=spark, policies=policies)
    decisions = [r for r in read_decisions(os.path.join(out, "checkpoint")) if r["type"] == "decision"]
    return decisions, _final_counts(out)


def _expected() -> dict[str, int]:
    table = pa.Table.from_batches(_spec().generate(0, ROWS, 0))
    return dict(Counter(table.column("meter").to_pylist()))


@pytest.mark.parametrize("policy", [FluxBalancing(window=2), RingBalancing(window=2)], ids=["flux", "ring"])
def test_flux_and_the_ring_rebalance_a_skewed_stage_live_and_exactly_once(spark, tmp_path, policy):
    decisions, counts = _run(spark, str(tmp_path), 2, [policy])
    routing = [r for r in decisions if r["action"]["kind"] == "routing"]
    assert routing and all(r["policy"] == policy.name for r in routing), decisions
    assert counts == _expected()


def test_a_scale_out_and_a_rebalance_in_one_run_stay_exactly_once(spark, tmp_path):
    # a low target utilization makes DS2 ask for every core (2 partitions on local[2]), its key
    # groups in ranges (so the skew leaves the balancing policy something to move); balancing
    # can act only once there are two partitions
    scaling = OneStepScaling(target_utilization=0.01, window=2)
    scaling.balance = False
    decisions, counts = _run(spark, str(tmp_path), 1, [scaling, KeyGroupBalancing(window=2)])
    scaled = [r for r in decisions if r["action"]["kind"] == "partitions"]
    routing = [r for r in decisions if r["action"]["kind"] == "routing"]
    assert scaled and partitions_of(scaled[0]["action"]["value"]) == 2, decisions
    assert routing and routing[0]["batch_id"] > scaled[0]["batch_id"], decisions
    assert counts == _expected()
