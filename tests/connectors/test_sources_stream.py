"""Sluice's sources on local Spark: what comes out of the streams, admission, backlog."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pyarrow as pa
import pytest

from sluice.graph.rates import RateSchedule
from sluice.graph.sources import (
    INGEST_TS,
    DirectorySource,
    EventTime,
    GeneratorSource,
    Keys,
    Normal,
    ReplaySource,
    Sequence,
    SparkSource,
    arrival_us,
)
from sluice.runtime.sources import (
    backlog_from_progress,
    is_exhausted,
    open_stream,
    read_backlog,
    set_max_rows,
)


class Collector:
    """A foreachBatch sink that keeps every batch as an Arrow table, with when it ran."""

    def __init__(self):
        self.batches: list[tuple[int, pa.Table, float]] = []

    def __call__(self, df, batch_id):
        self.batches.append((batch_id, df.toArrow(), time.time()))

    def table(self) -> pa.Table:
        tables = [t for _, t, _ in self.batches if t.num_rows]
        return pa.concat_tables(tables) if tables else None

    def sizes(self) -> list[int]:
        return [t.num_rows for _, t, _ in self.batches]


def start(df, collector, checkpoint, **trigger):
    return (
        df.writeStream.foreachBatch(collector)
        .option("checkpointLocation", checkpoint)
        .trigger(**(trigger or {"processingTime": "200 milliseconds"}))
        .start()
    )


def wait_for(condition, timeout=20.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


METER_FIELDS = {
    "meter": Keys(100, distribution="zipf", skew=1.2, prefix="meter-"),
    "kwh": Normal(0.5, 0.2),
    "seq": Sequence(),
    "ts": EventTime(jitter=1.0),
}


def test_finite_generator_streams_exactly_its_rows_in_capped_batches(spark, tmp_path):
    spec = GeneratorSource(fields=METER_FIELDS, total_rows=30_000, max_rows_per_batch=12_000, start_time=1_700_000_000.0, seed=11)
    df = open_stream(spark, spec, str(tmp_path / "ctl"), "meters")
    assert df.isStreaming and df.columns == ["meter", "kwh", "seq", "ts", INGEST_TS]
    out = Collector()
    q = start(df, out, str(tmp_path / "ck"), availableNow=True)
    try:
        assert q.awaitTermination(60)
    finally:
        q.stop()
    assert out.sizes() == [12_000, 12_000, 6_000, 0]  # then the end-of-input batch, no rows
    got = out.table().sort_by("seq")
    expected = pa.Table.from_batches(spec.generate(0, 30_000, int(1_700_000_000 * 1e6)))
    assert got.select(spec.schema().names).cast(spec.schema()).equals(expected)
    # Rate-less rows become available when admitted: ingest time = when the batch was planned.
    assert got.column(INGEST_TS).null_count == 0
    assert is_exhausted(str(tmp_path / "ctl"), "meters")


def test_rate_limited_generator_admits_only_arrived_rows(spark, tmp_path):
    rate = 2000.0
    spec = GeneratorSource(fields={"seq": Sequence()}, rate=rate)
    out = Collector()
    q = start(open_stream(spark, spec, str(tmp_path / "ctl"), "paced"), out, str(tmp_path / "ck"))
    try:
        assert wait_for(lambda: len(out.batches) >= 4)
    finally:
        q.stop()
    for _, batch, ran_at in out.batches:
        if not batch.num_rows:
            continue
        seq = batch.column("seq").to_numpy()
        ingest_us = batch.column(INGEST_TS).cast(pa.int64()).to_numpy()
        # Every admitted row had arrived before its batch ran ...
        assert ingest_us.max() <= ran_at * 1e6
        # ... at start + i / rate exactly.
        start_us = ingest_us[0] - int(np.floor(seq[0] * 1e6 / rate))
        assert np.array_equal(ingest_us, arrival_us(start_us, rate, seq))
    seq = out.table().column("seq").to_numpy()
    assert np.array_equal(np.sort(seq), np.arange(len(seq)))  # nothing skipped or repeated
    elapsed = out.batches[-1][2] - start_us / 1e6
    assert len(seq) <= rate * elapsed + 1


def test_admission_limit_changes_while_running_and_backlog_is_reported(spark, tmp_path):
    ctl = str(tmp_path / "ctl")
    spec = GeneratorSource(fields={"seq": Sequence()}, rate=20_000, max_rows_per_batch=1000)
    out = Collector()
    q = start(open_stream(spark, spec, ctl, "busy"), out, str(tmp_path / "ck"))
    try:
        assert wait_for(lambda: len(out.batches) >= 2)
        # A source arriving faster than admitted builds a backlog, seen both ways.
        assert wait_for(
            lambda: (q.lastProgress or {}).get("sources") and backlog_from_progress(q.lastProgress).get("busy", 0) > 0
        )
        status = read_backlog(ctl, "busy")
        assert status["backlog"] > 0 and status["max_rows"] == 1000
        set_max_rows(ctl, "busy", 300)
        n_before = len(out.batches) + 1  # the batch maybe in flight was planned before
        assert wait_for(lambda: len(out.batches) >= n_before + 3)
    finally:
        q.stop()
    sizes = out.sizes()
    assert max(sizes[:2]) == 1000
    after = sizes[n_before:]
    assert after and max(after) == 300
    assert read_backlog(ctl, "busy")["max_rows"] == 300


def test_directory_source_picks_up_a_file_added_while_running(spark, tmp_path):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "a.json").write_text("".join(json.dumps({"id": i, "v": i / 2}) + "\n" for i in range(5)))
    spec = DirectorySource(str(inbox), format="json")
    out = Collector()
    q = start(open_stream(spark, spec, str(tmp_path / "ctl"), "inbox"), out, str(tmp_path / "ck"))
    try:
        assert wait_for(lambda: sum(out.sizes()) == 5)
        # Write under a hidden name, then rename into place: never read half-written.
        tmp = inbox / ".b.json.tmp"
        tmp.write_text("".join(json.dumps({"id": i, "v": i / 2}) + "\n" for i in range(5, 8)))
        os.rename(tmp, inbox / "b.json")
        assert wait_for(lambda: sum(out.sizes()) == 8)
        time.sleep(0.5)
    finally:
        q.stop()
    got = out.table()
    assert sorted(got.column("id").to_pylist()) == list(range(8))
    assert sum(out.sizes()) == 8  # each file read once
    assert got.column(INGEST_TS).null_count == 0


def test_replay_source_replays_a_file_at_its_rate(spark, tmp_path):
    path = tmp_path / "recorded.json"
    path.write_text("".join(json.dumps({"n": i, "word": f"w{i % 7}"}) + "\n" for i in range(60)))
    rate = 40.0
    spec = ReplaySource(str(path), format="json", rate=rate)
    ctl = str(tmp_path / "ctl")
    out = Collector()
    q = start(open_stream(spark, spec, ctl, "replay"), out, str(tmp_path / "ck"))
    try:
        assert wait_for(lambda: is_exhausted(ctl, "replay") and sum(out.sizes()) == 60, timeout=30)
    finally:
        q.stop()
    got = out.table()
    assert got.column("n").to_pylist() == list(range(60))  # in order, each once
    ingest = got.column(INGEST_TS).cast(pa.int64()).to_numpy()
    assert np.array_equal(ingest, arrival_us(ingest[0], rate, np.arange(60)))
    assert len([s for s in out.sizes() if s]) >= 2  # paced over batches, not all at once


@pytest.mark.parametrize("rate", [10_000, RateSchedule(((0, 3000), (0.4, 20_000), (0.5, 5000)))], ids=["constant", "schedule"])
def test_restart_continues_with_the_same_clock(spark, tmp_path, rate):
    """No start_time: the first start is recorded in the offsets, so the rows a restarted
    query produces line up with those before the stop, whether the rate is constant or
    steps by a schedule (row i's arrival, and event time, follow the steps)."""
    ctl, ck = str(tmp_path / "ctl"), str(tmp_path / "ck")
    spec = GeneratorSource(
        fields={"seq": Sequence(), "ts": EventTime(), "k": Keys(10)}, rate=rate, total_rows=4000, max_rows_per_batch=1000
    )
    first = Collector()
    q = start(open_stream(spark, spec, ctl, "clock"), first, ck)
    try:
        assert wait_for(lambda: sum(first.sizes()) >= 1500)
    finally:
        q.stop()
    second = Collector()
    q = start(open_stream(spark, spec, ctl, "clock"), second, ck)
    try:
        assert wait_for(lambda: is_exhausted(ctl, "clock") and sum(first.sizes()) + sum(second.sizes()) >= 4000)
        q.processAllAvailable()
    finally:
        q.stop()
    # A batch cut short by the stop is run again after the restart: it must be identical.
    by_id = {bid: t for bid, t, _ in first.batches}
    for bid, t, _ in second.batches:
        if bid in by_id:
            assert t.equals(by_id[bid])
        by_id[bid] = t
    got = pa.concat_tables([t for t in by_id.values() if t.num_rows]).sort_by("seq")
    assert got.column("seq").to_pylist() == list(range(4000))
    ts = got.column("ts").cast(pa.int64()).to_numpy()
    start_us = int(ts[0])
    expected = pa.Table.from_batches(spec.generate(0, 4000, start_us))
    assert got.select(["seq", "ts", "k"]).cast(expected.schema).equals(expected)
    ingest = got.column(INGEST_TS).cast(pa.int64()).to_numpy()
    assert np.array_equal(ingest, arrival_us(start_us, rate, np.arange(4000)))


def test_spark_source_wraps_any_streaming_dataframe(spark, tmp_path):
    spec = SparkSource(lambda s: s.readStream.format("rate").option("rowsPerSecond", 100).load())
    df = open_stream(spark, spec, str(tmp_path / "ctl"), "rate")
    assert df.isStreaming and INGEST_TS in df.columns
    with pytest.raises(Exception, match="streaming DataFrame"):
        open_stream(spark, SparkSource(lambda s: s.range(3)), str(tmp_path / "ctl"), "batch")
