"""Collocation: consecutive keyed operators on the same key share one stage, with no exchange
between them; the output equals the one with an exchange before each, also across a crash."""

from __future__ import annotations

import numpy as np
import pytest
from tests import crash_harness as harness
from tests.crash_harness import batch_rows, done_batches, kill_when, started_batches
from tests.pipelines import collocated_keys

import sluice
from sluice import agg, sinks, sources
from sluice.control.keygroups import key_group_stats
from sluice.errors import PlanError
from sluice.plan.collocation import collocation_groups
from sluice.plan.physical import KeyedStagePlan, Plan, initial_plan, range_routing
from sluice.runtime.batch.metrics import BatchMetrics


def _graph(second_keys=("k",), first="aggregate", fan_out=False, cast=False):
    p = sluice.Pipeline("collocation", partitions=2, max_parallelism=16)
    s = p.source(
        sources.generator(fields={"k": sources.Keys(50), "j": sources.Keys(5), "v": sources.Sequence()}, total_rows=10),
        name="events",
    )
    keyed = s.key_by("k")
    if first == "aggregate":
        up = keyed.aggregate(n=agg.count(), j=agg.max("j"), name="up")
    else:
        up = keyed.process(
            lambda key, rows, state: [{"k": key[0], "j": 1, "n": rows.num_rows}],
            schema={"k": "int", "j": "int", "n": "int"},
            name="up",
        )
    if cast:
        up = up.select("CAST(k AS INT) AS k", "j", "n")
    down = up.key_by(*second_keys).aggregate(total=agg.sum("n"), name="down")
    down.sink(sinks.callback(lambda batch_id, table: None), name="out")
    if fan_out:
        up.sink(sinks.callback(lambda batch_id, table: None), name="side")
    p.graph.validate()
    return p.graph


def test_same_key_consecutive_keyed_operators_share_a_stage():
    assert collocation_groups(_graph()) == (("up", "down"),)
    plan = initial_plan(_graph(), 2)
    assert plan.collocated == (("up", "down"),)
    assert plan.exchanges_before("up") and not plan.exchanges_before("down")
    assert initial_plan(_graph(), 2, collocate=False).collocated == ()


@pytest.mark.parametrize(
    "graph",
    [
        {"second_keys": ("j",)},  # another key: the rows must be exchanged
        {"second_keys": ("k", "j")},  # more columns: other key groups
        {"first": "process"},  # a process function may emit any key
        {"fan_out": True},  # someone else reads the first operator's output
        {"cast": True},  # another type hashes to other key groups
    ],
)
def test_other_shapes_keep_their_exchange(graph):
    assert collocation_groups(_graph(**graph)) == ()


def test_collocated_operators_move_together_and_survive_the_plan_log():
    plan = initial_plan(_graph(), 2)
    moved = plan.with_routing(3, "down", [1] * 16)
    assert moved.keyed["up"] == moved.keyed["down"] == KeyedStagePlan(2, (1,) * 16)
    assert Plan.from_json(moved.to_json()) == moved
    with pytest.raises(PlanError, match="share partitions and routing"):
        Plan(
            version=0,
            max_parallelism=4,
            keyed={"a": KeyedStagePlan(2, (0, 0, 1, 1)), "b": KeyedStagePlan(1, (0,) * 4)},
            collocated=(("a", "b"),),
        )
    assert plan.keyed_stages() == [("up", "down")]


def test_a_shared_stage_is_balanced_on_the_loads_of_all_its_operators():
    def batch(i):
        groups = {
            "up": {"0": {"rows": 100, "state_bytes": 10}, "1": {"rows": 100, "state_bytes": 10}},
            "down": {"0": {"rows": 100, "state_bytes": 5}},
        }
        return BatchMetrics(
            batch_id=i,
            plan_version=0,
            started_at=i,
            duration_s=1.0,
            rows_in=200,
            operators={"up": {"time_s": 0.2}, "down": {"time_s": 0.3}},
            key_groups=groups,
        )

    stats = key_group_stats([batch(0), batch(1)], ("up", "down"), 4)
    # up's 0.2 s split evenly over key groups 0 and 1, down's 0.3 s all on key group 0
    assert stats.busy_s.tolist() == pytest.approx([2 * 0.4, 2 * 0.1, 0, 0])
    assert stats.state_bytes.tolist() == [15, 10, 0, 0]


# ---- live on Spark -------------------------------------------------------------------------------
def final_sums(out: str) -> dict:
    latest = {}
    for _, rows in sorted(batch_rows(out, "summed").items()):
        for row in rows:
            r = dict(row)
            latest[r["k"]] = (r["n"], r["total"])
    return latest


def exchanges(spark, pipeline, plan: Plan, tmp_path) -> int:
    """Exchanges in Spark's physical plan of one batch of ``pipeline`` under ``plan``."""
    import datetime

    from sluice.runtime.batch.executor import BatchExecutor, SourceInfo
    from sluice.runtime.kernels.keyed import BatchContext
    from sluice.runtime.planlog import PlanLog
    from sluice.runtime.schemas import INGEST

    graph = pipeline.graph
    graph.validate()
    source = graph["events"]
    executor = BatchExecutor(spark, graph, str(tmp_path), PlanLog(str(tmp_path)), [SourceInfo(source, 0, None, 0)])
    now = datetime.datetime.now(datetime.UTC)
    df = spark.createDataFrame([(i % 7, i, now) for i in range(20)], f"k long, seq long, {INGEST} timestamp")
    frames, *_ = executor._build(df, 0, plan, BatchContext(0, 0, None, 0))
    return str(frames["summed"]._jdf.queryExecution().executedPlan().toString()).count("Exchange")


@pytest.mark.spark
@pytest.mark.slow
def test_collocated_run_has_one_exchange_fewer_and_the_same_output(spark, tmp_path):
    from sluice.job import RunOptions
    from sluice.job.run import run_pipeline
    from sluice.runtime.planlog import PlanLog

    pipeline = collocated_keys.build(str(tmp_path / "probe"), 100, 100)
    pipeline.graph.validate()
    with_exchange = exchanges(spark, pipeline, initial_plan(pipeline.graph, 2, collocate=False), tmp_path / "a")
    collocated = exchanges(spark, pipeline, initial_plan(pipeline.graph, 2), tmp_path / "b")
    assert collocated == with_exchange - 1

    outputs = {}
    for collocate in (False, True):
        out, checkpoint = str(tmp_path / f"out_{collocate}"), str(tmp_path / f"ck_{collocate}")
        run_pipeline(collocated_keys.build(out, 8000, 4000), checkpoint, RunOptions(spark=spark, collocate=collocate))
        assert bool(PlanLog(checkpoint).latest().collocated) == collocate
        outputs[collocate] = final_sums(out)
    assert outputs[True] == outputs[False]
    assert sum(n for n, _ in outputs[True].values()) > 0


@pytest.mark.spark
@pytest.mark.slow
def test_a_crash_inside_a_shared_stage_restarts_to_the_same_output(spark, tmp_path):
    """SIGKILL while the second batch runs (after a keyed operator wrote its state, before the
    batch is done); the restart's output equals a run with an exchange before each operator."""
    from sluice.job import RunOptions
    from sluice.job.run import run_pipeline

    rows, per_batch = 12000, 4000
    reference_out = str(tmp_path / "reference_out")
    run_pipeline(
        collocated_keys.build(reference_out, rows, per_batch),
        str(tmp_path / "reference"),
        RunOptions(spark=spark, collocate=False),
    )
    expected = final_sums(reference_out)

    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "collocated")
    env = {"SLUICE_TEST_OUT": out, "SLUICE_TEST_ROWS": str(rows), "SLUICE_TEST_PER_BATCH": str(per_batch)}

    def mid_second_batch() -> bool:
        return 1 in started_batches(checkpoint) and 1 not in done_batches(checkpoint) and harness.state_written(checkpoint, 1)

    proc = harness.launch(collocated_keys.__file__, checkpoint, env)
    kill_when(proc, mid_second_batch)
    assert 1 not in done_batches(checkpoint)
    proc = harness.launch(collocated_keys.__file__, checkpoint, env)
    assert proc.wait(timeout=600) == 0
    assert final_sums(out) == expected
    assert np.sum([n for n, _ in expected.values()]) > 0


def test_range_routing_is_what_both_start_with():
    plan = initial_plan(_graph(), 2)
    assert list(plan.keyed["up"].routing) == range_routing(16, 2)
