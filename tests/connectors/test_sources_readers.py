"""The stream readers' planning logic, driven directly (as Spark's driver-side worker does),
with a fake clock: admission, arrival, exhaustion, file logs. No SparkSession needed."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.streaming.datasource import ReadAllAvailable

from sluice.errors import SourceError
from sluice.graph.sources import (
    INGEST_TS,
    DirectorySource,
    EventTime,
    GeneratorSource,
    Sequence,
)
from sluice.runtime.sources import is_exhausted, read_backlog, row_reader, set_max_rows
from sluice.runtime.sources.admission import DEFAULT_MAX_ROWS_PER_BATCH, default_read_limit
from sluice.runtime.sources.datasource import READERS, decode_spec, encode_spec, stream_schema

SECOND = 1_000_000


def reader_for(spec, control_dir, name="src", parallelism=2):
    schema = from_arrow_schema(stream_schema(spec))
    return READERS[type(spec)](spec, name, str(control_dir), schema, parallelism)


@pytest.fixture
def clock(monkeypatch):
    """A settable 'now' (microseconds) for the row readers."""
    now = {"us": 100 * SECOND}
    monkeypatch.setattr(row_reader, "now_us", lambda: now["us"])
    return now


def read_all(reader, start, end) -> pa.Table:
    batches = [b for p in reader.partitions(start, end) for b in reader.read(p)]
    return pa.Table.from_batches(batches)


def test_rate_limited_generator_plans_only_arrived_rows(tmp_path, clock):
    spec = GeneratorSource(fields={"i": Sequence(), "ts": EventTime()}, rate=10, start_time=100.0)
    reader = reader_for(spec, tmp_path)
    start = reader.initialOffset()
    assert start["start_us"] == 100 * SECOND and start["rows"] == 0
    limit = default_read_limit()
    clock["us"] = 100 * SECOND + 450_000  # rows 0..4 have arrived (0, 0.1, ..., 0.4 s)
    end = reader.latestOffset(start, limit)
    assert end["rows"] == 5
    assert reader.latestOffset(end, limit) == end  # nothing new: same offset, no batch
    clock["us"] = 101 * SECOND
    end2 = reader.latestOffset(end, limit)
    assert end2["rows"] == 11
    rows = read_all(reader, end, end2)
    assert rows.column("i").to_pylist() == list(range(5, 11))
    ingest = rows.column(INGEST_TS).cast(pa.int64()).to_pylist()
    assert ingest == [100 * SECOND + i * 100_000 for i in range(5, 11)]
    assert max(ingest) <= clock["us"]
    assert rows.column("ts").cast(pa.int64()).to_pylist() == ingest  # no jitter: equal
    assert reader.reportLatestOffset()["rows"] == 11


def test_admission_cap_spec_default_live_override_and_read_all(tmp_path, clock):
    spec = GeneratorSource(fields={"i": Sequence()}, total_rows=1000, max_rows_per_batch=300)
    reader = reader_for(spec, tmp_path)
    limit = default_read_limit()
    o0 = reader.initialOffset()
    o1 = reader.latestOffset(o0, limit)
    assert o1["rows"] == 300
    assert read_backlog(str(tmp_path), "src")["backlog"] == 700
    set_max_rows(str(tmp_path), "src", 50)
    o2 = reader.latestOffset(o1, limit)
    assert o2["rows"] - o1["rows"] == 50
    # Spark's ReadAllAvailable (e.g. Trigger.Once) overrides every configured limit.
    o3 = reader.latestOffset(o2, ReadAllAvailable())
    assert o3["rows"] == 1000
    assert is_exhausted(str(tmp_path), "src")
    end = reader.latestOffset(o3, limit)  # every row admitted: the end-of-input punctuation
    assert end == {**o3, "end": True}
    assert reader.latestOffset(end, limit) == end  # then no more batches


def test_finite_source_ends_with_one_empty_punctuation_batch(tmp_path, clock):
    """Once every row is admitted, the next offset is the same one plus ``"end": True``: Spark
    runs one more batch, with no rows, whose logged offset tells the executor the input ended."""
    spec = GeneratorSource(fields={"i": Sequence()}, total_rows=10, rate=10, start_time=100.0)
    reader = reader_for(spec, tmp_path)
    limit = default_read_limit()
    clock["us"] = 100 * SECOND + 450_000  # rows 0..4 have arrived
    o1 = reader.latestOffset(reader.initialOffset(), limit)
    assert o1["rows"] == 5 and "end" not in o1
    assert reader.latestOffset(o1, limit) == o1  # rows still to arrive: no punctuation yet
    clock["us"] = 102 * SECOND
    o2 = reader.latestOffset(o1, limit)
    assert o2["rows"] == 10 and "end" not in o2
    clock["us"] = 103 * SECOND
    end = reader.latestOffset(o2, limit)
    assert end == {"source": "src", "rows": 10, "start_us": o2["start_us"], "at_us": 103 * SECOND, "end": True}
    assert reader.partitions(o2, end) == [] and read_backlog(str(tmp_path), "src")["backlog"] == 0
    assert reader.latestOffset(end, limit) == end
    assert reader.reportLatestOffset()["rows"] == 10


def test_available_now_on_finite_input_ends_with_the_punctuation(tmp_path, clock):
    spec = GeneratorSource(fields={"i": Sequence()}, total_rows=50, max_rows_per_batch=30)
    reader = reader_for(spec, tmp_path)
    reader.prepareForTriggerAvailableNow()
    offsets = [reader.initialOffset()]
    for _ in range(10):
        nxt = reader.latestOffset(offsets[-1], default_read_limit())
        if nxt == offsets[-1]:
            break
        offsets.append(nxt)
    assert [(o["rows"], o.get("end", False)) for o in offsets[1:]] == [(30, False), (50, False), (50, True)]


def test_endless_rateless_generator_is_capped_and_unbounded(tmp_path, clock):
    spec = GeneratorSource(fields={"i": Sequence()})
    reader = reader_for(spec, tmp_path)
    o1 = reader.latestOffset(reader.initialOffset(), default_read_limit())
    assert 0 < o1["rows"] <= 100_000  # never one unbounded batch
    assert reader.reportLatestOffset()["unbounded"] is True
    assert read_backlog(str(tmp_path), "src")["backlog"] is None
    # Rows available when admitted: their ingest time is when the batch was planned.
    rows = read_all(reader, {"rows": 0}, o1)
    assert set(rows.column(INGEST_TS).cast(pa.int64()).to_pylist()) == {clock["us"]}


def test_big_batches_are_read_in_parallel_partitions(tmp_path, clock):
    spec = GeneratorSource(fields={"i": Sequence()}, total_rows=200_000)
    reader = reader_for(spec, tmp_path, parallelism=4)
    end = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    parts = reader.partitions(reader.initialOffset(), end)
    assert len(parts) == 4
    assert read_all(reader, reader.initialOffset(), end).column("i").to_pylist() == list(range(200_000))


def test_available_now_stops_at_what_had_arrived(tmp_path, clock):
    spec = GeneratorSource(fields={"i": Sequence()}, rate=100, start_time=100.0, max_rows_per_batch=30)
    reader = reader_for(spec, tmp_path)
    clock["us"] = 101 * SECOND  # 101 rows arrived
    reader.prepareForTriggerAvailableNow()
    offset, sizes = reader.initialOffset(), []
    for _ in range(10):
        nxt = reader.latestOffset(offset, default_read_limit())
        clock["us"] += SECOND  # more arrive, but AvailableNow ignores them
        if nxt == offset:
            break
        sizes.append(nxt["rows"] - offset["rows"])
        offset = nxt
    assert sizes == [30, 30, 30, 11]


def test_spec_survives_the_trip_through_options(tmp_path):
    spec = GeneratorSource(fields={"i": Sequence()}, rate=5, seed=3)
    assert decode_spec(encode_spec(spec)) == spec


def write_lines(path, ids):
    path.write_text("".join(json.dumps({"id": i}) + "\n" for i in ids))


def test_directory_admits_whole_files_in_order_and_keeps_a_file_log(tmp_path):
    inbox = tmp_path / "in"
    inbox.mkdir()
    write_lines(inbox / "b.json", range(10, 14))  # 4 rows
    write_lines(inbox / "a.json", range(3))  # 3 rows
    write_lines(inbox / "c.json", range(20, 22))  # 2 rows
    (inbox / "_SUCCESS").write_text("")
    (inbox / ".d.json.tmp").write_text('{"id": 99}\n')
    ctl = tmp_path / "ctl"
    spec = DirectorySource(str(inbox), max_rows_per_batch=5)
    reader = reader_for(spec, ctl, "dir")
    o0 = reader.initialOffset()
    o1 = reader.latestOffset(o0, default_read_limit())
    assert o1 == {"source": "dir", "files": 1, "rows": 3}  # a (3) + b (4) > 5: a alone
    assert read_all(reader, o0, o1).column("id").to_pylist() == [0, 1, 2]
    o2 = reader.latestOffset(o1, default_read_limit())
    assert o2["files"] == 2  # b alone (4 rows), c would exceed 5
    o3 = reader.latestOffset(o2, default_read_limit())
    assert o3 == {"source": "dir", "files": 3, "rows": 9}
    assert reader.latestOffset(o3, default_read_limit()) == o3
    # A restarted reader finds the same file log, so replayed batches read the same files.
    again = reader_for(spec, ctl, "dir")
    assert [p.path for p in again.partitions(o1, o3)] == [str(inbox / "b.json"), str(inbox / "c.json")]
    write_lines(inbox / "0.json", [7])  # sorts first by name, but is new: comes last
    o4 = again.latestOffset(o3, default_read_limit())
    assert read_all(again, o3, o4).column("id").to_pylist() == [7]
    assert read_backlog(str(ctl), "dir")["available_rows"] == 10


def test_a_rate_source_behind_its_rate_is_capped_and_its_backlog_counts_rows_due_now(tmp_path, clock):
    """After 9.5 minutes of downtime at 2,000 rows/s, 1.14 M rows are due: an uncapped batch
    used to take them all and report a backlog of 0, then 0 again while they ran. With the
    default cap each batch takes DEFAULT_MAX_ROWS_PER_BATCH, the rest waits at the source
    and shows as backlog, growing with the rows that arrive while a batch runs."""
    spec = GeneratorSource(fields={"i": Sequence()}, rate=2000, start_time=100.0)
    reader = reader_for(spec, tmp_path)
    limit = default_read_limit()
    clock["us"] = 100 * SECOND + 570 * SECOND  # 570 s of rows due: 1,140,001
    due = 1_140_001
    o1 = reader.latestOffset(reader.initialOffset(), limit)
    assert o1["rows"] == DEFAULT_MAX_ROWS_PER_BATCH
    assert read_backlog(str(tmp_path), "src", now_us=clock["us"])["backlog"] == due - o1["rows"]
    # 10 s later, the batch still running: 20,000 more rows are due and waiting
    assert read_backlog(str(tmp_path), "src", now_us=clock["us"] + 10 * SECOND)["backlog"] == due + 20_000 - o1["rows"]
    offset, admitted = reader.initialOffset(), []
    while True:  # catch up, batch by batch: every row once, in order
        nxt = reader.latestOffset(offset, limit)
        if nxt == offset:
            break
        assert nxt["rows"] - offset["rows"] <= DEFAULT_MAX_ROWS_PER_BATCH
        admitted.append((offset, nxt))
        offset = nxt
    assert offset["rows"] == due and read_backlog(str(tmp_path), "src", now_us=clock["us"])["backlog"] == 0
    ids = pa.concat_arrays([read_all(reader, a, b).column("i").combine_chunks() for a, b in admitted])
    assert pc.all(pc.equal(ids, pa.array(range(due)))).as_py()  # nothing lost, nothing twice


def test_a_directory_without_a_limit_admits_a_bounded_batch(tmp_path, monkeypatch):
    monkeypatch.setattr("sluice.runtime.sources.admission.DEFAULT_MAX_ROWS_PER_BATCH", 10)
    inbox = tmp_path / "in"
    inbox.mkdir()
    for k in range(6):
        write_lines(inbox / f"{k}.json", range(4 * k, 4 * k + 4))  # 4 rows each
    reader = reader_for(DirectorySource(str(inbox)), tmp_path / "ctl", "dir")
    offset, sizes, ids = reader.initialOffset(), [], []
    while (nxt := reader.latestOffset(offset, default_read_limit())) != offset:
        sizes.append(nxt["rows"] - offset["rows"])
        ids += read_all(reader, offset, nxt).column("id").to_pylist()
        offset = nxt
    assert sizes == [8, 8, 8] and ids == list(range(24))


def test_an_available_now_directory_reads_the_files_there_at_its_first_look_then_ends(tmp_path):
    inbox = tmp_path / "in"
    inbox.mkdir()
    write_lines(inbox / "a.json", range(3))
    write_lines(inbox / "b.json", range(3, 5))
    ctl = tmp_path / "ctl"
    spec = DirectorySource(str(inbox), max_rows_per_batch=3, available_now=True)
    assert spec.finite and not DirectorySource(str(inbox)).finite
    reader = reader_for(spec, ctl, "dir")
    o0 = reader.initialOffset()
    o1 = reader.latestOffset(o0, default_read_limit())
    assert o1 == {"source": "dir", "files": 1, "rows": 3} and not is_exhausted(str(ctl), "dir")
    write_lines(inbox / "c.json", [99])  # after the first look: never read
    o2 = reader.latestOffset(o1, default_read_limit())
    assert o2 == {"source": "dir", "files": 2, "rows": 5} and is_exhausted(str(ctl), "dir")
    assert read_all(reader, o1, o2).column("id").to_pylist() == [3, 4]
    end = reader.latestOffset(o2, default_read_limit())  # the end-of-input punctuation, once
    assert end["end"] is True and (end["files"], end["rows"]) == (2, 5)
    assert reader.partitions(o2, end) == []
    assert reader.latestOffset(end, default_read_limit()) == end
    # a restarted query keeps the file log it made: still not c.json
    again = reader_for(spec, ctl, "dir")
    assert again.latestOffset(o2, default_read_limit())["end"] is True


def test_available_now_must_be_a_bool(tmp_path):
    with pytest.raises(SourceError, match="available_now must be True or False"):
        DirectorySource(str(tmp_path), schema=pa.schema([("id", pa.int64())]), available_now="yes")
