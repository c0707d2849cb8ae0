"""Source specs and generation without Spark: determinism, distributions, validation."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.errors import ConfigError, SourceError
from sluice.graph.rates import RateSchedule
from sluice.graph.sources import (
    GENERATOR_BLOCK_ROWS,
    TIMESTAMP,
    Choice,
    DirectorySource,
    EventTime,
    GeneratorSource,
    Keys,
    Normal,
    ReplaySource,
    Sequence,
    SparkSource,
    Text,
    Uniform,
    arrival_us,
    rows_arrived,
)
from sluice.runtime.sources import (
    backlog_from_progress,
    get_max_rows,
    is_exhausted,
    read_backlog,
    set_max_rows,
)
from sluice.runtime.sources.files import count_rows, read_data_file
from sluice.runtime.sources.row_reader import split_rows

METERS = GeneratorSource(
    fields={
        "meter": Keys(1000, distribution="zipf", skew=1.2, prefix="meter-"),
        "kwh": Normal(0.5, 0.2),
        "voltage": Uniform(220, 240),
        "phase": Choice(["a", "b", "c"], weights=[1, 2, 7]),
        "seq": Sequence(),
        "note": Text(vocabulary=50, min_words=1, max_words=4, skew=1.0),
        "ts": EventTime(jitter=2.0),
    },
    rate=1000,
    seed=7,
)


def table(batches) -> pa.Table:
    return pa.Table.from_batches(batches, schema=METERS.schema())


def test_schema_and_event_time_defaults():
    schema = METERS.schema()
    assert schema.names == ["meter", "kwh", "voltage", "phase", "seq", "note", "ts"]
    assert schema.field("meter").type == pa.string()
    assert schema.field("seq").type == pa.int64()
    assert schema.field("ts").type == TIMESTAMP
    # The only EventTime field is the event time; its jitter bounds out-of-orderness.
    assert METERS.event_time == "ts"
    assert METERS.watermark_delay == 2.0
    assert "__ingest_ts" not in schema.names


@settings(max_examples=25, deadline=None)
@given(
    first=st.integers(0, 3 * GENERATOR_BLOCK_ROWS),
    length=st.integers(0, 2 * GENERATOR_BLOCK_ROWS),
    cuts=st.lists(st.integers(0, 2 * GENERATOR_BLOCK_ROWS), max_size=4),
)
def test_any_batch_boundaries_give_the_same_rows(first, length, cuts):
    stop = first + length
    whole = table(METERS.generate(first, stop, start_us=1_000_000))
    edges = sorted({first, stop, *(first + c for c in cuts if c < length)})
    pieces = [b for a, z in zip(edges, edges[1:]) for b in METERS.generate(a, z, 1_000_000)]
    assert table(pieces).equals(whole)
    assert whole.num_rows == length
    if length:
        assert whole.column("seq").to_pylist() == list(range(first, stop))


def test_seed_changes_values_and_same_seed_repeats():
    a = table(METERS.generate(0, 5000, 0))
    b = table(METERS.generate(0, 5000, 0))
    other = GeneratorSource(fields=METERS.fields, rate=1000, seed=8)
    c = pa.Table.from_batches(other.generate(0, 5000, 0))
    assert a.equals(b)
    assert a.column("kwh") != c.column("kwh")


def test_total_rows_ends_the_generator():
    finite = GeneratorSource(fields={"i": Sequence()}, total_rows=100)
    assert sum(b.num_rows for b in finite.generate(90, 500, 0)) == 10
    assert finite.generate(100, 200, 0) == []


def test_zipf_keys_are_skewed_and_uniform_keys_are_not():
    n, rows = 1000, 200_000
    zipf = GeneratorSource(fields={"k": Keys(n, distribution="zipf", skew=1.2)}, seed=1)
    flat = GeneratorSource(fields={"k": Keys(n)}, seed=1)
    z = np.concatenate([b.column(0).to_numpy() for b in zipf.generate(0, rows, 0)])
    u = np.concatenate([b.column(0).to_numpy() for b in flat.generate(0, rows, 0)])
    z_counts = np.bincount(z, minlength=n)
    u_counts = np.bincount(u, minlength=n)
    # Zipf(1.2) over 1000 keys: the hottest key gets 1 / H(1000, 1.2) of the rows (~22%).
    expected_top = 1.0 / np.sum(np.arange(1, n + 1) ** -1.2)
    assert z_counts[0] / rows == pytest.approx(expected_top, rel=0.05)
    assert z_counts[0] > z_counts[1] > z_counts[10] > z_counts[500]
    assert u_counts.max() / rows < 0.0025  # uniform: ~0.1% each
    assert z.min() >= 0 and z.max() < n and u.min() >= 0 and u.max() < n


def test_string_keys_have_the_prefix():
    spec = GeneratorSource(fields={"m": Keys(5, prefix="meter-")})
    values = set(table_of(spec, 2000).column("m").to_pylist())
    assert values <= {f"meter-{i}" for i in range(5)} and len(values) == 5


def table_of(spec, n):
    return pa.Table.from_batches(spec.generate(0, n, 0), schema=spec.schema())


def test_value_distributions():
    spec = GeneratorSource(
        fields={
            "u": Uniform(220, 240),
            "n": Normal(0.5, 0.2),
            "c": Choice(["a", "b"], weights=[1, 3]),
            "t": Text(vocabulary=["x", "y"], min_words=2, max_words=3),
        },
        seed=3,
    )
    t = table_of(spec, 50_000)
    u = t.column("u").to_numpy()
    assert u.min() >= 220 and u.max() < 240
    n = t.column("n").to_numpy()
    assert n.mean() == pytest.approx(0.5, abs=0.01) and n.std() == pytest.approx(0.2, abs=0.01)
    share_b = t.column("c").to_pylist().count("b") / t.num_rows
    assert share_b == pytest.approx(0.75, abs=0.01)
    words = [len(s.split(" ")) for s in t.column("t").to_pylist()]
    assert set(words) == {2, 3}


def test_event_time_is_arrival_minus_bounded_jitter():
    spec = GeneratorSource(fields={"ts": EventTime(jitter=2.0), "i": Sequence()}, rate=100)
    t = table_of(spec, 20_000)
    ts = t.column("ts").cast(pa.int64()).to_numpy()
    due = arrival_us(5_000_000 * 0, 100, np.arange(20_000))
    late = due - ts
    assert late.min() >= 0 and late.max() < 2_000_000
    assert late.max() > 1_900_000  # the jitter is really used: events arrive out of order
    exact = GeneratorSource(fields={"ts": EventTime()}, rate=100)
    ts0 = table_of(exact, 1000).column("ts").cast(pa.int64()).to_numpy()
    assert np.array_equal(ts0, due[:1000])


def test_rows_arrived_matches_arrival_times():
    start = 1_000_000
    rate = 333.0
    for now in [start - 1, start, start + 2_999, start + 3_003, start + 1_000_000]:
        k = rows_arrived(start, rate, now)
        times = arrival_us(start, rate, np.arange(k + 1))
        assert (times[:k] <= now).all() and times[k] > now


def test_split_rows_partitions_a_range_on_block_edges():
    ranges = split_rows(0, 10 * GENERATOR_BLOCK_ROWS + 5, 4, GENERATOR_BLOCK_ROWS)
    assert len(ranges) == 4
    assert ranges[0][0] == 0 and ranges[-1][1] == 10 * GENERATOR_BLOCK_ROWS + 5
    assert all(a < b for a, b in ranges)
    assert all(b == c for (_, b), (c, _) in zip(ranges, ranges[1:]))
    assert all(b % GENERATOR_BLOCK_ROWS == 0 for _, b in ranges[:-1])
    assert split_rows(5, 100, 4, GENERATOR_BLOCK_ROWS) == [(5, 100)]  # small: one partition
    assert split_rows(5, 5, 4, GENERATOR_BLOCK_ROWS) == []


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda: GeneratorSource(fields={"k": Keys(10)}, rate=-5), ["rate", "-5"]),
        (lambda: GeneratorSource(fields={"k": Keys(10, distribution="pareto")}), ["field 'k'", "pareto"]),
        (lambda: GeneratorSource(fields={"k": Keys(0)}), ["field 'k'", "positive"]),
        (lambda: GeneratorSource(fields={"k": Keys(10, distribution="zipf", skew=0)}), ["field 'k'", "skew"]),
        (lambda: GeneratorSource(fields={"x": Normal(0, -1)}), ["field 'x'", "std"]),
        (lambda: GeneratorSource(fields={"x": Uniform(2, 1)}), ["field 'x'", "below"]),
        (lambda: GeneratorSource(fields={"x": Choice(["a", "b"], weights=[1])}), ["field 'x'", "weights"]),
        (lambda: GeneratorSource(fields={"x": EventTime(jitter=-1)}), ["field 'x'", "jitter"]),
        (lambda: GeneratorSource(fields={"x": 3}), ["field 'x'", "not a field generator"]),
        (lambda: GeneratorSource(fields={}), ["fields"]),
        (lambda: GeneratorSource(fields={"__x": Sequence()}), ["'__x'", "reserved"]),
        (lambda: GeneratorSource(fields={"k": Keys(3)}, seed=-1), ["seed"]),
        (lambda: GeneratorSource(fields={"k": Keys(3)}, total_rows=-1), ["total_rows"]),
        (lambda: GeneratorSource(fields={"k": Keys(3)}, max_rows_per_batch=0), ["max_rows_per_batch"]),
        (lambda: GeneratorSource(fields={"k": Keys(3)}, event_time="k"), ["event_time", "timestamp"]),
        (lambda: GeneratorSource(fields={"k": Keys(3)}, event_time="nope"), ["event_time", "nope"]),
        (lambda: DirectorySource("/no/such/dir"), ["DirectorySource", "/no/such/dir", "no such directory"]),
        (lambda: ReplaySource("/no/such/file.json"), ["ReplaySource", "no such file"]),
        (lambda: SparkSource("not callable"), ["SparkSource", "callable"]),
    ],
)
def test_bad_specs_say_what_and_where(make, words):
    with pytest.raises(SourceError) as err:
        make()
    for word in words:
        assert word in str(err.value)


def test_directory_source_checks_format_and_schema(tmp_path):
    with pytest.raises(SourceError, match="unknown format 'xml'"):
        DirectorySource(str(tmp_path), format="xml", schema=pa.schema([("a", pa.int64())]))
    with pytest.raises(SourceError, match="no schema given"):
        DirectorySource(str(tmp_path))
    (tmp_path / "a.json").write_text('{"x": 1, "s": "u"}\n{"x": 2, "s": "v"}\n')
    inferred = DirectorySource(str(tmp_path))
    assert inferred.schema().names == ["x", "s"]
    assert inferred.schema().field("x").type == pa.int64()


def test_spark_source_needs_a_schema_to_be_validated():
    src = SparkSource(lambda spark: None)
    with pytest.raises(SourceError, match="pass schema="):
        src.schema()
    typed = SparkSource(lambda spark: None, schema=pa.schema([("a", pa.int64())]))
    assert typed.schema().names == ["a"]


@pytest.mark.parametrize("fmt", ["json", "csv", "parquet"])
def test_data_files_read_with_the_given_schema(tmp_path, fmt):
    rows = pa.table({"k": ["a", "b", "c"], "v": [1.5, 2.5, None]})
    path = str(tmp_path / f"part.{fmt}")
    if fmt == "json":
        with open(path, "w") as f:
            for r in rows.to_pylist():
                f.write(json.dumps(r) + "\n")
    elif fmt == "csv":
        import pyarrow.csv as pacsv

        pacsv.write_csv(rows, path)
    else:
        pq.write_table(rows, path)
    schema = pa.schema([("v", pa.float64()), ("k", pa.string()), ("missing", pa.int64())])
    got = read_data_file(path, fmt, schema)
    assert got.schema == schema
    assert got.column("k").to_pylist() == ["a", "b", "c"]
    assert got.column("v").to_pylist() == [1.5, 2.5, None]
    assert got.column("missing").null_count == 3
    assert count_rows(path, fmt) == 3


def test_admission_and_backlog_control_files(tmp_path):
    d = str(tmp_path)
    assert get_max_rows(d, "src") is None
    set_max_rows(d, "src", 500)
    assert get_max_rows(d, "src") == 500
    set_max_rows(d, "src", None)
    assert get_max_rows(d, "src") is None
    with pytest.raises(ConfigError, match="positive"):
        set_max_rows(d, "src", 0)
    with pytest.raises(ConfigError, match="names files"):
        set_max_rows(d, "../evil", 5)
    assert read_backlog(d, "src") is None and not is_exhausted(d, "src")
    assert not [n for n in os.listdir(d) if n.startswith(".tmp")]  # atomic writes clean up


def test_backlog_from_progress():
    progress = {
        "sources": [
            {
                "latestOffset": json.dumps({"source": "a", "rows": 900, "start_us": 1}),
                "endOffset": json.dumps({"source": "a", "rows": 600, "start_us": 1, "at_us": 2}),
            },
            {
                "latestOffset": json.dumps({"source": "b", "rows": 10, "unbounded": True}),
                "endOffset": json.dumps({"source": "b", "rows": 10}),
            },
            {"latestOffset": None, "endOffset": '{"0": 5}'},
        ]
    }
    assert backlog_from_progress(progress) == {"a": 300, "b": math.inf}
    assert backlog_from_progress(json.dumps(progress)) == {"a": 300, "b": math.inf}
    assert backlog_from_progress({}) == {}


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_timestamps_in_text_files_with_or_without_zone(tmp_path, fmt):
    path = tmp_path / f"t.{fmt}"
    if fmt == "json":
        path.write_text('{"t": "2024-01-01T00:00:00"}\n{"t": "2024-01-01 00:00:01.5"}\n')
    else:
        path.write_text("t\n2024-01-01T00:00:00\n2024-01-01 00:00:01.5\n")
    got = read_data_file(str(path), fmt, pa.schema([("t", TIMESTAMP)]))
    micros = got.column("t").cast(pa.int64()).to_pylist()
    assert micros == [1_704_067_200_000_000, 1_704_067_201_500_000]  # read as UTC
    zoned = tmp_path / f"z.{fmt}"
    zoned.write_text('{"t": "2024-01-01T01:00:00+01:00"}\n' if fmt == "json" else "t\n2024-01-01T01:00:00+01:00\n")
    got = read_data_file(str(zoned), fmt, pa.schema([("t", TIMESTAMP)]))
    assert got.column("t").cast(pa.int64()).to_pylist() == [1_704_067_200_000_000]


# ---- rate schedules: one source whose rate steps -------------------------------------------

STEPS = RateSchedule(((0, 5000), (2, 60_000), (2.5, 90_000), (3.25, 10_000)))


def test_a_rate_schedule_puts_rows_in_its_steps():
    start = 1_000_000
    due = arrival_us(start, STEPS, np.arange(60_000))
    assert (np.diff(due) >= 0).all()
    # 10,000 rows in the first 2 s, 30,000 more in the next 0.5 s, then 90,000 rows/s
    assert due[9_999] < start + 2_000_000 <= due[10_000]
    assert due[39_999] < start + 2_500_000 <= due[40_000]
    assert rows_arrived(start, STEPS, start + 3_000_000) == 40_000 + 45_000 + 1  # row 85,000 is due at 3 s
    assert STEPS.rate_at(2.7) == 90_000 and STEPS.rate_at(99) == 10_000
    # a one-step schedule is a constant rate
    one = RateSchedule(((0, 333.0),))
    rows = np.arange(10_000)
    assert np.abs(arrival_us(start, one, rows) - arrival_us(start, 333.0, rows)).max() <= 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.01, 5.0), st.floats(1.0, 1e6)), min_size=1, max_size=5), st.floats(0, 20.0))
def test_rows_arrived_matches_arrival_times_under_a_schedule(widths_rates, seconds):
    times = np.concatenate([[0.0], np.cumsum([w for w, _ in widths_rates])[:-1]])
    schedule = RateSchedule(tuple(zip(times.tolist(), [r for _, r in widths_rates])))
    start = 7_000_000
    now = start + int(seconds * 1e6)
    k = rows_arrived(start, schedule, now)
    times_us = arrival_us(start, schedule, np.arange(k + 1))
    assert (times_us[:k] <= now).all() and times_us[k] > now


def test_a_schedule_makes_the_same_rows_whatever_the_batches():
    spec = GeneratorSource(fields={"ts": EventTime(), "k": Keys(50)}, rate=[(0, 1000), (1, 50_000)], seed=3)
    assert isinstance(spec.rate, RateSchedule)
    whole = pa.Table.from_batches(spec.generate(0, 40_000, 0))
    parts = pa.Table.from_batches(spec.generate(0, 12_345, 0) + spec.generate(12_345, 40_000, 0))
    assert whole.equals(parts)
    # event time is arrival time: the schedule's, not the first step's spacing
    ts = whole.column("ts").cast(pa.int64()).to_numpy()
    assert np.array_equal(ts, arrival_us(0, spec.rate, np.arange(40_000)))


@pytest.mark.parametrize(
    "rate, words",
    [
        ([], ["no steps"]),
        ([(1, 100)], ["second 0"]),
        ([(0, 100), (0, 200)], ["increase"]),
        ([(0, 100), (1, 0)], ["step 1", "> 0"]),
        ([(0, "fast")], ["step 0", "rate", "finite number"]),
        ("fast", ["rate must be"]),
        ([3, 4], ["(seconds, rows/s) pairs"]),
    ],
)
def test_a_bad_rate_schedule_says_what_is_wrong(rate, words):
    with pytest.raises(SourceError) as e:
        GeneratorSource(fields={"k": Keys(3)}, rate=rate)
    for word in words:
        assert word in str(e.value)
