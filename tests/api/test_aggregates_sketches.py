"""count_distinct, approx_count_distinct, approx_percentile, first/last and decimal sums,
checked against DuckDB over the same records: exact ones equal, approximate ones within
their stated error, across a restart of the query between batches (the accumulators come
back from the key-group store) and in windows (accumulators per pane, merged)."""

from __future__ import annotations

import decimal

import duckdb
import numpy as np
import pyarrow as pa
import pytest

import sluice
from sluice import agg, testing
from sluice import windows as W
from sluice.errors import PipelineError
from sluice.graph import sketches as sk

SCHEMA = pa.schema(
    [
        ("user", pa.string()),
        ("page", pa.string()),
        ("ms", pa.float64()),
        ("amount", pa.decimal128(12, 2)),
        ("ts", pa.timestamp("us", tz="UTC")),
    ]
)


def make_batches(n_batches: int = 4, rows: int = 3000, seed: int = 7) -> list[pa.Table]:
    rng = np.random.default_rng(seed)
    out = []
    for b in range(n_batches):
        users = rng.choice([f"u{i}" for i in range(4)], rows)
        pages = np.array([f"p{i}" for i in rng.zipf(1.3, rows) % 5000])
        ms = rng.lognormal(3, 1, rows)
        cents = rng.integers(1, 100_000, rows)
        amounts = [decimal.Decimal(int(c)).scaleb(-2) for c in cents]
        ts = (1_767_225_600 + b * 60 + np.sort(rng.uniform(0, 60, rows))) * 1e6
        out.append(
            pa.table(
                [
                    users,
                    pages,
                    ms,
                    pa.array(amounts, pa.decimal128(12, 2)),
                    pa.array(ts.astype(np.int64), pa.timestamp("us", tz="UTC")),
                ],
                schema=SCHEMA,
            )
        )
    return out


def per_user(source: testing.Source, sink: testing.Sink) -> sluice.Pipeline:
    p = sluice.Pipeline("sketches", partitions=2)
    p.source(source.spec, name="clicks").key_by("user").aggregate(
        pages=agg.count_distinct("page"),
        approx_pages=agg.approx_count_distinct("page"),
        p95=agg.approx_percentile("ms", 0.95),
        first_page=agg.first("page"),
        last_page=agg.last("page"),
        revenue=agg.sum("amount"),
        top=agg.max("amount"),
        slowest=agg.arg_max("page", by="ms"),
        fastest=agg.arg_min("page", by="ms"),
        name="per_user",
    ).sink(sink.spec)
    return p


def exact(tables: list[pa.Table]) -> dict[str, tuple]:
    clicks = pa.concat_tables(tables)
    rows = duckdb.sql("""
        SELECT "user", count(DISTINCT page), quantile_disc(ms, 0.95), sum(amount), max(amount), arg_max(page, ms),
               arg_min(page, ms)
        FROM clicks GROUP BY "user" ORDER BY "user" """).fetchall()
    # first and last in arrival order: Arrow's ordered group-by (DuckDB's scan order is its own)
    ends = clicks.group_by("user", use_threads=False).aggregate([("page", "first"), ("page", "last")])
    first_last = {u: (f, la) for u, f, la in zip(*(ends[c].to_pylist() for c in ("user", "page_first", "page_last")))}
    return {r[0]: (r[1], r[2], *first_last[r[0]], r[3], r[4], r[5], r[6]) for r in rows}


@pytest.mark.spark
def test_keyed_sketches_match_duckdb_across_a_restart(tmp_path):
    batches = make_batches()
    source, sink = testing.Source(batches), testing.Sink()
    checkpoint = str(tmp_path / "ckpt")
    seen: list[int] = []
    assert testing.run(per_user(source, sink), source, checkpoint, batches=2, on_batch=lambda i, out: seen.append(i)) == 2
    # the restart: a new pipeline object on the same checkpoint, the state read back from the store
    assert testing.run(per_user(source, sink), source, checkpoint) == 2
    assert seen == [0, 1]
    got = {row["user"]: row for row in sink.latest(keys="user")}
    expected = exact(batches)
    assert sorted(got) == sorted(expected)
    for user, (pages, p95, first_page, last_page, revenue, top, slowest, fastest) in expected.items():
        row = got[user]
        assert row["pages"] == pages
        assert abs(row["approx_pages"] - pages) <= 3 * 1.04 / 64 * pages  # 3 standard errors at precision 12
        assert abs(row["p95"] - p95) <= 0.01 * p95 + 1e-9  # DDSketch's relative accuracy
        assert (row["first_page"], row["last_page"]) == (first_page, last_page)
        assert row["revenue"] == revenue and isinstance(row["revenue"], decimal.Decimal)  # exact cents
        assert row["top"] == top
        assert (row["slowest"], row["fastest"]) == (slowest, fastest)
    assert sink.table().schema.field("revenue").type == pa.decimal128(38, 2)


@pytest.mark.spark
def test_window_sketches_merge_panes_like_duckdb(tmp_path):
    batches = make_batches(n_batches=3, rows=2000, seed=11)
    source, sink = testing.Source(batches, event_time="ts"), testing.Sink()
    p = sluice.Pipeline("window_sketches", partitions=2)
    p.source(source.spec).key_by("user").window(W.sliding("2m", "1m")).aggregate(
        pages=agg.count_distinct("page"),
        approx_pages=agg.approx_count_distinct("page"),
        p50=agg.approx_percentile("ms", 0.5),
        slowest=agg.arg_max("page", by="ms"),
        name="w",
    ).sink(sink.spec)
    testing.run(p, source, str(tmp_path / "ckpt"))
    clicks = pa.concat_tables(batches)  # noqa: F841 (read by DuckDB by name)
    expected = duckdb.sql("""
        WITH w AS (SELECT unnest(generate_series(time_bucket(INTERVAL 1 MINUTE, ts) - INTERVAL 1 MINUTE,
                                                 time_bucket(INTERVAL 1 MINUTE, ts), INTERVAL 1 MINUTE)) AS start, *
                   FROM clicks)
        SELECT "user", start, count(DISTINCT page), quantile_disc(ms, 0.5), arg_max(page, ms) FROM w GROUP BY ALL
    """).fetchall()
    got = {(r["user"], r["window_start"].timestamp()): r for r in sink.rows()}
    assert got, "no window was emitted"
    checked = 0
    for user, start, pages, p50, slowest in expected:
        row = got.get((user, start.timestamp()))
        if row is None:
            continue  # a window still open at the end (the watermark never passed it)
        checked += 1
        assert row["pages"] == pages
        assert abs(row["approx_pages"] - pages) <= 3 * 1.04 / 64 * pages
        assert abs(row["p50"] - p50) <= 0.01 * p50 + 1e-9
        assert row["slowest"] == slowest
    assert checked >= 4


def test_sketches_merge_as_one_sketch_of_all_values():
    rng = np.random.default_rng(3)
    values = rng.lognormal(0, 2, 50_000)
    parts = np.array_split(values, 7)
    whole = sk.ddsketch_add(sk.DDSketch(), pa.array(values))
    merged = sk.DDSketch()
    for part in parts:
        merged = sk.ddsketch_merge(merged, sk.ddsketch_add(sk.DDSketch(), pa.array(part)))
    assert merged == whole
    for q in (0.0, 0.5, 0.9, 0.99, 1.0):
        exact_value = np.sort(values)[max(int(np.ceil(q * len(values))) - 1, 0)]  # percentile_disc's rank
        assert abs(sk.ddsketch_quantile(whole, q) - exact_value) <= 0.01 * exact_value
    hll = sk.HyperLogLog()
    strings = pa.array([f"user-{i}" for i in range(100_000)])
    for chunk in range(10):
        hll = sk.hll_merge(hll, sk.hll_add(sk.HyperLogLog(), strings.slice(chunk * 10_000, 10_000)))
    assert abs(sk.hll_result(hll) - 100_000) <= 3 * 1.04 / 64 * 100_000
    assert sk.hll_result(sk.hll_add(sk.HyperLogLog(), pa.array([1, 2, 2, 3, None]))) == 3  # small: linear counting


def test_type_names_are_accepted_and_bad_ones_named_at_definition():
    spread = agg.udaf("ms", create=list, add=lambda acc, v: acc, merge=lambda a, b: a, result=len, result_type="int")
    assert spread.result_type == pa.int64()
    with pytest.raises(PipelineError) as err:
        agg.udaf("ms", create=list, add=lambda acc, v: acc, merge=lambda a, b: a, result=len, result_type="integr")
    assert "agg.udaf over 'ms' at test_aggregates_sketches.py:" in str(err.value)
    assert "unknown type 'integr'" in str(err.value)
    with pytest.raises(PipelineError, match="q must be between 0 and 1"):
        agg.approx_percentile("ms", 95)
    p = sluice.Pipeline("bad")
    src = p.source(testing.Source([[{"user": "a", "page": "x"}]]).spec)
    src.key_by("user").aggregate(p=agg.approx_percentile("page", 0.5), name="pct").sink(testing.Sink().spec)
    with pytest.raises(PipelineError, match="approx_percentile needs a numeric column, 'page' is string"):
        p.graph.validate()
    p = sluice.Pipeline("bad_by")
    src = p.source(testing.Source([[{"user": "a", "page": "x"}]]).spec)
    src.key_by("user").aggregate(top=agg.arg_max("page", by="ms"), name="top").sink(testing.Sink().spec)
    with pytest.raises(PipelineError, match="aggregate 'top': arg_max by unknown column 'ms'; available: \\['user', 'page'\\]"):
        p.graph.validate()


@pytest.mark.spark
def test_keyed_sketches_survive_key_group_moves(tmp_path):
    """Between batches the key groups move to other partitions (a rescale from 2 to 3
    partitions, every key group's owner shuffled): each key's accumulator follows its key
    group through the store and the results still equal DuckDB's."""
    from sluice.runtime.checkpoint import Checkpoint
    from sluice.runtime.planlog import PlanLog

    batches = make_batches(n_batches=4, rows=1500, seed=5)
    source, sink = testing.Source(batches), testing.Sink()
    checkpoint = str(tmp_path / "ckpt")
    testing.run(per_user(source, sink), source, checkpoint, batches=2)
    log = PlanLog(Checkpoint(checkpoint))
    plan = log.latest()
    (op,) = plan.keyed
    moved = [(kg * 7 + 1) % 3 for kg in range(plan.max_parallelism)]  # most key groups change partition
    assert sum(a != b for a, b in zip(moved, plan.keyed[op].routing)) > plan.max_parallelism // 2
    log.write(plan.with_routing(max(Checkpoint(checkpoint).done_batches()) + 1, op, moved, partitions=3))
    testing.run(per_user(source, sink), source, checkpoint)
    got = {row["user"]: row for row in sink.latest(keys="user")}
    for user, (pages, p95, first_page, last_page, revenue, top, slowest, fastest) in exact(batches).items():
        row = got[user]
        assert row["pages"] == pages and row["revenue"] == revenue and row["top"] == top
        assert abs(row["approx_pages"] - pages) <= 3 * 1.04 / 64 * pages
        assert abs(row["p95"] - p95) <= 0.01 * p95 + 1e-9
        assert (row["first_page"], row["last_page"], row["slowest"], row["fastest"]) == (first_page, last_page, slowest, fastest)
