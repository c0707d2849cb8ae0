"""Collocation across keys: traffic between the key groups of consecutive keyed operators
keyed differently, measured live, ALBIC's problem across both stages, and the policy that
routes communicating key groups to the same partition index."""

from __future__ import annotations

import numpy as np
import pytest

import sluice
from sluice import agg, sinks, sources
from sluice.control import CollocationBalancing, Controller, Resources, build_policies
from sluice.control.actuators import plan_change
from sluice.control.keygroups import collocation_problem, key_group_stats, key_group_traffic, routings_of
from sluice.control.view import ControlView
from sluice.plan.balancing import BalancePlan, collocation_factor
from sluice.plan.collocation import traffic_source
from sluice.plan.physical import KeyedStagePlan, Plan, range_routing
from sluice.runtime.batch.metrics import BatchMetrics

K = 8


# ---- the graph: which pairs of keyed operators are measured ----------------------------------------
def _meters_then_groups(keys=40, total_rows=2000, per_batch=500):
    p = sluice.Pipeline("traffic", partitions=2)
    readings = p.source(
        sources.generator(
            fields={"k": sources.Keys(keys), "v": sources.Normal(1, 1)},
            total_rows=total_rows,
            max_rows_per_batch=per_batch,
            seed=3,
        ),
        name="readings",
    )
    per_key = readings.key_by("k").aggregate(n=agg.count(), total=agg.sum("v"), name="per_key")
    per_group = per_key.with_columns(g="k div 10").key_by("g").aggregate(updates=agg.count(), top=agg.max("n"), name="per_group")
    latest: dict = {}

    def keep(batch_id, table):
        for row in table.to_pylist():
            latest[row["g"]] = (row["updates"], row["top"])

    per_group.sink(sinks.callback(keep), name="out")
    return p, latest


@pytest.mark.spark
def test_traffic_source_follows_forward_operators_to_the_keyed_operator_before(spark):
    from sluice.runtime.schemas import SparkTyper

    p, _ = _meters_then_groups()
    g = p.graph
    g.validate(SparkTyper(spark))  # the graph's schemas, as a run types them
    down = next(op for op in g.operators if op.name == "per_group")
    up = next(op for op in g.operators if op.name == "per_key")
    assert traffic_source(g, down.id) == (up.id, ["k"])
    assert traffic_source(g, up.id) is None  # a source before it, no keyed operator


@pytest.mark.spark
def test_no_traffic_source_when_the_upstream_key_is_gone(spark):
    from sluice.runtime.schemas import SparkTyper

    p = sluice.Pipeline("gone")
    s = p.source(sources.generator(fields={"k": sources.Keys(10), "v": sources.Normal(1, 1)}, total_rows=10))
    up = s.key_by("k").aggregate(n=agg.count())
    down = up.select("k div 2 AS g", "n").key_by("g").aggregate(m=agg.max("n"))
    down.sink(sinks.memory("x"))
    p.graph.validate(SparkTyper(spark))
    assert traffic_source(p.graph, down.op.id) is None


# ---- statistics -> problem -> plan, on constructed metrics -----------------------------------------
# upstream key group a sends to downstream key group a // 2 (two upstream key groups per
# downstream one); range routing of both stages keeps only half of that in its partition index
def _batch(batch_id, version=0, rows=100, duration_s=1.0, up_routing=None, down_routing=None):
    up_routing = up_routing or range_routing(K, 2)
    down_routing = down_routing or range_routing(K, 2)
    pairs = [[a, a // 2, rows] for a in range(K)]
    local = sum(n for a, b, n in pairs if up_routing[a] == down_routing[b])
    groups_up = {str(a): {"rows": rows, "state_bytes": 100} for a in range(K)}
    groups_down = {str(b): {"rows": 2 * rows if b < K // 2 else 0, "state_bytes": 100} for b in range(K)}
    return BatchMetrics(
        batch_id=batch_id,
        plan_version=version,
        started_at=float(batch_id),
        duration_s=duration_s,
        rows_in=K * rows,
        operators={"up": {"time_s": 0.4}, "down": {"time_s": 0.4}},
        key_groups={"up": groups_up, "down": groups_down},
        traffic={"down": {"upstream": "up", "rows": K * rows, "local_rows": local, "pairs": pairs, "dropped_rows": 0}},
    )


def _plan(up_routing=None, down_routing=None):
    return Plan(
        version=0,
        max_parallelism=K,
        keyed={
            "up": KeyedStagePlan(2, tuple(up_routing or range_routing(K, 2))),
            "down": KeyedStagePlan(2, tuple(down_routing or range_routing(K, 2))),
        },
    )


def _view(batches, plan):
    return ControlView(
        batch_id=batches[-1].batch_id,
        graph=None,
        plan=plan,
        constraints=(),
        status={},
        history=tuple(batches),
        resources=Resources(cores=2),
    )


def test_traffic_statistics_sum_the_window_into_rates():
    t = key_group_traffic([_batch(0), _batch(1)], "down", K)
    assert t.upstream == "up" and t.rows == 2 * K * 100
    assert t.collocation == pytest.approx(0.5)  # range routings: a // 2 lands in a's half for half the a's
    assert sorted(zip(t.traffic.src.tolist(), t.traffic.dst.tolist())) == [(a, a // 2) for a in range(K)]
    assert t.traffic.rate == pytest.approx(np.full(K, 100.0))  # 200 rows over 2 s
    assert key_group_traffic([_batch(0)], "up", K) is None


def test_problem_across_both_stages_and_albic_collocates_every_pair():
    batches = [_batch(0), _batch(1)]
    t = key_group_traffic(batches, "down", K)
    plan = _plan()
    up, down = key_group_stats(batches, "up", K), key_group_stats(batches, "down", K)
    problem = collocation_problem(up, down, t, plan.keyed["up"], plan.keyed["down"])
    assert problem.num_key_groups == 2 * K and problem.operator.tolist() == [0] * K + [1] * K
    assert collocation_factor(problem) == pytest.approx(t.collocation)
    (action,) = CollocationBalancing(window=2).propose(_view(batches, plan))
    assert action.kind == "routing" and set(action.value) == {"up", "down"}
    new = plan_change(plan, action, version=2)
    up_r, down_r = np.array(new.keyed["up"].routing), np.array(new.keyed["down"].routing)
    assert (up_r[np.arange(K)] == down_r[np.arange(K) // 2]).all()  # every pair in one partition index
    assert action.expected["collocation"] == pytest.approx(1.0)
    # and each stage stays balanced on its own: 4 upstream key groups a partition, 2 downstream ones
    assert np.bincount(up_r, minlength=2).tolist() == [4, 4]
    assert np.bincount(down_r[: K // 2], minlength=2).tolist() == [2, 2]
    assert routings_of(BalancePlan(np.concatenate([up_r, down_r]), (), 0.0), K) == (up_r.tolist(), down_r.tolist())


def test_collocated_stages_are_left_alone_and_the_budget_bounds_the_moves():
    plan = _plan()
    batches = [_batch(0), _batch(1)]
    (action,) = CollocationBalancing(window=2).propose(_view(batches, plan))
    new = plan_change(plan, action, version=2)
    done = [
        _batch(i, version=2, up_routing=list(new.keyed["up"].routing), down_routing=list(new.keyed["down"].routing))
        for i in (2, 3)
    ]
    assert key_group_traffic(done, "down", K).collocation == 1.0
    assert CollocationBalancing(window=2).propose(_view(done, new)) == []
    # two moves collocate everything (downstream key groups 2 and 3 to partition 1): allow one
    (few,) = CollocationBalancing(window=2, max_migrations=1, pin_share=1.0, min_gain=0.01, tolerance=1.0).propose(
        _view(batches, plan)
    )
    moved = sum(a != b for a, b in zip(few.value["up"], plan.keyed["up"].routing)) + sum(
        a != b for a, b in zip(few.value["down"], plan.keyed["down"].routing)
    )
    assert moved == 1 and few.expected["migrations"] == 1
    assert few.expected["collocation"] == pytest.approx(0.75)


def test_it_waits_for_the_routing_in_force_to_be_measured():
    assert (
        CollocationBalancing(window=2).propose(
            _view([_batch(0), _batch(1)], Plan(version=1, max_parallelism=K, keyed=_plan().keyed))
        )
        == []
    )


def test_configurable_by_name():
    (policy,) = build_policies([{"collocation": {"target": 0.8}}])
    assert isinstance(policy, CollocationBalancing) and policy.target == 0.8


def test_sparse_counts_add_code_by_code():
    from sluice.runtime.batch.task_metrics import TRAFFIC, MetricKey, MetricsParam, SparseCounts

    a = SparseCounts.of(np.array([3, 1, 3, 7]), bins=8)
    b = SparseCounts.of(np.array([7, 7, 2]))
    acc = MetricsParam().addInPlace({}, {MetricKey("x", "up", TRAFFIC): a})
    acc = MetricsParam().addInPlace(acc, {MetricKey("x", "up", TRAFFIC): b})
    total = acc[MetricKey("x", "up", TRAFFIC)]
    assert dict(zip(total.codes.tolist(), total.counts.tolist())) == {1: 1, 2: 1, 3: 2, 7: 3}


# ---- live on Spark ---------------------------------------------------------------------------------
@pytest.mark.spark
@pytest.mark.slow  # two runs of four batches: about 20 s on a loaded 2-core machine
def test_live_collocation_raises_the_factor_and_the_output_is_unchanged(spark, tmp_path):
    from sluice.control.decisions import read_decisions
    from sluice.job import RunOptions
    from sluice.job.run import run_pipeline
    from sluice.runtime.batch import metrics as metrics_log
    from sluice.runtime.planlog import PlanLog

    reference, expected = _meters_then_groups()
    run_pipeline(reference, str(tmp_path / "fixed"), RunOptions(spark=spark))

    p, latest = _meters_then_groups()
    checkpoint = str(tmp_path / "collocated")
    controller = Controller(p.graph, [CollocationBalancing(window=1)], checkpoint=checkpoint, resources=Resources(cores=2))
    run_pipeline(p, checkpoint, RunOptions(spark=spark, controller=controller))
    down = next(op.id for op in p.graph.operators if op.name == "per_group")
    measured = [m.traffic[down] for m in metrics_log.read(checkpoint) if down in m.traffic]
    factors = [t["local_rows"] / t["rows"] for t in measured]
    assert all(t["rows"] == 40 for t in measured)  # every key's updated aggregate, each batch
    print("collocation factor per batch", factors)
    assert factors[0] < 0.8 and factors[-1] >= 0.9, factors
    assert controller.decisions >= 1
    decisions = [d for d in read_decisions(checkpoint) if d.get("type") == "decision"]
    assert decisions[0]["action"]["kind"] == "routing"
    log = PlanLog(checkpoint)
    assert log.latest().keyed[down].routing != log.plan_for(0).keyed[down].routing
    assert latest == expected  # every group's figures, as if nothing had moved


def test_a_batch_record_counts_local_rows_under_its_plan_and_keeps_the_heaviest_pairs():
    from sluice.runtime.batch.task_metrics import TRAFFIC, MetricKey, SparseCounts, collect
    from sluice.runtime.batch.traffic import MAX_PAIRS_PER_K, traffic_metrics

    plan = _plan(down_routing=[1, 1, 0, 0, 0, 0, 0, 0])
    # (up 0 -> down 0): up 0 on partition 0, down 0 on 1: remote; (up 5 -> down 2): 1 and 0: remote;
    # (up 1 -> down 4): 0 and 0: local; plus many light pairs of up 7 -> every down, 1 row each
    codes = [0 * K + 0] * 50 + [5 * K + 2] * 30 + [1 * K + 4] * 20 + [7 * K + b for b in range(K)]
    flat = {MetricKey("down", "up", TRAFFIC): SparseCounts.of(np.array(codes), K * K), MetricKey("down", "rows_in"): 1}
    figures = collect(flat)
    record = traffic_metrics(figures.traffic, plan)["down"]
    assert figures.operators["down"].rows_in == 1 and "down" not in figures.operators["down"].counters  # apart
    assert record["upstream"] == "up" and record["rows"] == 100 + K
    local_light = sum(1 for b in range(K) if plan.keyed["up"].routing[7] == plan.keyed["down"].routing[b])
    assert record["local_rows"] == 20 + local_light
    assert record["pairs"][:3] == [[0, 0, 50], [5, 2, 30], [1, 4, 20]]
    assert len(record["pairs"]) == min(3 + K, MAX_PAIRS_PER_K * K) and record["dropped_rows"] == 0


def test_the_controller_logs_the_measured_collocation_beside_the_expected_one(tmp_path):
    from sluice.control.decisions import read_decisions

    p, _ = _meters_then_groups()
    plan = _plan()
    controller = Controller(p.graph, [CollocationBalancing(window=1)], checkpoint=str(tmp_path), resources=Resources(cores=2))
    new = controller(_batch(0), plan)
    assert new is not None and new.version == 1
    after = _batch(1, version=1, up_routing=list(new.keyed["up"].routing), down_routing=list(new.keyed["down"].routing))
    assert controller(after, new) is None
    (decision,) = [d for d in read_decisions(str(tmp_path)) if d["type"] == "decision"]
    (measured,) = [d for d in read_decisions(str(tmp_path)) if d["type"] == "measured"]
    assert decision["action"]["expected"]["collocation"] == pytest.approx(1.0)
    assert measured["decision"] == decision["id"] and measured["measured"]["collocation"] == {"down": 1.0}
