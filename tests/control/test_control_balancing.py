"""Key-group balancing live: statistics -> BalancingProblem -> MILP -> routing of the next Plan."""

from __future__ import annotations

import numpy as np
import pytest

import sluice
from sluice import agg, sinks, sources
from sluice.control import Controller, KeyGroupBalancing, Resources, build_policies
from sluice.control.actuators import plan_change
from sluice.control.keygroups import DEFAULT_LOAD_S_PER_BYTE, balancing_problem, key_group_stats
from sluice.plan.balancing import load_distance, node_loads
from sluice.plan.physical import KeyedStagePlan, Plan, range_routing
from sluice.runtime.batch.metrics import BatchMetrics

K = 8


def batch(batch_id, rows_by_kg, *, time_s=1.0, duration_s=2.0, version=0, state=None, read_s=0.0, read_bytes=0.0):
    groups = {str(kg): {"rows": n, "state_bytes": (state or {}).get(kg, 100)} for kg, n in rows_by_kg.items()}
    return BatchMetrics(
        batch_id=batch_id,
        plan_version=version,
        started_at=float(batch_id),
        duration_s=duration_s,
        rows_in=sum(rows_by_kg.values()),
        operators={"agg": {"time_s": time_s, "input_wait_s": 0.0, "state_read_s": read_s, "state_read_bytes": read_bytes}},
        key_groups={"agg": groups},
    )


def plan_with(routing, partitions=2):
    return Plan(version=0, max_parallelism=K, keyed={"agg": KeyedStagePlan(partitions, tuple(routing))})


HOT = {0: 600, 1: 300, 2: 50, 3: 50, 4: 50, 5: 50, 6: 50, 7: 50}  # key groups 0-3 on partition 0


def test_statistics_apportion_time_by_rows_and_measure_state_loads():
    batches = [batch(i, HOT, time_s=1.2, duration_s=2.0, read_s=0.5, read_bytes=10e6) for i in range(3)]
    stats = key_group_stats(batches, "agg", K)
    assert stats.rows[0] == 1800 and stats.rows.sum() == 3 * 1200
    # 1.2 s of work a 2 s batch = 60 % of a core, split by rows: key group 0 has half the rows
    assert stats.load[0] == pytest.approx(30.0) and stats.load.sum() == pytest.approx(60.0)
    assert stats.load_s_per_byte == pytest.approx(1.5 / 30e6)
    assert key_group_stats([batch(0, HOT)], "agg", K).load_s_per_byte == DEFAULT_LOAD_S_PER_BYTE  # too small to tell


def test_problem_round_trip_moves_hot_key_groups_to_the_idle_partition():
    stats = key_group_stats([batch(i, HOT) for i in range(4)], "agg", K)
    stage = KeyedStagePlan(2, tuple(range_routing(K, 2)))
    problem = balancing_problem(stats, stage)
    assert node_loads(problem).tolist() == pytest.approx([41.67, 8.33], abs=0.01)
    (action,) = KeyGroupBalancing(window=4).propose(_view([batch(i, HOT) for i in range(4)], plan_with(stage.routing)))
    assert action.kind == "routing" and action.target == "agg"
    new_plan = plan_change(plan_with(stage.routing), action, version=5)
    assert new_plan.version == 5 and new_plan.keyed["agg"].partitions == 2
    routing = np.array(new_plan.keyed["agg"].routing)
    assert routing.tolist() == action.value
    assert load_distance(problem, routing) < 0.5 * load_distance(problem)
    assert action.expected["load_distance"] == pytest.approx(load_distance(problem, routing), abs=0.01)


def test_a_balanced_stage_is_left_alone():
    even = dict.fromkeys(range(K), 100)
    assert KeyGroupBalancing(window=2).propose(_view([batch(i, even) for i in range(2)], plan_with(range_routing(K, 2)))) == []


def test_it_waits_for_a_window_measured_under_the_routing_in_force():
    batches = [batch(i, HOT, version=0) for i in range(4)]
    plan = Plan(version=3, max_parallelism=K, keyed={"agg": KeyedStagePlan(2, tuple(range_routing(K, 2)))})
    assert KeyGroupBalancing(window=2).propose(_view(batches, plan)) == []


def test_the_migration_budget_bounds_the_moves():
    rows = {kg: (1000 if kg < 4 else 10) for kg in range(K)}
    (action,) = KeyGroupBalancing(window=2, max_migrations=1).propose(
        _view([batch(i, rows) for i in range(2)], plan_with(range_routing(K, 2)))
    )
    assert sum(a != b for a, b in zip(action.value, range_routing(K, 2))) == 1


def test_configurable_by_name():
    (policy,) = build_policies([{"balancing": {"threshold": 0.5}}])
    assert isinstance(policy, KeyGroupBalancing) and policy.threshold == 0.5


def _view(batches, plan):
    from sluice.control.view import ControlView

    return ControlView(
        batch_id=batches[-1].batch_id,
        graph=None,
        plan=plan,
        constraints=(),
        status={},
        history=tuple(batches),
        resources=Resources(cores=2),
    )


# ---- live on Spark -------------------------------------------------------------------------------
def _skewed(total_rows):
    p = sluice.Pipeline("balance_live")
    s = p.source(
        sources.generator(
            fields={"k": sources.Keys(2000, distribution="zipf"), "v": sources.Normal(1, 1)},
            total_rows=total_rows,
            max_rows_per_batch=total_rows // 8,
            seed=11,
        )
    )
    out = s.key_by("k").aggregate(n=agg.count(), total=agg.sum("v"))
    latest = {}

    def keep(batch_id, table):
        for row in table.to_pylist():
            latest[row["k"]] = (row["n"], round(row["total"], 6))

    out.sink(sinks.callback(keep))
    return p, latest


@pytest.mark.spark
@pytest.mark.slow
def test_live_balancing_moves_hot_key_groups_and_the_output_is_unchanged(spark, tmp_path):
    from sluice.job import RunOptions
    from sluice.job.run import run_pipeline
    from sluice.runtime.planlog import PlanLog

    reference, expected = _skewed(80_000)
    run_pipeline(reference, str(tmp_path / "fixed"), RunOptions(spark=spark))

    p, latest = _skewed(80_000)
    checkpoint = str(tmp_path / "balanced")
    controller = Controller(
        p.graph, [KeyGroupBalancing(threshold=0.05, min_gain=0.2, window=2)], checkpoint=checkpoint, resources=Resources(cores=2)
    )
    run_pipeline(p, checkpoint, RunOptions(spark=spark, controller=controller))
    assert controller.decisions >= 1
    (op_id,) = PlanLog(checkpoint).latest().keyed
    assert PlanLog(checkpoint).latest().keyed[op_id].routing != PlanLog(checkpoint).plan_for(0).keyed[op_id].routing
    assert latest == expected  # every key's running count and sum, as if nothing had moved
    assert sum(n for n, _ in latest.values()) == 80_000


class _Rescale:
    """A policy that rescales the keyed stage at set batches (2 -> 4 -> 1 partitions)."""

    name = "rescale_script"

    def __init__(self, steps):
        self.steps = dict(steps)

    def propose(self, view):
        from sluice.control.actions import Partitions

        n = self.steps.get(view.batch_id)
        if n is None:
            return []
        (op_id,) = view.plan.keyed
        return [Partitions(target=op_id, count=n, reason=f"scripted rescale to {n}")]

    def restore(self, history):
        pass

    def describe(self):
        return {"policy": self.name}


@pytest.mark.spark
@pytest.mark.slow
def test_live_rescale_2_to_4_to_1_partitions_keeps_state_exactly_once(spark, tmp_path):
    from sluice.job import RunOptions
    from sluice.job.run import run_pipeline
    from sluice.runtime.planlog import PlanLog

    reference, expected = _skewed(64_000)
    run_pipeline(reference, str(tmp_path / "fixed"), RunOptions(spark=spark))

    p, latest = _skewed(64_000)
    checkpoint = str(tmp_path / "rescaled")
    # the arbiter waits for the windows to flush between structural changes: space them out
    controller = Controller(p.graph, [_Rescale({1: 4, 4: 1})], checkpoint=checkpoint, resources=Resources(cores=2))
    run_pipeline(p, checkpoint, RunOptions(spark=spark, controller=controller))
    log = PlanLog(checkpoint)
    (op_id,) = log.latest().keyed
    assert [log.plan_for(b).keyed[op_id].partitions for b in (0, 2, 5)] == [2, 4, 1]
    assert latest == expected
    assert sum(n for n, _ in latest.values()) == 64_000
