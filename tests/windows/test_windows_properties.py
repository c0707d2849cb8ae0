"""Property tests: window kernels equal a brute-force recomputation of every window.

Random streams (several keys, out-of-order event times, nulls), random micro-batch splits,
random sizes, slides, gaps, watermark delays and allowed lateness; tumbling, sliding and
session windows; built-in and user-defined aggregates; one or several queries sharing
panes. Every batch's output and late side output must equal the reference's, and every
record must be accounted for: in the final result of some window, or late.
"""

from __future__ import annotations

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.graph import aggregates as agg
from sluice.graph.windows import EventTime, Session, Sliding, Tumbling, WindowQuery
from sluice.runtime.kernels.windows import window_kernel
from windows_harness import assert_matches_reference, reference, run_kernel, watermarks

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _ids_create():
    return set()


def _ids_add(acc, values):
    acc.update(v for v in values.to_pylist())
    return acc


def _ids_merge(a, b):  # mutates its first argument, as the UDAF contract allows
    a.update(b)
    return a


def _ids_result(acc):
    return sorted(acc)


IDS = agg.udaf("id", _ids_create, _ids_add, _ids_merge, _ids_result, result_type=pa.list_(pa.int64()))
SUM_SQUARES = agg.udaf(
    "x",
    lambda: 0.0,
    lambda acc, values: acc + sum(v * v for v in values.to_pylist() if v is not None),
    lambda a, b: a + b,
    lambda acc: acc,
)

ALL_AGGREGATES = {
    "n": agg.count(),
    "n_v": agg.count("v"),
    "sum_v": agg.sum("v"),
    "min_v": agg.min("v"),
    "max_v": agg.max("v"),
    "mean_x": agg.mean("x"),
    "sum_x": agg.sum("x"),
    "max_x": agg.max("x"),
    "squares": SUM_SQUARES,
    "ids": IDS,
}


@st.composite
def streams(draw, max_records=50):
    """A keyed stream with out-of-order event times, split into micro-batches."""
    n = draw(st.integers(0, max_records))
    n_keys = draw(st.integers(1, 3))
    step = draw(st.integers(0, 3))
    disorder = draw(st.integers(0, 12))
    origin = draw(st.integers(-30, 30))
    records = []
    for i in range(n):
        t = origin + i * step + draw(st.integers(-disorder, disorder))
        if draw(st.integers(0, 30)) == 0:
            t = None
        records.append(
            {
                "id": i,
                "k": draw(st.sampled_from(["a", "b", "c"][:n_keys])),
                "ts": t,
                "v": draw(st.one_of(st.none(), st.integers(-50, 50))),
                "x": draw(st.floats(-100, 100, allow_nan=False, allow_infinity=False, width=32)),
            }
        )
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=6)))
    bounds = [0] + cuts + [n]
    schema = pa.schema([("id", pa.int64()), ("k", pa.string()), ("ts", pa.int64()), ("v", pa.int64()), ("x", pa.float64())])
    batches = [pa.Table.from_pylist(records[a:b], schema=schema) for a, b in zip(bounds, bounds[1:])]
    return batches


def fixed_windows():
    return st.builds(
        lambda unit, a, b, tumbling: Tumbling(unit * a) if tumbling else Sliding(unit * a, unit * min(a, b)),
        st.sampled_from([1, 2, 3]),
        st.integers(1, 6),
        st.integers(1, 6),
        st.booleans(),
    )


def queries_for(draw, window, name=""):
    lateness = draw(st.integers(0, 8))
    mode = draw(st.sampled_from(["append", "append", "update"]))
    names = draw(st.lists(st.sampled_from(sorted(ALL_AGGREGATES)), min_size=1, max_size=4, unique=True))
    aggregates = tuple((n, ALL_AGGREGATES[n]) for n in sorted(set(names) | {"ids"}))
    return WindowQuery(window, aggregates, EventTime("ts"), lateness, mode, name)


def check(queries, batches, delay, map_tasks=None):
    kernel = window_kernel(["k"], queries)
    marks = watermarks(batches, "ts", delay)
    run = run_kernel(kernel, batches, marks, map_tasks=map_tasks)
    assert_matches_reference(run, reference(queries, ["k"], batches, marks))
    assert_accounted(queries, batches, run)
    assert not run.state, "state must be empty once every window has closed"


def assert_accounted(queries, batches, run):
    """Each record is late for a query, or in the last emission of one of its windows."""
    all_ids = {r["id"] for b in batches for r in b.to_pylist()}
    for q in queries:
        final = {}
        for batch in run.batches:
            for row in batch.output.to_pylist():
                if len(queries) == 1 or row["query"] == q.display_name:
                    final[(row["k"], row["window_start"], row["window_end"])] = row["ids"]
        in_windows = set().union(*final.values()) if final else set()
        late = {r["id"] for batch in run.batches for r in batch.late.to_pylist() if r["late_for"] == q.display_name}
        assert not (in_windows & late), f"{q.display_name}: records both late and in a window: {in_windows & late}"
        assert in_windows | late == all_ids, f"{q.display_name}: unaccounted records {all_ids - in_windows - late}"


@SETTINGS
@given(data=st.data(), batches=streams())
def test_fixed_window_matches_reference(data, batches):
    query = queries_for(data.draw, data.draw(fixed_windows()))
    check([query], batches, data.draw(st.integers(0, 6)))


@SETTINGS
@given(data=st.data(), batches=streams())
def test_shared_panes_match_separate_references(data, batches):
    windows = data.draw(st.lists(fixed_windows(), min_size=2, max_size=3))
    queries = [queries_for(data.draw, w, name=f"q{i}") for i, w in enumerate(windows)]
    check(queries, batches, data.draw(st.integers(0, 6)))


@SETTINGS
@given(data=st.data(), batches=streams())
def test_session_window_matches_reference(data, batches):
    query = queries_for(data.draw, Session(data.draw(st.integers(1, 8))))
    check([query], batches, data.draw(st.integers(0, 6)))


@SETTINGS
@given(data=st.data(), batches=streams())
def test_map_side_combine_matches_reference(data, batches):
    """C-MR's Combine on the map side: each batch cut into map tasks whose records are
    pre-aggregated per (key, pane) before the kernel sees them; results are unchanged."""
    windows = data.draw(st.lists(fixed_windows(), min_size=1, max_size=2))
    queries = [queries_for(data.draw, w, name=f"q{i}") for i, w in enumerate(windows)]
    cuts = [data.draw(st.lists(st.integers(0, b.num_rows), max_size=3)) for b in batches]
    check(queries, batches, data.draw(st.integers(0, 6)), map_tasks=cuts)
