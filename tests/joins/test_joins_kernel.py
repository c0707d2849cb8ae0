"""The join kernels against brute-force joins: random streams, out of order within the
watermark's delay (and beyond it: late records), every join type, NULL, NaN and unicode keys.
Pure: no Spark."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.joins_harness import as_multiset, reference_join, run_join, side_watermarks

from sluice.errors import SchemaError
from sluice.graph.joins import LEFT, RIGHT, JoinSides, StreamJoin, TableLookup
from sluice.graph.windows import Sliding, Tumbling
from sluice.runtime.kernels.joins import StreamJoinKernel, TableLookupKernel, matching_pairs

LEFT_SCHEMA = pa.schema([("k", pa.string()), ("t", pa.int64()), ("v", pa.int64())])
RIGHT_SCHEMA = pa.schema([("key", pa.string()), ("t", pa.int64()), ("w", pa.int64())])
KEYS = st.sampled_from([None, "a", "b", "ü", "日本", "", "a\u0301", "🦆"])
HOWS = ("inner", "left", "right", "outer")


def sides(**kw) -> JoinSides:
    return JoinSides(("k",), ("key",), "t", "t", **kw)


@st.composite
def streams(draw, delay: int, beyond: bool):
    """Batches of (left records, right records); event times out of order by at most
    ``delay`` per side (``beyond``: some records later than that, which are late)."""
    n_batches = draw(st.integers(1, 5))
    base = [0, 0]
    out = []
    serial = 0
    for _ in range(n_batches):
        pair = ([], [])
        for side in (LEFT, RIGHT):
            for _ in range(draw(st.integers(0, 6))):
                base[side] += draw(st.integers(0, 7))
                jitter = draw(st.integers(-delay, 0))
                if beyond and draw(st.booleans()):
                    jitter -= draw(st.integers(0, 30))
                t = base[side] + jitter
                if draw(st.integers(0, 20)) == 0:
                    t = None
                serial += 1
                name = ("k", "v") if side == LEFT else ("key", "w")
                pair[side].append({name[0]: draw(KEYS), "t": t, name[1]: serial})
        out.append(pair)
    return out


def check(spec: StreamJoin, batches, delay: int, expect_no_late: bool):
    kernel = StreamJoinKernel(spec, LEFT_SCHEMA, RIGHT_SCHEMA)
    marks = side_watermarks(batches, "t", delay)
    tables = [
        (pa.Table.from_pylist(left, schema=LEFT_SCHEMA), pa.Table.from_pylist(right, schema=RIGHT_SCHEMA))
        for left, right in batches
    ]
    run = run_join(kernel, tables, marks)
    names = kernel.out_schema.names
    lp = [f.name for f in spec.sides.payload(LEFT, LEFT_SCHEMA)]
    rp = [f.name for f in spec.sides.payload(RIGHT, RIGHT_SCHEMA)]
    expected, n_late = reference_join(spec, batches, marks, lp, rp, names)
    assert as_multiset(run.output, names) == expected
    assert len(run.late) == n_late
    assert run.state == {}  # the end of input evicts every entry
    if expect_no_late:  # only records without an event time are late
        assert n_late == sum(r["t"] is None for pair in batches for side in pair for r in side)


FAST = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(streams(delay=6, beyond=False), st.sampled_from(HOWS), st.integers(1, 12), st.integers(1, 12))
def test_window_join_equals_brute_force(batches, how, size, slide):
    slide = min(size, slide)
    check(StreamJoin(sides(), how, window=Sliding(size, slide)), batches, 6, expect_no_late=True)


@FAST
@given(streams(delay=6, beyond=False), st.sampled_from(HOWS), st.integers(-10, 5), st.integers(0, 10))
def test_interval_join_equals_brute_force(batches, how, lower, width):
    check(StreamJoin(sides(), how, between=(lower, lower + width)), batches, 6, expect_no_late=True)


@FAST
@given(streams(delay=3, beyond=True), st.sampled_from(HOWS), st.booleans(), st.integers(0, 5))
def test_late_records_go_to_late_output(batches, how, windowed, lateness):
    spec = (
        StreamJoin(sides(), how, window=Tumbling(5), allowed_lateness=lateness)
        if windowed
        else StreamJoin(sides(), how, between=(-4, 2), allowed_lateness=lateness)
    )
    check(spec, batches, 3, expect_no_late=False)


def test_float_keys_nan_and_negative_zero_match_null_never():
    schema_l = pa.schema([("k", pa.float64()), ("t", pa.int64()), ("v", pa.int64())])
    schema_r = pa.schema([("key", pa.float64()), ("t", pa.int64()), ("w", pa.int64())])
    spec = StreamJoin(sides(), "outer", window=Tumbling(10))
    kernel = StreamJoinKernel(spec, schema_l, schema_r)
    left = pa.Table.from_pylist(
        [{"k": float("nan"), "t": 1, "v": 1}, {"k": -0.0, "t": 2, "v": 2}, {"k": None, "t": 3, "v": 3}], schema=schema_l
    )
    right = pa.Table.from_pylist(
        [{"key": float("nan"), "t": 4, "w": 10}, {"key": 0.0, "t": 5, "w": 20}, {"key": None, "t": 6, "w": 30}], schema=schema_r
    )
    run = run_join(kernel, [(left, right)], [None])
    pairs = sorted((r["v"], r["w"]) for r in run.output if r["v"] is not None and r["w"] is not None)
    assert pairs == [(1, 10), (2, 20)]
    # the NULL keys are two unmatched rows, one per side
    assert sorted(((r["v"], r["w"]) for r in run.output if r["k"] is None), key=repr) == [(3, None), (None, 30)]


def test_inner_matches_are_emitted_when_both_sides_are_present():
    spec = StreamJoin(sides(), "inner", window=Tumbling(100))
    kernel = StreamJoinKernel(spec, LEFT_SCHEMA, RIGHT_SCHEMA)
    b1 = (pa.Table.from_pylist([{"k": "a", "t": 1, "v": 1}], schema=LEFT_SCHEMA), RIGHT_SCHEMA.empty_table())
    b2 = (LEFT_SCHEMA.empty_table(), pa.Table.from_pylist([{"key": "a", "t": 2, "w": 2}], schema=RIGHT_SCHEMA))
    run = run_join(kernel, [b1], [None], flush=False)
    assert run.output == [] and len(run.state) == 1
    run2 = run_join(kernel, [b1, b2], [None, None], state={}, flush=False)
    assert [(r["v"], r["w"]) for r in run2.output] == [(1, 2)]  # in batch 2, before the window closes


def test_clashing_columns_get_suffixes_or_fail():
    left = pa.schema([("k", pa.string()), ("t", pa.int64()), ("x", pa.int64())])
    right = pa.schema([("k", pa.string()), ("t", pa.int64()), ("x", pa.string())])
    spec = StreamJoin(JoinSides(("k",), ("k",), "t", "t"), "inner", between=(0, 1))
    assert spec.output_schema(left, right).names == ["k", "t_left", "x_left", "t_right", "x_right"]
    bad = StreamJoin(JoinSides(("k",), ("k",), "t", "t", suffixes=("", "")), "inner", between=(0, 1))
    with pytest.raises(SchemaError, match="would appear twice"):
        bad.output_schema(left, right)
    wrong_type = pa.schema([("k", pa.int64()), ("t", pa.int64())])
    with pytest.raises(SchemaError, match="same type"):
        spec.output_schema(left, wrong_type)
    with pytest.raises(SchemaError, match="exactly one"):
        StreamJoin(JoinSides(("k",), ("k",), "t", "t"), "inner")
    with pytest.raises(SchemaError, match="how must be"):
        StreamJoin(JoinSides(("k",), ("k",), "t", "t"), "cross", between=(0, 1))


def test_matching_pairs_ranges():
    li, ri = matching_pairs(np.array([0, 0, 1]), np.array([10, 20, 10]), np.array([0, 0, 1, 1]), np.array([9, 15, 10, 30]), -1, 5)
    assert sorted(zip(li.tolist(), ri.tolist())) == [(0, 0), (0, 1), (2, 2)]


# ---- table lookups ---------------------------------------------------------------------------
STREAM = pa.schema([("k", pa.string()), ("amount", pa.int64())])
TABLE = pa.schema([("k", pa.string()), ("seq", pa.int64()), ("name", pa.string()), ("gone", pa.bool_())])


@st.composite
def changelogs(draw):
    batches = []
    seq = 0
    for _ in range(draw(st.integers(1, 5))):
        table, stream = [], []
        for _ in range(draw(st.integers(0, 5))):
            seq += draw(st.integers(-3, 4))  # versions may come out of order
            table.append(
                {
                    "k": draw(KEYS),
                    "seq": seq,
                    "name": draw(st.text(max_size=3)),
                    "gone": draw(st.booleans()) and draw(st.booleans()),
                }
            )
        for _ in range(draw(st.integers(0, 5))):
            stream.append({"k": draw(KEYS), "amount": draw(st.integers(0, 99))})
        batches.append((stream, table))
    return batches


@FAST
@given(changelogs(), st.sampled_from(("inner", "left")))
def test_lookup_equals_reference(batches, how):
    spec = TableLookup(JoinSides(("k",), ("k",)), version="seq", how=how, deleted="gone")
    kernel = TableLookupKernel(spec, STREAM, TABLE)
    tables = [(pa.Table.from_pylist(s, schema=STREAM), pa.Table.from_pylist(t, schema=TABLE)) for s, t in batches]
    run = run_join(kernel, tables, [None] * len(tables), flush=False)
    table: dict = {}  # key -> (seq, row): the newest version wins, ties to the later row
    expected = []
    for stream, changes in batches:
        for row in changes:
            if row["k"] is None:
                continue
            if row["k"] not in table or row["seq"] >= table[row["k"]][0]:
                table[row["k"]] = (row["seq"], row)
        for r in stream:
            hit = table.get(r["k"]) if r["k"] is not None else None
            hit = None if hit is None or hit[1]["gone"] else hit[1]
            if hit is None and how == "inner":
                continue
            expected.append((r["k"], r["amount"], None if hit is None else hit["seq"], None if hit is None else hit["name"]))
    got = [(r["k"], r["amount"], r["seq"], r["name"]) for r in run.output]
    assert sorted(got, key=repr) == sorted(expected, key=repr)
    assert set(run.state) == {(k,) for k in table}  # deleted keys as tombstones
