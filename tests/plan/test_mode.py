"""The execution mode follows the latency goal (``plan.mode``): pure Python, no Spark."""

import pyarrow as pa
import pytest

import sluice
from sluice import agg, sinks, sources
from sluice.errors import ConfigError
from sluice.plan.mode import MICRO_BATCH, REAL_TIME, choose_mode, microbatch_floor_s

SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.string()), ("v", pa.float64()), ("ts", pa.int64())])


def kafka_pipeline(shape="keyed", goal="200ms", sink=None):
    p = sluice.Pipeline(f"mode_{shape}")
    s = p.source(sources.kafka("in", SCHEMA))
    if shape == "keyed":
        out = s.filter("v >= 0").key_by("k").aggregate(n=agg.count(), ts=agg.max("ts"), avg=agg.mean("v"))
    elif shape == "stateless":
        out = s.filter("v >= 0").select("id", "k", "v * 2 AS v2")
    elif shape == "python":
        out = s.map_batches(lambda b: b).key_by("k").aggregate(n=agg.count())
    elif shape == "distinct":
        out = s.key_by("k").aggregate(d=agg.count_distinct("id"))
    elif shape == "dedup":
        out = s.key_by("k").deduplicate(within="10m")
    out.sink(sink or sinks.kafka("out", key=("k",)))
    if goal is not None:
        p.goals(latency=goal)
    return p


@pytest.mark.parametrize("shape", ["keyed", "stateless"])
def test_a_goal_below_the_floor_runs_a_fitting_pipeline_in_real_time_mode(shape):
    decision = choose_mode(kafka_pipeline(shape).graph, floor_s=0.6)
    assert decision.mode == REAL_TIME
    assert "below the micro-batch floor 600 ms" in decision.reasons[0]
    assert "at least once" in decision.guarantee and "state exactly once" in decision.guarantee
    assert decision.real_time_batch == "5 seconds"
    assert any("spark-sql-kafka" in p for p in decision.packages)
    record = decision.record()
    assert record["type"] == "mode" and record["mode"] == REAL_TIME and record["goal_s"] == 0.2


def test_a_goal_micro_batches_reach_stays_in_micro_batches_exactly_once():
    decision = choose_mode(kafka_pipeline("keyed", goal="2s").graph, floor_s=0.6)
    assert decision.mode == MICRO_BATCH
    assert "within reach of micro-batches" in decision.reasons[0]
    assert decision.guarantee.startswith("exactly once")
    assert decision.micro_batch is not None and decision.micro_batch.trigger_interval_s == 0.0


def test_no_goal_is_micro_batches():
    decision = choose_mode(kafka_pipeline("keyed", goal=None).graph, floor_s=0.6)
    assert decision.mode == MICRO_BATCH and "no latency goal" in decision.reasons[0]


@pytest.mark.parametrize(
    "shape, sink, why",
    [
        ("python", None, "is a Python operator"),
        ("distinct", None, "count_distinct is not one of Spark's aggregates"),
        ("dedup", None, "deduplicate"),
        ("keyed", sinks.files("/tmp/never-written"), "is FileSink: real-time mode writes to Kafka"),
    ],
)
def test_a_pipeline_that_does_not_fit_gets_the_reason_and_the_best_micro_batches(shape, sink, why):
    decision = choose_mode(kafka_pipeline(shape, sink=sink).graph, floor_s=0.6)
    assert decision.mode == MICRO_BATCH
    assert "cannot run in real-time mode" in decision.reasons[0]
    assert any(why in r for r in decision.reasons), decision.reasons
    assert "fastest micro-batches" in decision.reasons[-1]
    assert decision.micro_batch is not None and decision.micro_batch.async_records


def test_a_source_other_than_kafka_is_named():
    p = sluice.Pipeline("gen")
    p.source(sources.generator(fields={"k": sources.Keys(10)}, rate=100)).key_by("k").aggregate(n=agg.count()).sink(
        sinks.kafka("out")
    )
    p.goals(latency="100ms")
    decision = choose_mode(p.graph, floor_s=0.6)
    assert decision.mode == MICRO_BATCH
    assert any("GeneratorSource: real-time mode reads only Kafka" in r for r in decision.reasons)


def test_the_floor_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("SLUICE_MICROBATCH_FLOOR_S", "0.1")
    assert microbatch_floor_s() == 0.1
    assert choose_mode(kafka_pipeline("keyed", goal="200ms").graph).mode == MICRO_BATCH
    monkeypatch.setenv("SLUICE_MICROBATCH_FLOOR_S", "fast")
    with pytest.raises(ConfigError, match="SLUICE_MICROBATCH_FLOOR_S must be a positive number"):
        microbatch_floor_s()
