"""The live balancing and scaling policies driven through the simulator (small sizes here;
benchmarks/balancing_scale.py runs the papers' scale): the same classes, the same Controller."""

from __future__ import annotations

import numpy as np
import pytest

from sluice.control import FluxBalancing, KeyGroupBalancing, OneStepScaling, RingBalancing
from sluice.examples.balancing_scale import scenario_graph
from sluice.plan.physical import KeyedStagePlan, Plan
from sluice.sim.balancing_scale import albic_scale, nephele_scale, partitions_needed, run_scenario, summary
from sluice.sim.keyed_stage import KeyedStageEngine


def small_albic():
    return albic_scale(batches=10, period=5, nodes=8, key_groups=160)


def test_the_engine_reports_what_the_balancer_reads():
    engine = KeyedStageEngine(
        "op",
        lambda b: np.array([1000.0, 0.0, 0.0, 3000.0]),
        us_per_row=100.0,
        state_bytes=np.full(4, 1e6),
        interval_s=1.0,
        overhead_s=0.1,
        cores=2,
    )
    plan = Plan(version=0, max_parallelism=4, keyed={"op": KeyedStagePlan(2, (0, 0, 1, 1))})
    batch = engine.step(plan)
    assert engine.partition_busy_s == pytest.approx([0.1, 0.3])
    assert batch.duration_s == pytest.approx(0.4)
    load = batch.key_groups["op"]
    assert (load.rows[3], load.state_bytes[3]) == (3000, 1_000_000)
    assert batch.operators["op"].time_s == pytest.approx(0.4) and batch.operators["op"].counters["state_read_s"] == 0
    moved = Plan(version=1, max_parallelism=4, keyed={"op": KeyedStagePlan(2, (0, 1, 1, 0))})
    after = engine.step(moved)  # key groups 1 and 3 moved: their state is loaded where they arrive
    assert after.operators["op"].counters["state_read_bytes"] == 2e6
    assert engine.partition_busy_s == pytest.approx([0.1 + 0.3 + 0.02, 0.0 + 0.02])


@pytest.mark.parametrize("policy", [KeyGroupBalancing, FluxBalancing, RingBalancing])
def test_each_live_balancer_evens_the_partitions_in_the_simulator(policy):
    scenario = small_albic()
    fixed = summary(run_scenario(scenario, scenario_graph(scenario), None), scenario)
    balancer = policy(threshold=0.1, min_gain=0.2, window=1, max_migrations=40, time_limit=1.0)
    balanced = summary(run_scenario(scenario, scenario_graph(scenario), [balancer]), scenario)
    assert fixed["mean_imbalance"] > 0.1 and fixed["key_groups_moved"] == 0
    assert balanced["key_groups_moved"] > 0 and balanced["rebalances"] >= 1
    assert balanced["mean_imbalance"] < fixed["mean_imbalance"]
    assert balanced["mean_span_s"] < fixed["mean_span_s"]


def test_one_step_scaling_meets_a_rate_step_in_one_rescale():
    scenario = nephele_scale(batches=12, period=100, nodes=4, cores_per_node=4, key_groups=256, partitions=8, step_at=5)
    records = run_scenario(scenario, scenario_graph(scenario), [OneStepScaling(target_utilization=0.7, window=1)])
    after_step = [
        (r["batch"], r["partitions"])
        for r, prev in zip(records[1:], records)
        if r["partitions"] != prev["partitions"] and r["batch"] > scenario.step_at
    ]
    assert len(after_step) == 1  # DS2: one step
    need = partitions_needed(scenario, 0.7)
    assert abs(records[-1]["partitions"] - need) <= max(1, 0.25 * need)
