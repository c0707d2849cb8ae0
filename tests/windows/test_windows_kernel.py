"""Worked examples for the window kernels (C-MR windows, panes, lateness, modes, state)."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pytest

from sluice.errors import PipelineError, SchemaError
from sluice.graph import aggregates as agg
from sluice.graph.windows import (
    EventTime,
    ProcessingTime,
    Session,
    Sliding,
    Tumbling,
    WindowQuery,
    pane_length,
    session,
    sliding,
    tumbling,
    window_query,
)
from sluice.runtime.kernels.keyed import KEY_GROUP, BatchContext
from sluice.runtime.kernels.panes import PaneTable, sliding_udaf
from sluice.runtime.kernels.windows import LATE, WindowAggregateKernel, window_kernel
from windows_harness import assert_matches_reference, reference, run_kernel, watermarks

S = 1_000_000  # microseconds per second


def q(window, time="ts", lateness=0, mode="append", name="", **aggregates):
    aggregates = aggregates or {"n": agg.count(), "total": agg.sum("v")}
    return WindowQuery(window, tuple(aggregates.items()), EventTime(time) if time else ProcessingTime(), lateness, mode, name)


def table(**columns):
    return pa.table(columns)


def rows_of(run):
    return [[{k: v for k, v in r.items()} for r in b.output.to_pylist()] for b in run.batches]


# ---------------------------------------------------------------------------------------
# C-MR's sliding window of size 4, slide 1: panes of length 1


def test_cmr_sliding_window_size_4_slide_1_over_panes_of_1():
    query = q(Sliding(4, 1))
    kernel = window_kernel(["k"], [query])
    assert kernel.pane == 1
    # one record per time unit 0..7 with value t; watermark = max earlier time (no delay)
    batches = [
        table(k=["m"] * 2, ts=[0, 1], v=[0, 1]),
        table(k=["m"] * 3, ts=[2, 3, 4], v=[2, 3, 4]),
        table(k=["m"] * 3, ts=[5, 6, 7], v=[5, 6, 7]),
    ]
    marks = watermarks(batches, "ts", 0)
    assert marks == [None, 1, 4, 2**62]
    run = run_kernel(kernel, batches, marks)
    out = rows_of(run)
    assert out[0] == []
    # watermark 1: the windows ending at 1 ([-3,1): {0}) have fired
    assert [(r["window_start"], r["window_end"], r["n"], r["total"]) for r in out[1]] == [(-3, 1, 1, 0)]
    # watermark 4: windows ending at 2, 3, 4: [-2,2) {0,1}, [-1,3) {0,1,2}, [0,4) {0,1,2,3}
    assert [(r["window_start"], r["n"], r["total"]) for r in out[2]] == [(-2, 2, 1), (-1, 3, 3), (0, 4, 6)]
    # end of input: every remaining window; each of size 4 sums 4 consecutive values
    assert [(r["window_start"], r["n"], r["total"]) for r in out[3]] == [
        (1, 4, 10),
        (2, 4, 14),
        (3, 4, 18),
        (4, 4, 22),
        (5, 3, 18),
        (6, 2, 13),
        (7, 1, 7),
    ]
    assert run.state == {}  # every pane evicted once no open window needs it


def test_each_record_updates_one_pane_and_panes_are_evicted():
    kernel = window_kernel(["k"], [q(Sliding(4, 2))])
    assert kernel.pane == 2
    rows = table(k=["a"] * 4, ts=[0, 1, 2, 5], v=[1, 1, 1, 1], **{KEY_GROUP: pa.array([3] * 4, pa.int32())})
    state_schema = kernel.state_schema(rows.schema).append(pa.field(KEY_GROUP, pa.int32()))
    result = kernel.process(rows, state_schema.empty_table(), BatchContext(0, 0, None))
    state = result.upserts.to_pylist()
    assert len(state) == 1
    assert state[0]["__pane"] == [0, 1, 2]  # times 0,1 -> pane 0; 2 -> pane 1; 5 -> pane 2
    assert state[0]["__p:rows"] == [2, 1, 1]
    assert state[0][KEY_GROUP] == 3
    # watermark 6 closes every window ending at or before 6: panes 0 and 1 are no longer needed
    result = kernel.process(rows.slice(0, 0), result.upserts, BatchContext(1, 0, 6))
    assert [(r["window_start"], r["n"]) for r in result.output.to_pylist()] == [(-2, 2), (0, 3), (2, 2)]
    assert result.upserts.to_pylist()[0]["__pane"] == [2]
    # watermark 8 closes the last window [4, 8): the key has no state left
    result = kernel.process(rows.slice(0, 0), result.upserts, BatchContext(2, 0, 8))
    assert [(r["window_start"], r["n"]) for r in result.output.to_pylist()] == [(4, 1)]
    assert result.deletes.to_pylist() == [{"k": "a", KEY_GROUP: 3}]


def test_pane_length_is_gcd_over_all_sizes_and_slides():
    assert pane_length([q(Sliding(60, 15)), q(Sliding(40, 10))]) == 5
    assert pane_length([q(Tumbling(6)), q(Sliding(9, 3))]) == 3


# ---------------------------------------------------------------------------------------
# lateness, late side output, output modes


def test_late_record_goes_to_side_output_and_is_counted():
    kernel = window_kernel(["k"], [q(Tumbling(10))])
    batches = [table(k=["a"], ts=[25], v=[1]), table(k=["a", "a"], ts=[3, 27], v=[5, 2])]
    marks = watermarks(batches, "ts", 0)  # watermark of batch 1 is 25: window [0,10) closed
    run = run_kernel(kernel, batches, marks)
    late = run.batches[1].late.to_pylist()
    assert late == [{"k": "a", "ts": 3, "v": 5, "late_for": "tumbling(10us)", "watermark": 25}]
    assert [(r["window_start"], r["total"]) for r in run.batches[2].output.to_pylist()] == [(20, 3)]


def test_allowed_lateness_updates_a_fired_window():
    query = q(Tumbling(10), lateness=10)
    kernel = window_kernel(["k"], [query])
    batches = [
        table(k=["a"], ts=[5], v=[1]),
        table(k=["a"], ts=[12], v=[1]),
        table(k=["a"], ts=[13], v=[1]),
        table(k=["a"], ts=[8], v=[4]),
        table(k=["a"], ts=[30], v=[1]),
        table(k=["a"], ts=[9], v=[100]),
    ]
    marks = watermarks(batches, "ts", 0)
    run = run_kernel(kernel, batches, marks)
    out = rows_of(run)
    assert marks[:6] == [None, 5, 12, 13, 13, 30]
    assert [(r["window_start"], r["total"]) for r in out[2]] == [(0, 1)]  # on time, at watermark 12
    assert [(r["window_start"], r["total"]) for r in out[3]] == [(0, 5)]  # late firing: 8 was within lateness
    # at watermark 30 window [0,10) is closed (10 + 10 <= 30): the record at 9 is late
    assert run.batches[5].late.num_rows == 1
    assert_matches_reference(run, reference([query], ["k"], batches, marks))


def test_update_mode_emits_early_results_every_batch():
    query = q(Tumbling(10), mode="update")
    kernel = window_kernel(["k"], [query])
    batches = [table(k=["a"], ts=[1], v=[1]), table(k=["a"], ts=[2], v=[2]), table(k=["a"], ts=[3], v=[3])]
    run = run_kernel(kernel, batches, watermarks(batches, "ts", 0))
    assert [[r["total"] for r in b] for b in rows_of(run)] == [[1], [3], [6], []]


def test_processing_time_windows_fire_on_batch_time():
    query = q(Tumbling(10 * S), time=None)
    kernel = window_kernel(["k"], [query])
    batches = [table(k=["a", "b"], v=[1, 2]), table(k=["a"], v=[3]), table(k=["a"], v=[4])]
    pts = [1 * S, 5 * S, 12 * S, 25 * S]
    run = run_kernel(kernel, batches, [None] * 4, processing_times=pts)
    out = rows_of(run)
    assert out[0] == out[1] == []
    first = datetime(1970, 1, 1, tzinfo=UTC)
    assert sorted((r["k"], r["total"]) for r in out[2]) == [("a", 4), ("b", 2)]
    assert out[2][0]["window_start"] == first
    assert [(r["k"], r["total"]) for r in out[3]] == [("a", 4)]
    assert all(b.late.num_rows == 0 for b in run.batches)


def test_timestamp_column_and_string_durations():
    query = window_query(sliding("10s", "5s"), {"n": agg.count(), "avg": agg.mean("v")}, time="ts")
    kernel = window_kernel(["k"], [query])
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    ts = pa.array([t0.timestamp() * 1000 + d for d in (0, 3000, 7000)], pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
    batches = [pa.table({"k": ["a"] * 3, "ts": ts, "v": [1.0, 2.0, 6.0]})]
    run = run_kernel(kernel, batches, [None, 2**62])
    out = run.batches[1].output
    assert out.schema.field("window_start").type == pa.timestamp("us", tz="UTC")
    got = [(r["window_start"], r["n"], r["avg"]) for r in out.to_pylist()]
    assert got == [
        (datetime(2025, 12, 31, 23, 59, 55, tzinfo=UTC), 2, 1.5),
        (t0, 3, 3.0),
        (datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC), 1, 6.0),
    ]


# ---------------------------------------------------------------------------------------
# shared panes, keys, aggregates, state


def test_three_queries_share_one_set_of_panes():
    queries = [q(Tumbling(60), name="1m"), q(Sliding(60, 15), name="1m/15s"), q(Sliding(30, 10), name="30s/10s")]
    kernel = window_kernel(["k"], queries)
    assert kernel.pane == 5
    rng = np.random.default_rng(7)
    ts = np.sort(rng.integers(0, 300, 200))
    batches = [
        table(k=rng.choice(["a", "b"], 50).tolist(), ts=ts[i : i + 50].tolist(), v=list(range(50))) for i in range(0, 200, 50)
    ]
    marks = watermarks(batches, "ts", 20)
    run = run_kernel(kernel, batches, marks)
    assert_matches_reference(run, reference(queries, ["k"], batches, marks))
    assert {r["query"] for b in run.batches for r in b.output.to_pylist()} == {"1m", "1m/15s", "30s/10s"}


def test_per_query_aggregates_leave_other_columns_null():
    queries = [q(Tumbling(10), name="counts", n=agg.count()), q(Tumbling(10), name="maxima", top=agg.max("v"))]
    kernel = window_kernel(["k"], queries)
    run = run_kernel(kernel, [table(k=["a"], ts=[1], v=[7])], [None, 2**62])
    assert sorted(run.batches[1].output.to_pylist(), key=lambda r: r["query"]) == [
        {"query": "counts", "k": "a", "window_start": 0, "window_end": 10, "n": 1, "top": None},
        {"query": "maxima", "k": "a", "window_start": 0, "window_end": 10, "n": None, "top": 7},
    ]


def test_multi_column_and_global_keys():
    query = q(Tumbling(10))
    batches = [table(city=["x", "x", "y", None], meter=[1, 2, 1, 1], ts=[1, 2, 3, 4], v=[1, 2, 3, 4])]
    run = run_kernel(window_kernel(["city", "meter"], [query]), batches, [None, 2**62])
    got = sorted((r["city"] or "", r["meter"], r["total"]) for r in run.batches[1].output.to_pylist())
    assert got == [("", 1, 4), ("x", 1, 1), ("x", 2, 2), ("y", 1, 3)]
    run = run_kernel(window_kernel([], [query]), batches, [None, 2**62])
    assert run.batches[1].output.to_pylist() == [{"window_start": 0, "window_end": 10, "n": 4, "total": 10}]


def test_min_max_and_nulls():
    query = q(Tumbling(10), lo=agg.min("v"), hi=agg.max("v"), n=agg.count("v"), total=agg.sum("v"), avg=agg.mean("v"))
    batches = [table(k=["a", "a", "b"], ts=[1, 2, 3], v=pa.array([None, 4, None], pa.int64()))]
    run = run_kernel(window_kernel(["k"], [query]), batches, [None, 2**62])
    got = {r["k"]: r for r in run.batches[1].output.to_pylist()}
    assert (got["a"]["lo"], got["a"]["hi"], got["a"]["n"], got["a"]["total"], got["a"]["avg"]) == (4, 4, 1, 4, 4.0)
    assert (got["b"]["lo"], got["b"]["hi"], got["b"]["n"], got["b"]["total"], got["b"]["avg"]) == (None, None, 0, None, None)


def test_udaf_state_is_pickled_binary_and_add_gets_arrays():
    seen_types = []

    def add(acc, values):
        seen_types.append(type(values))
        return acc + pa.compute.sum(values).as_py()

    median_like = agg.udaf("v", lambda: 0, add, lambda a, b: a + b, float)
    kernel = window_kernel(["k"], [q(Sliding(4, 2), s=median_like)])
    rows = table(k=["a"] * 3, ts=[0, 1, 2], v=[1, 2, 3], **{KEY_GROUP: pa.array([0] * 3, pa.int32())})
    state_schema = kernel.state_schema(rows.schema)
    assert state_schema.field("__p:udaf:0:v").type == pa.list_(pa.binary())
    result = kernel.process(rows, state_schema.append(pa.field(KEY_GROUP, pa.int32())).empty_table(), BatchContext(0, 0, None))
    accs = [pickle.loads(b) for b in result.upserts.to_pylist()[0]["__p:udaf:0:v"]]
    assert accs == [3, 3]  # one add per (key, pane) group: {1, 2} and {3}
    assert all(issubclass(t, pa.Array) for t in seen_types) and len(seen_types) == 2


def test_two_stacks_merges_each_pane_a_constant_number_of_times():
    merges = []

    def merge(a, b):
        merges.append(1)
        return a + b

    udaf = agg.udaf("v", lambda: 0, lambda a, v: a, merge, lambda a: a)
    n = 200
    table_ = PaneTable(np.zeros(n, np.int64), np.arange(n), {"u": np.array([pickle.dumps(i) for i in range(n)], dtype=object)})
    size = 60
    lo = np.arange(0, n - size + 1)
    hi = lo + size
    results = sliding_udaf(table_, "u", udaf, lo, hi)
    assert results == [sum(range(a, a + size)) for a in lo]
    assert len(merges) <= 6 * n  # versus size * windows = 8,460 for the naive combine


def test_state_of_untouched_keys_is_not_rewritten():
    kernel = window_kernel(["k"], [q(Tumbling(100))])
    rows = table(k=["a", "b"], ts=[1, 2], v=[1, 1], **{KEY_GROUP: pa.array([0, 0], pa.int32())})
    state_schema = kernel.state_schema(rows.schema).append(pa.field(KEY_GROUP, pa.int32()))
    first = kernel.process(rows, state_schema.empty_table(), BatchContext(0, 0, None))
    second = kernel.process(rows.slice(0, 0), first.upserts, BatchContext(1, 0, 50))
    assert second.upserts.num_rows == 0 and second.output.num_rows == 0 and second.deletes is None


def test_session_windows_merge_and_report_late():
    query = q(Session(5), lateness=15)
    kernel = window_kernel(["k"], [query])
    batches = [
        table(k=["a", "a", "a"], ts=[0, 3, 20], v=[1, 1, 1]),
        table(k=["a", "a"], ts=[6, 40], v=[1, 1]),
        table(k=["a"], ts=[1], v=[9]),
    ]
    marks = watermarks(batches, "ts", 0)
    run = run_kernel(kernel, batches, marks)
    out = rows_of(run)
    # batch 1 (watermark 20): [0,8) is still open (lateness 15); 6 joins it -> [0,11), due: emitted
    assert [(r["window_start"], r["window_end"], r["n"]) for r in out[1]] == [(0, 11, 3)]
    # batch 2 (watermark 40): [20,25) fires as it closes; the record at 1 is late
    assert [(r["window_start"], r["window_end"]) for r in out[2]] == [(20, 25)]
    assert run.batches[2].late.to_pylist()[0]["ts"] == 1
    assert [(r["window_start"], r["window_end"]) for r in out[3]] == [(40, 45)]
    assert_matches_reference(run, reference([query], ["k"], batches, marks))


# ---------------------------------------------------------------------------------------
# validation


def test_durations_and_validation():
    assert tumbling("15m").size == 15 * 60 * S
    assert sliding("1h30m", 90).slide == 90 * S
    assert session("500ms").gap == 500_000
    assert window_query(tumbling(1), {"n": "count"}, allowed_lateness="2s").allowed_lateness == 2 * S
    with pytest.raises(PipelineError, match="unknown time unit"):
        tumbling("15 fortnights")
    with pytest.raises(PipelineError, match="must be > 0"):
        tumbling(0)
    with pytest.raises(PipelineError, match="must not exceed size"):
        sliding("1m", "2m")
    with pytest.raises(PipelineError, match="output mode"):
        window_query(tumbling(1), {"n": "count"}, mode="complete")
    with pytest.raises(PipelineError, match="at least one aggregate"):
        window_query(tumbling(1), {})
    with pytest.raises(PipelineError, match="cannot share"):
        window_kernel(["k"], [q(Session(3), name="s"), q(Tumbling(3), name="t")])
    with pytest.raises(PipelineError, match="distinct names"):
        window_kernel(["k"], [q(Tumbling(3)), q(Tumbling(3))])
    with pytest.raises(PipelineError, match="one time domain"):
        window_kernel(["k"], [q(Tumbling(3), name="a"), q(Tumbling(3), time=None, name="b")])
    kernel = WindowAggregateKernel(["k"], [q(Tumbling(3), s=agg.sum("name"))])
    with pytest.raises(SchemaError, match="not supported"):
        kernel.state_schema(pa.schema([("k", pa.string()), ("ts", pa.int64()), ("name", pa.string())]))
    with pytest.raises(SchemaError, match="event-time column"):
        kernel.output_schema(pa.schema([("k", pa.string()), ("ts", pa.string()), ("name", pa.int64())]))
    assert LATE == "late"
