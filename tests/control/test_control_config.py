"""Constraints in the API, policies from Python or YAML, and the latency split (pure)."""

from __future__ import annotations

import pytest

import sluice
from sluice import agg, sinks, sources
from sluice.control import FixedPointBatchSizing, ModelBatchSizing, build_policies, load_policies
from sluice.core.metrics import OperatorProgress, SinkProgress
from sluice.errors import ConfigError, PipelineError
from sluice.graph.constraints import measuring_sinks, parse_duration, path_operators
from sluice.models.latency import split_path_latency


def _pipeline():
    p = sluice.Pipeline("c")
    src = p.source(sources.generator(fields={"k": sources.Keys(5), "v": sources.Uniform(0, 1)}, rate=10), name="src")
    cleaned = src.map_batches(lambda b: b, name="clean")
    counts = cleaned.key_by("k").aggregate(n=agg.count(), name="counts")
    counts.sink(sinks.memory("c_counts"), name="counts_out")
    cleaned.sink(sinks.memory("c_raw"), name="raw_out")
    return p, src, cleaned, counts


def test_durations():
    assert parse_duration("800ms") == pytest.approx(0.8)
    assert parse_duration("1.5s") == 1.5 and parse_duration("2m") == 120 and parse_duration(3) == 3.0
    for bad in ("fast", "-1s", "0ms", True):
        with pytest.raises(ConfigError):
            parse_duration(bad)


def test_constrain_a_path_between_streams():
    p, src, cleaned, counts = _pipeline()
    p.constrain("800ms", path=(src, counts), over="20s", p95="1s", name="fresh")
    p.constrain("2s")
    p.graph.validate()
    fresh, whole = p.graph.constraints
    assert (fresh.name, fresh.bound_s, fresh.window_s, fresh.p95_s, fresh.path) == ("fresh", 0.8, 20.0, 1.0, ("src", "counts"))
    assert whole.name == "latency_2" and whole.path is None
    key_by = p.graph["counts"].inputs[0]
    assert path_operators(p.graph, fresh) == ["src", "clean", key_by, "counts"]
    assert measuring_sinks(p.graph, fresh) == ["counts_out"]
    assert set(measuring_sinks(p.graph, whole)) == {"counts_out", "raw_out"}


def test_constraint_errors_are_clear():
    p, src, cleaned, counts = _pipeline()
    p.constrain("1s", path=(counts, src))
    with pytest.raises(PipelineError, match="no path leads from 'counts' to 'src'"):
        p.graph.validate()
    p2, *_ = _pipeline()
    p2.constrain("1s", name="x")
    p2.constrain("2s", name="x")
    with pytest.raises(PipelineError, match="two latency constraints are named 'x'"):
        p2.graph.validate()
    with pytest.raises(ConfigError, match="shorter than"):
        _pipeline()[0].constrain("1s", over="100ms")
    with pytest.raises(PipelineError, match="path must be"):
        _pipeline()[0].constrain("1s", path=("src",))


def test_policies_from_python_and_yaml(tmp_path):
    assert [type(p) for p in build_policies(None)] == [ModelBatchSizing]
    made = build_policies([{"batch_sizing": {"safety": 0.7}}, "fixed_point"])
    assert made[0].safety == 0.7 and isinstance(made[1], FixedPointBatchSizing)
    path = tmp_path / "p.yaml"
    path.write_text("policies:\n  - fixed_point: {rho: 0.6}\n  - fixed: {rows: 500}\n")
    loaded = load_policies(str(path))
    assert loaded[0].rho == 0.6 and loaded[1].rows == 500
    path.write_text("policies:\n  - nonsense: {}\n")
    with pytest.raises(ConfigError, match="unknown policy 'nonsense'"):
        load_policies(str(path))
    path.write_text("policies:\n  - batch_sizing: {speed: 3}\n")
    with pytest.raises(ConfigError, match="batch_sizing"):
        load_policies(str(path))


def test_latency_split_adds_up_and_moves_the_keyed_input_wait_to_the_exchange():
    sinks_stats = {"out": SinkProgress(rows=100, write_s=0.5, committed_ms=600.0, latency_mean_ms=900.0, latency_p95_ms=1200.0)}
    operators = {
        "clean": OperatorProgress(time_s=0.4, slowest_task_s=0.2),
        "counts": OperatorProgress(time_s=0.6, slowest_task_s=0.3, input_wait_s=0.2),
        "other": OperatorProgress(time_s=9.0, slowest_task_s=9.0),
    }  # not on the path
    split = split_path_latency(sinks_stats, operators, ["src", "clean", "counts"], ["out"])
    assert split["source_wait"] == 300.0  # 900 ms of latency, 600 of them inside the batch
    assert split["operators"] == {"clean": 200.0, "counts": 200.0}
    assert split["exchange"] == 100.0  # the slowest task's share of the keyed input wait
    assert split["sink_commit"] == 0.0  # the write (500 ms) ran the lineage (500 ms) itself
    total = split["source_wait"] + sum(split["operators"].values()) + split["exchange"] + split["sink_commit"] + split["rest"]
    assert total == pytest.approx(split["mean_ms"]) and split["rest"] == 100.0
    assert split_path_latency({"out": SinkProgress(rows=0)}, operators, ["clean"], ["out"]) is None


def test_an_operators_slowest_task_is_its_whole_time_in_the_task_however_many_arrow_batches():
    """A task runs an operator once per Arrow batch (Spark cuts 10,000 records; a source read
    by splits yields its own blocks): its slowest task's time is the task's sum of them, and the
    slowest task's over the tasks, or the latency split would give the operator's time to
    ``rest``."""
    from sluice.runtime.batch.task_metrics import MetricsParam, TaskMetrics, collect

    class Accumulator:  # what Spark's accumulator does with each task's values, on the driver
        value = MetricsParam().zero({})

        def add(self, values):
            self.value = MetricsParam().addInPlace(self.value, values)

    accumulator = Accumulator()
    for calls in ([0.5, 0.5, 0.25], [0.75]):  # two tasks: 1.25 s in three batches, 0.75 s in one
        metrics = TaskMetrics(accumulator)
        for seconds in calls:
            metrics.op_timing("costly", 100, 100, seconds)
        metrics.flush()
    costly = collect(accumulator.value).operators["costly"]
    assert costly.time_s == 2.0 and costly.slowest_task_s == 1.25
