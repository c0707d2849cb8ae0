"""A source opened by splits (``sluice.runtime.sources.splits``): Spark plans its batches,
and the Python chain after it reads their records itself. Spark's rows are then one per
input partition, and every result (outputs, statistics, restarts in either mode) is what
the records read through Spark give."""

from __future__ import annotations

import dataclasses
import os

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from sluice import Pipeline, agg, sinks, sources
from sluice.job import sources as job_sources
from sluice.runtime.sources.datasource import reads_by_splits, stream_reader
from sluice.runtime.sources.splits import SPLIT_SCHEMA, SplitStreamReader, read_splits

METERS = ["m-1", "m-2", None, "zähler-ü", "e\u0301", "🔌"]  # a NULL key, unicode, a combining accent


def _recorded(tmp_path, rows: int = 6_000) -> str:
    path = tmp_path / "recorded.parquet"
    kwh = [None if i % 97 == 0 else (i % 13) * 0.25 - 1.0 for i in range(rows)]
    pq.write_table(pa.table({"meter": [METERS[i % len(METERS)] for i in range(rows)], "kwh": kwh}), path)
    return str(path)


def _generator(total: int = 6_000, per_batch: int = 2_000):
    return sources.generator(
        fields={"meter": sources.Keys(40, prefix="m"), "kwh": sources.Normal(0.4, 0.3)},
        total_rows=total,
        seed=11,
        max_rows_per_batch=per_batch,
        start_time=1_700_000_000.0,
    )


def _planned(reader):
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    return start, end


@pytest.mark.parametrize("kind", ["generator", "replay"])
def test_the_splits_carry_exactly_the_records_the_reader_reads(tmp_path, kind):
    rows = 80_000  # two partitions of a batch (each gets at least row_reader.MIN_PARTITION_ROWS)
    spec = (
        _generator(rows, rows)
        if kind == "generator"
        else sources.replay(_recorded(tmp_path, rows), format="parquet", max_rows_per_batch=rows)
    )
    assert reads_by_splits(spec)
    control = str(tmp_path / "control")
    os.makedirs(control)
    reader = stream_reader(spec, "readings", control, parallelism=2)
    splits = SplitStreamReader(stream_reader(spec, "readings", control, parallelism=2))
    start, end = _planned(splits)
    planned = reader.latestOffset(start, reader.getDefaultReadLimit())  # it plans as the reader plans
    assert {**end, "at_us": 0} == {**planned, "at_us": 0}  # but for the clock: when it was planned
    partitions = splits.partitions(start, end)
    assert len(partitions) == 2
    rows = [batch for p in partitions for batch in splits.read(p)]
    assert all(batch.schema == SPLIT_SCHEMA and batch.num_rows == 1 for batch in rows)
    records = pa.Table.from_batches(list(read_splits(reader, iter(rows))))
    direct = pa.Table.from_batches([b for p in reader.partitions(start, end) for b in reader.read(p)])
    assert records.num_rows == end["rows"] > 0
    assert records.equals(direct)


def test_only_sources_whose_reader_reads_anywhere_are_opened_by_splits(tmp_path):
    assert reads_by_splits(_generator())
    assert not reads_by_splits(sources.directory(str(tmp_path), format="json", schema=pa.schema([("a", pa.int64())])))
    assert not reads_by_splits(sources.spark(lambda spark: spark.readStream.format("rate").load()))


def _to_wh(batch: pa.RecordBatch) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([batch.column("meter"), pc.multiply(batch.column("kwh"), 1000.0)], names=["meter", "wh"])


def _pipeline(spec, tag: str) -> Pipeline:
    p = Pipeline(f"splits_{tag}", partitions=2)
    (
        p.source(spec, name="readings")
        .map_batches(_to_wh, schema={"meter": "string", "wh": "double"}, name="to_wh")
        .filter("wh >= 0 OR wh IS NULL", name="valid")
        .key_by("meter")
        .aggregate(n=agg.count(), total=agg.sum("wh"), name="per_meter")
        .sink(sinks.memory(f"splits_{tag}"), name="out")
    )
    return p


class _InputRows:
    """Spark's own count of the rows its query read, batch by batch (a query listener)."""

    def __init__(self, spark):
        from pyspark.sql.streaming import StreamingQueryListener

        rows = self.rows = []

        class Listener(StreamingQueryListener):
            def onQueryStarted(self, event): ...

            def onQueryProgress(self, event):
                rows.append(event.progress.numInputRows)

            def onQueryIdle(self, event): ...

            def onQueryTerminated(self, event): ...

        self.listener = Listener()
        self.spark = spark
        spark.streams.addListener(self.listener)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.spark.streams.removeListener(self.listener)


def _final_state(tag: str) -> dict:
    """Each meter's last running count and sum (the memory sink keeps every batch's updates)."""
    from sluice.runtime.sinks import memory_table

    last = {}
    for row in memory_table(f"splits_{tag}").to_pylist():
        last[row["meter"]] = (row["n"], None if row["total"] is None else round(row["total"], 6))
    return last


def _by_records(monkeypatch):
    monkeypatch.setattr(job_sources, "opens_by_splits", lambda graph, source: False)


@pytest.mark.parametrize("kind", ["generator", "replay"])
def test_a_chain_reading_its_source_by_splits_gives_what_the_records_through_spark_give(spark, tmp_path, monkeypatch, kind):
    import time

    from sluice.runtime.sinks import clear_memory

    spec = (
        _generator() if kind == "generator" else sources.replay(_recorded(tmp_path), format="parquet", max_rows_per_batch=2_000)
    )
    runs = {}
    for mode in ("splits", "records"):
        if mode == "records":
            _by_records(monkeypatch)
        tag = f"{kind}_{mode}"
        clear_memory(f"splits_{tag}")
        p = _pipeline(spec, tag)
        assert job_sources.opens_by_splits(p.graph, p.graph.sources()[0]) == (mode == "splits")
        with _InputRows(spark) as spark_rows:
            result = p.run(str(tmp_path / tag), spark=spark)
            time.sleep(0.5)  # the last progress event reaches the listener asynchronously
        runs[mode] = {"rows": [m.rows_in for m in result.metrics], "state": _final_state(tag), "spark_rows": sum(spark_rows.rows)}
    assert runs["splits"]["rows"][:3] == [2_000, 2_000, 2_000]
    assert runs["splits"]["rows"] == runs["records"]["rows"]
    assert runs["splits"]["state"] == runs["records"]["state"]
    assert len(runs["splits"]["state"]) == (40 if kind == "generator" else len(METERS))
    if kind == "replay":
        assert None in runs["splits"]["state"]  # the NULL meter is one key
    assert runs["records"]["spark_rows"] == 6_000
    assert 0 < runs["splits"]["spark_rows"] <= 2 * 3  # Spark saw the splits: at most two a batch


@pytest.mark.parametrize("first", ["splits", "records"])
def test_a_restart_may_switch_between_splits_and_records(spark, tmp_path, monkeypatch, first):
    """The offsets Spark logs are the reader's own in both modes: a run stopped after one
    batch in one mode goes on in the other, and the whole equals one uninterrupted run."""
    from sluice.runtime.sinks import clear_memory

    spec = sources.replay(_recorded(tmp_path), format="parquet", max_rows_per_batch=2_000)
    clear_memory("splits_whole")
    _pipeline(spec, "whole").run(str(tmp_path / "whole"), spark=spark)
    clear_memory("splits_restarted")
    checkpoint = str(tmp_path / "restarted")
    with monkeypatch.context() as patch:
        if first == "records":
            _by_records(patch)
        one = _pipeline(spec, "restarted").run(checkpoint, spark=spark, stop_when=lambda executor: executor.batches_done >= 1)
    if first == "splits":
        _by_records(monkeypatch)
    rest = _pipeline(spec, "restarted").run(checkpoint, spark=spark)
    assert 1 <= len(one.metrics) < 3
    assert sum(m.rows_in for m in rest.metrics) == 6_000  # the checkpoint's metrics: both runs' batches
    assert _final_state("restarted") == _final_state("whole")


def test_a_chain_spread_over_more_tasks_gets_the_records(spark, tmp_path):
    """A plan that rebalances the chain's input (the chaining policy's cut) makes the source
    stage read the splits' records itself: the chain then runs on more tasks than two splits."""
    from sluice.runtime.sinks import clear_memory

    spec = _generator()
    clear_memory("splits_plain")
    _pipeline(spec, "plain").run(str(tmp_path / "plain"), spark=spark)
    clear_memory("splits_spread")
    p = _pipeline(spec, "spread")
    seen = []

    def spread(metrics, plan):
        seen.append(metrics.operators.get("to_wh", {}).get("tasks"))
        if plan.rebalance:
            return None
        return dataclasses.replace(plan, rebalance={p.graph.consumers(p.graph.sources()[0].id)[0].id: 4})

    result = p.run(str(tmp_path / "spread"), spark=spark, controller=spread)
    assert [m.rows_in for m in result.metrics][:3] == [2_000, 2_000, 2_000]
    assert seen[0] <= 2 and max(seen[1:]) == 4  # two splits, then four tasks over their records
    assert _final_state("spread") == _final_state("plain")
