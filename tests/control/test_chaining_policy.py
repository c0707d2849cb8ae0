"""Dynamic chaining (Nephele 3.5.2): the cost model, and the policy against a simulated engine."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sluice
from sluice import sinks, sources
from sluice.control import Controller, DynamicChaining, Resources, build_policies
from sluice.plan.chaining import RunCosts, best_cut, chainable_runs, run_layout, with_layout
from sluice.plan.physical import Plan, initial_plan
from sluice.sim.chaining import ChainEngine
from sluice.sim.loop import run_controlled


def ident(batch):
    return batch


def costs(work_ms, tasks, cores, rows=10_000, pass_us=0.25, exchange_us=1.0):
    return RunCosts(
        work_s=tuple(w / 1000 for w in work_ms),
        rows=(float(rows),) * len(work_ms),
        tasks=tasks,
        cores=cores,
        pass_s_per_row=pass_us * 1e-6,
        exchange_s_per_row=exchange_us * 1e-6,
    )


# ---- the cost model --------------------------------------------------------------------------
def test_cheap_operators_stay_fused():
    assert best_cut(costs([1, 1, 1, 1], tasks=1, cores=2))[0] is None


def test_a_heavy_run_on_one_partition_is_rebalanced_over_the_cores():
    at, predicted = best_cut(costs([200, 200], tasks=1, cores=2))
    assert at == 0
    assert predicted < 0.6 * costs([200, 200], tasks=1, cores=2).time(None)


def test_the_exchange_goes_after_a_selective_cheap_operator():
    """A cheap filter that keeps 10 % of the rows, then a heavy operator: rebalancing after
    the filter moves a tenth of the rows through the exchange."""
    run = RunCosts(
        work_s=(0.002, 0.4), rows=(100_000.0, 10_000.0), tasks=1, cores=2, pass_s_per_row=0.25e-6, exchange_s_per_row=1e-6
    )
    assert best_cut(run)[0] == 1
    assert run.time(1) < run.time(0) < run.time(None)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 1000), min_size=1, max_size=6), st.integers(1, 8), st.integers(1, 8))
def test_when_the_input_keeps_every_core_busy_fusing_is_best(work, extra, cores):
    """Nephele's rule on Spark: with as many input partitions as cores, nothing runs idle, and
    a pass or an exchange only costs."""
    assert best_cut(costs(work, tasks=cores + extra - 1, cores=cores))[0] is None


def test_layouts_round_trip_through_a_plan():
    chains = (("a",), ("b", "c", "d"), ("e",))
    new_chains, rebalance = with_layout(chains, {"e": 3}, ("b", "c", "d"), 1, 2)
    assert new_chains == (("a",), ("b",), ("c", "d"), ("e",))
    assert rebalance == {"e": 3, "c": 2}
    assert run_layout(("b", "c", "d"), new_chains, rebalance) == 1
    fused, none = with_layout(new_chains, rebalance, ("b", "c", "d"), None, 2)
    assert fused == chains and none == {"e": 3}


def test_chain_false_and_fan_out_end_a_run():
    p = sluice.Pipeline("runs")
    s = p.source(sources.generator(fields={"k": sources.Keys(10)}, total_rows=10))
    a = s.map_batches(ident, name="a").map_batches(ident, name="b")
    c = a.map_batches(ident, name="c", chain=False).map_batches(ident, name="d").map_batches(ident, name="e")
    c.sink(sinks.memory("x"))
    c.map_batches(ident, name="f").sink(sinks.memory("y"))
    assert chainable_runs(p.graph) == [("a", "b"), ("c",), ("d", "e"), ("f",)]
    assert initial_plan(p.graph, 2).chains == (("a", "b"), ("c",), ("d", "e"), ("f",))


def test_a_plan_refuses_a_rebalance_before_no_chain():
    from sluice.errors import PlanError

    with pytest.raises(PlanError, match="head no chain"):
        Plan(version=0, max_parallelism=8, chains=(("a", "b"),), rebalance={"b": 2})
    plan = Plan(version=0, max_parallelism=8, chains=(("a",), ("b",)), rebalance={"b": 2})
    assert Plan.from_json(plan.to_json()) == plan


# ---- the policy against a simulated engine ----------------------------------------------------
def _graph(n=4, chain=True):
    p = sluice.Pipeline("sim")
    s = p.source(sources.generator(fields={"k": sources.Keys(10)}, total_rows=10))
    for i in range(n):
        s = s.map_batches(ident, name=f"op{i}")
    s.sink(sinks.memory("out"))
    return p.graph


def _drive(engine, graph, plan, policy, batches=40):
    controller = Controller(graph, [policy], resources=Resources(cores=engine.cores))
    trace, final = run_controlled(engine, controller, plan, batches)
    return trace, final, controller


def test_policy_fuses_cheap_unfused_operators():
    graph = _graph(4)
    run = tuple(f"op{i}" for i in range(4))
    engine = ChainEngine(run, (0.05,) * 4, rows=50_000, tasks=2, cores=2, pass_us=0.3, exchange_us=1.0)
    trace, plan, controller = _drive(engine, graph, initial_plan(graph, 2, fuse=False), DynamicChaining())
    assert plan.chains == (run,) and plan.rebalance == {}
    assert controller.decisions == 1  # decided once and stayed
    assert trace[-1].duration_s < trace[0].duration_s


def test_policy_rebalances_a_heavy_run_on_one_partition_and_stays():
    graph = _graph(2)
    run = ("op0", "op1")
    engine = ChainEngine(run, (20.0, 20.0), rows=20_000, tasks=1, cores=2, pass_us=0.3, exchange_us=1.0)
    trace, plan, controller = _drive(engine, graph, initial_plan(graph, 2), DynamicChaining())
    assert run_layout(run, plan.chains, plan.rebalance) == 0 and plan.rebalance == {"op0": 2}
    assert controller.decisions == 1
    assert trace[-1].duration_s < 0.6 * trace[0].duration_s


def test_policy_undoes_a_change_that_measured_worse_and_does_not_oscillate():
    """The policy believes exchanges are cheap; the engine's cost 40x more: the rebalance is
    tried once, measured slower, undone, and not tried again."""
    graph = _graph(2)
    run = ("op0", "op1")
    engine = ChainEngine(run, (3.0, 3.0), rows=20_000, tasks=1, cores=2, pass_us=0.3, exchange_us=40.0)
    policy = DynamicChaining(exchange_us_per_row=1.0, ban_batches=1000)
    trace, plan, controller = _drive(engine, graph, initial_plan(graph, 2), policy, batches=60)
    assert plan.rebalance == {} and plan.chains == (run,)
    assert controller.decisions == 2  # the try and its undoing, nothing after


def test_policy_adds_no_rebalance_for_a_few_milliseconds_of_work():
    """A run on one partition whose work is 2 ms a batch: a rebalance would halve it on paper,
    but an exchange is a stage of its own, so a saving under ``min_saving_s`` is not taken."""
    graph = _graph(2)
    run = ("op0", "op1")
    engine = ChainEngine(run, (1.0, 1.0), rows=200, tasks=1, cores=2, pass_us=0.3, exchange_us=1.0)
    _, plan, controller = _drive(engine, graph, initial_plan(graph, 2), DynamicChaining())
    assert plan.rebalance == {} and controller.decisions == 0
    _, plan, controller = _drive(engine, graph, initial_plan(graph, 2), DynamicChaining(min_saving_s=0.0))
    assert plan.rebalance == {"op0": 2}  # the same run with no floor is rebalanced


def test_policy_respects_chain_false():
    p = sluice.Pipeline("pinned")
    s = p.source(sources.generator(fields={"k": sources.Keys(10)}, total_rows=10))
    s.map_batches(ident, name="op0").map_batches(ident, name="op1", chain=False).sink(sinks.memory("o"))
    run = ("op0", "op1")
    engine = ChainEngine(run, (0.05, 0.05), rows=50_000, tasks=2, cores=2, pass_us=0.3, exchange_us=1.0)
    _, plan, controller = _drive(engine, p.graph, initial_plan(p.graph, 2, fuse=False), DynamicChaining())
    assert plan.chains == (("op0",), ("op1",)) and controller.decisions == 0


def test_policy_is_configurable_by_name():
    (policy,) = build_policies([{"chaining": {"min_gain": 0.3}}])
    assert isinstance(policy, DynamicChaining) and policy.min_gain == 0.3


# ---- live on Spark -------------------------------------------------------------------------------
def _heavy(batch):
    import numpy as np
    import pyarrow as pa

    x = batch.column("v").to_numpy()
    for _ in range(300):  # some 30 ms of work a batch: worth more cores
        x = np.sin(x) + 0.5
    return batch.set_column(batch.schema.get_field_index("w"), "w", pa.array(x))


def _live(spark, tmp_path, ops, fuse, rows=60_000, per_batch=6_000):
    from sluice.job import RunOptions
    from sluice.job.run import run_pipeline

    p = sluice.Pipeline("live_chaining")
    s = p.source(
        sources.generator(
            fields={"k": sources.Keys(50), "v": sources.Normal(0, 1), "w": sources.Normal(0, 1)},
            total_rows=rows,
            max_rows_per_batch=per_batch,
            seed=7,
        )
    )
    for i, fn in enumerate(ops):
        s = s.map_batches(fn, name=f"op{i}")
    out = []
    s.sink(sinks.callback(lambda batch_id, table: out.append(table)))
    checkpoint = str(tmp_path / "ckpt")
    # worse_by: the machine is shared; the undo rule is tested on the simulated engine
    controller = Controller(
        p.graph, [DynamicChaining(min_batches=2, worse_by=100.0)], checkpoint=checkpoint, resources=Resources(cores=2)
    )
    run_pipeline(p, checkpoint, RunOptions(spark=spark, fuse=fuse, controller=controller))
    import pyarrow as pa

    table = pa.concat_tables(out)
    decisions = [json.loads(line) for line in open(f"{checkpoint}/decisions.jsonl")] if controller.decisions else []
    return table, decisions, checkpoint


@pytest.mark.spark
@pytest.mark.slow
def test_live_heavy_operators_on_one_partition_get_a_rebalance(spark, tmp_path):
    table, decisions, checkpoint = _live(spark, tmp_path, [_heavy, _heavy], fuse=True)
    assert table.num_rows == 60_000  # every row once, through the change of plan
    chosen = [d for d in decisions if d.get("type") == "decision"]
    assert chosen and chosen[0]["policy"] == "chaining"
    assert chosen[0]["action"]["value"]["rebalance"] == {"op0": 2}
    from sluice.runtime.planlog import PlanLog

    assert PlanLog(checkpoint).latest().rebalance == {"op0": 2}


@pytest.mark.spark
@pytest.mark.slow
def test_live_cheap_unfused_operators_get_fused(spark, tmp_path):
    table, decisions, checkpoint = _live(spark, tmp_path, [ident] * 4, fuse=False, rows=120_000, per_batch=12_000)
    assert table.num_rows == 120_000
    chosen = [d for d in decisions if d.get("type") == "decision"]
    assert chosen and chosen[0]["action"]["value"]["chains"] == [["op0", "op1", "op2", "op3"]]
