"""A source read directly by a Python chain is measured by that chain, on the Arrow batches
it receives (``compile.chain_reading``): the same rows per batch, latest event times and
watermarks, hence the same windows, as Spark's observation of every record gives."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc

from sluice import Pipeline, agg, sinks, sources
from sluice import windows as W


def _to_wh(batch: pa.RecordBatch) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [batch.column("meter"), pc.multiply(batch.column("kwh"), 1000.0), batch.column("ts")], names=["meter", "wh", "ts"]
    )


def _pipeline(tag: str) -> Pipeline:
    spec = sources.generator(
        fields={
            "meter": sources.Keys(7, prefix="m"),
            "kwh": sources.Uniform(0.0, 2.0),
            "ts": sources.EventTime(jitter=0.5, step=0.001),
        },
        total_rows=3_000,
        seed=3,
        start_time=1_700_000_000.0,
        max_rows_per_batch=1_000,
        watermark_delay=0.2,
    )
    p = Pipeline(f"source_stats_{tag}", partitions=2)
    (
        p.source(spec, name="readings")
        .map_batches(_to_wh, schema={"meter": "string", "wh": "double", "ts": "timestamp"}, name="later")
        .filter("wh >= 100", name="some")
        .key_by("meter")
        .window(W.tumbling("1s"), time="ts")
        .aggregate(n=agg.count(), name="counts")
        .sink(sinks.memory(f"source_stats_{tag}"))
    )
    return p


def test_a_source_read_by_a_chain_is_measured_as_an_observation_measures_it(spark, tmp_path, monkeypatch):
    from sluice.runtime.batch import compile as compile_module
    from sluice.runtime.sinks import clear_memory, memory_table

    runs = {}
    for tag in ("chain", "observed"):
        if tag == "observed":  # Spark observes every record of the source instead
            monkeypatch.setattr(compile_module, "chain_reading", lambda graph, source, plan: None)
        clear_memory(f"source_stats_{tag}")
        p = _pipeline(tag)
        checkpoint = tmp_path / tag
        result = p.run(str(checkpoint), spark=spark)
        done = sorted((checkpoint / "batches").glob("*.done.json"))
        runs[tag] = {
            "rows": [m.rows_in for m in result.metrics],
            "watermarks": [m.watermark for m in result.metrics],
            "max_event_us": [json.loads(f.read_text())["max_event_us"] for f in done],
            "windows": sorted(tuple(r.values()) for r in memory_table(f"source_stats_{tag}").to_pylist()),
        }
    assert runs["chain"]["rows"][:3] == [1_000, 1_000, 1_000]
    assert runs["chain"]["max_event_us"][0]["readings"] > 0
    assert runs["chain"]["windows"]
    assert runs["chain"] == runs["observed"]


def test_only_a_chain_reading_the_source_alone_measures_it():
    from sluice.plan.physical import initial_plan
    from sluice.runtime.batch.compile import chain_reading

    graph = _pipeline("plan").graph
    assert chain_reading(graph, graph["readings"], initial_plan(graph, 2)) == "later"
    # a second consumer of the source: the chain sees only part of what the source reads
    two = Pipeline("two_consumers", partitions=2)
    readings = two.source(sources.generator(fields={"meter": sources.Keys(3)}, total_rows=10), name="readings")
    readings.map_batches(lambda b: b, name="a").sink(sinks.memory("two_a"))
    readings.map_batches(lambda b: b, name="b").sink(sinks.memory("two_b"))
    assert chain_reading(two.graph, two.graph["readings"], initial_plan(two.graph, 2)) is None


def test_a_chain_run_twice_counts_its_source_rows_once():
    """A second job over the same partitions (a window's late records run the chain again)
    adds the same rows per partition: they count once; the latest event time is a maximum."""
    from sluice.runtime.batch.source_stats import SourceStats
    from sluice.runtime.batch.task_metrics import MetricsParam, TaskMetrics, collect

    ts = pa.timestamp("us", tz="UTC")
    stats = SourceStats("readings", "ts")
    total = MetricsParam().zero({})
    parts = {
        0: [pa.record_batch({"ts": pa.array([5, 9], ts)}), pa.record_batch({"ts": pa.array([7], ts)})],
        1: [pa.record_batch({"ts": pa.array([3], ts)})],
    }
    for _job in range(2):
        for partition, batches in parts.items():
            metrics = TaskMetrics(None)
            assert len(list(stats.measuring(iter(batches), metrics, partition))) == len(batches)
            total = MetricsParam().addInPlace(total, metrics.values)
    assert stats.take(collect(total)) == {"rows": 4, "max_event_us": 9}


def _keyed_pipeline(tag: str) -> Pipeline:
    spec = sources.generator(
        fields={"meter": sources.Keys(7, prefix="m"), "kwh": sources.Uniform(0.0, 2.0), "seq": sources.Sequence()},
        total_rows=3_000,
        seed=5,
        max_rows_per_batch=1_000,
    )
    p = Pipeline(f"source_stats_keyed_{tag}", partitions=2)
    (
        p.source(spec, name="readings")
        .key_by("meter")
        .aggregate(n=agg.count(), total=agg.sum("seq"), last=agg.max("seq"), name="running")
        .sink(sinks.memory(f"source_stats_keyed_{tag}"))
    )
    return p


def test_a_source_whose_records_cross_to_a_keyed_stage_is_measured_there_as_an_observation_measures_it(
    spark, tmp_path, monkeypatch
):
    """source -> key_by -> running aggregate: the records cross the exchange uncombined and
    the keyed stage measures them as it receives them, instead of Spark observing them."""
    from sluice.runtime.batch import compile as compile_module
    from sluice.runtime.sinks import clear_memory, memory_table

    runs = {}
    for tag in ("received", "observed"):
        if tag == "observed":
            monkeypatch.setattr(compile_module, "received_directly", lambda *args: None)
        clear_memory(f"source_stats_keyed_{tag}")
        checkpoint = tmp_path / tag
        result = _keyed_pipeline(tag).run(str(checkpoint), spark=spark)
        done = sorted((checkpoint / "batches").glob("*.done.json"))
        runs[tag] = {
            "rows": [m.rows_in for m in result.metrics],
            "rows_by_source": [json.loads(f.read_text())["rows_by_source"] for f in done],
            "out": sorted(tuple(r.values()) for r in memory_table(f"source_stats_keyed_{tag}").to_pylist()),
        }
    assert runs["received"]["rows"][:3] == [1_000, 1_000, 1_000]
    assert runs["received"]["rows_by_source"][0] == {"readings": 1_000}
    assert len(runs["received"]["out"]) == 3 * 7  # every meter's running figures, each batch
    assert runs["received"] == runs["observed"]


def test_only_a_keyed_stage_receiving_the_source_records_alone_measures_them():
    from sluice.plan.physical import initial_plan
    from sluice.runtime.batch.compile import received_directly
    from sluice.runtime.kernels.factory import keyed_kernel

    def kernel_of(op):
        return keyed_kernel(op)

    graph = _keyed_pipeline("plan").graph
    graph.validate()
    plan = initial_plan(graph, 2)
    assert received_directly(graph, graph["readings"], plan, None, kernel_of) == "running"
    assert received_directly(graph, graph["readings"], plan, "seq", kernel_of) == "running"  # read by the kernel
    # the exchange does not carry an event time the kernel does not read
    assert received_directly(graph, graph["readings"], plan, "kwh_at", kernel_of) is None
    windowed = _pipeline("windowed").graph  # a chain reads it first
    windowed.validate()
    assert received_directly(windowed, windowed["readings"], initial_plan(windowed, 2), "ts", kernel_of) is None


def test_records_received_by_a_keyed_stage_are_counted_with_their_latest_event_time():
    from sluice.runtime.batch.source_stats import SourceStats
    from sluice.runtime.batch.task_metrics import MetricsParam, TaskMetrics, collect

    ts = pa.timestamp("us", tz="UTC")
    stats = SourceStats("readings", "ts", records=True)
    total = MetricsParam().zero({})
    for rows in (
        pa.table({"ts": pa.array([5, 9, None], ts)}),
        pa.table({"ts": pa.array([3], ts)}),
        pa.table({"ts": pa.array([], ts)}),
    ):
        metrics = TaskMetrics(None)
        stats.measure(rows, metrics)
        total = MetricsParam().addInPlace(total, metrics.values)
    assert stats.take(collect(total)) == {"rows": 4, "max_event_us": 9}
