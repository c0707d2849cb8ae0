"""Initial state from a table (``aggregate(..., initial_state=)``, ``process(...,
initial_state=)``): seeded once into the key-group store, under each key's key group, before
the first batch; applied exactly once across a SIGKILL inside that batch. Store-level tests
first (no Spark), then a crash test on local Spark against a reference."""

from __future__ import annotations

import os
import pickle

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tests import crash_harness as harness
from tests.crash_harness import done_batches, kill_when, state_written
from tests.pipelines import initial_state as pipeline_file

import sluice
from sluice import agg, sinks, sources
from sluice.errors import PipelineError
from sluice.runtime.kernels.factory import keyed_kernel
from sluice.runtime.state.format import KEY_GROUP
from sluice.runtime.state.initial import state_rows
from sluice.runtime.state.store import KeyGroupStore


def seeded_store(tmp_path) -> KeyGroupStore:
    store = KeyGroupStore(str(tmp_path), "counts", ["k"])
    table = pa.table({KEY_GROUP: pa.array([3, 1, 3], pa.int32()), "k": ["a", "b", "c"], "n": [5, 6, 7]})
    assert store.write_initial(table) is not None
    return store


def test_the_initial_state_is_the_base_of_every_index_until_a_snapshot(tmp_path):
    store = seeded_store(tmp_path)
    index = store.index(before_batch=0)
    assert index.key_groups_with_state() == [1, 3]
    assert store.read(index, [3]).select(["k", "n"]).to_pylist() == [{"k": "a", "n": 5}, {"k": "c", "n": 7}]
    # never written twice: a restart with another table changes nothing
    assert store.write_initial(pa.table({KEY_GROUP: pa.array([1], pa.int32()), "k": ["b"], "n": [0]})) is None
    # batch 0 changes a, batch 1 deletes c; the initial rows under them still count
    delta = store.write_delta(0, 0, pa.table({KEY_GROUP: pa.array([3], pa.int32()), "k": ["a"], "n": [8]}), None)
    store.commit(0, [delta])
    gone = store.write_delta(1, 0, None, pa.table({KEY_GROUP: pa.array([3], pa.int32()), "k": ["c"]}))
    store.commit(1, [gone])
    latest = store.read(store.index(before_batch=2), [1, 3])
    assert sorted(latest.select(["k", "n"]).to_pylist(), key=lambda r: r["k"]) == [{"k": "a", "n": 8}, {"k": "b", "n": 6}]
    # a snapshot holds it from then on, and gc removes it
    store.compact(1)
    removed = store.gc()
    assert "initial.json" in removed and "initial" in removed
    after = store.read(store.index(before_batch=2), [1, 3])
    assert sorted(after.select(["k", "n"]).to_pylist(), key=lambda r: r["k"]) == [{"k": "a", "n": 8}, {"k": "b", "n": 6}]
    assert store.write_initial(pa.table({KEY_GROUP: pa.array([1], pa.int32()), "k": ["b"], "n": [0]})) is None


def graph_op(initial, kind="aggregate", **kw):
    p = sluice.Pipeline("initial")
    keyed = p.source(sources.generator(fields={"k": sources.Keys(5, prefix="u"), "v": sources.Sequence()}), name="raw").key_by(
        "k"
    )
    if kind == "aggregate":
        out = keyed.aggregate(n=agg.count(), m=agg.mean("v"), initial_state=initial, name="op")
    else:
        out = keyed.process(lambda k, r, s: None, initial_state=initial, name="op", **kw)
    out.sink(sinks.memory("initial"))
    p.graph.validate()
    in_schema = p.graph[out.op.inputs[0]].schema
    return out.op, keyed_kernel(out.op, [in_schema]), in_schema


def test_tables_are_checked_and_converted_to_state_rows(tmp_path):
    good = pa.table({"k": ["u1", "u2"], "n": [3, 4], "m__sum": [6.0, 8.0], "m__count": [3, 4]})
    op, kernel, schema = graph_op(good)
    rows = state_rows(op, kernel, schema)
    assert rows.column_names == ["k", "n", "m__sum", "m__count"] and rows.column("n").type == pa.int64()
    path = str(tmp_path / "init.parquet")
    pq.write_table(good, path)
    op, kernel, schema = graph_op(path)  # a Parquet path, and a DataFrame, read the same
    assert state_rows(op, kernel, schema).equals(rows)
    op, kernel, schema = graph_op(good.to_pandas())
    assert state_rows(op, kernel, schema).equals(rows)
    for table, message in [
        (good.drop_columns(["m__count"]), r"lacks the aggregate state column\(s\) \['m__count'\]"),
        (good.append_column("extra", pa.array([1, 2])), r"column\(s\) \['extra'\] the operator's state lacks"),
        (good.drop_columns(["k"]), r"lacks the key column\(s\) \['k'\]"),
        (pa.concat_tables([good, good]), "more than one row for key {'k': 'u1'}"),
        (good.set_column(1, "n", pa.array(["x", "y"])), "column 'n' is string, the state needs int64"),
    ]:
        op, kernel, schema = graph_op(table)
        with pytest.raises(PipelineError, match=message):
            state_rows(op, kernel, schema)
    # process: typed fields (one left out is null), or each row's other columns pickled
    op, kernel, schema = graph_op(pa.table({"k": ["u1"], "seen": [2]}), "process", state_schema={"seen": "int", "note": "string"})
    assert state_rows(op, kernel, schema).to_pylist() == [{"k": "u1", "seen": 2, "note": None}]
    op, kernel, schema = graph_op(pa.table({"k": ["u1"], "seen": [2]}), "process")
    assert pickle.loads(state_rows(op, kernel, schema).column("__state")[0].as_py()) == {"seen": 2}


# ---- on Spark: primed counts, a SIGKILL inside the first batch, a restart ------------------


def initial_table() -> pa.Table:
    """Some users the stream has (u0..u199) and some it never sees (x0..x49)."""
    keys = [f"u{i}" for i in range(200)] + [f"x{i}" for i in range(50)]
    return pa.table({"k": keys, "n": [i % 7 + 1 for i in range(250)], "s": [1000 * i for i in range(250)]})


def read_counts(checkpoint: str) -> dict:
    return {r["k"]: (r["n"], r["s"]) for r in sluice.state.read(checkpoint, "counts").to_pylist()}


@pytest.mark.spark
@pytest.mark.slow
def test_primed_counts_are_applied_exactly_once_across_a_crash_in_the_first_batch(spark, tmp_path):
    # the reference: the stream alone, no initial state
    reference_out = str(tmp_path / "reference")
    pipeline_file.build(reference_out, None).run(os.path.join(reference_out, "ckpt"), spark=spark)
    stream = read_counts(os.path.join(reference_out, "ckpt"))
    assert len(stream) == 300 and sum(n for n, _ in stream.values()) == pipeline_file.ROWS

    initial = initial_table()
    path = str(tmp_path / "backfill.parquet")
    pq.write_table(initial, path)
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "ckpt")
    env = {"SLUICE_TEST_OUT": out, "SLUICE_TEST_INITIAL": path}
    proc = harness.launch(pipeline_file.__file__, checkpoint, dict(env, SLUICE_TEST_SLOW="3"))
    kill_when(proc, lambda: state_written(checkpoint, 0) and 0 not in done_batches(checkpoint))
    assert 0 not in done_batches(checkpoint)  # killed inside the first batch, its state written
    proc = harness.launch(pipeline_file.__file__, checkpoint, env)
    assert proc.wait(timeout=400) == 0

    want = dict(stream)
    for r in initial.to_pylist():
        n, s = want.get(r["k"], (0, 0))
        want[r["k"]] = (n + r["n"], s + r["s"])
    assert read_counts(checkpoint) == want
    # the sink's latest row per key agrees (keys the stream never saw emit nothing)
    sink = harness.batch_rows(out, "counts")
    latest = {}
    for b in sorted(sink):
        for row in sink[b]:
            record = dict(row)
            latest[record["k"]] = (record["n"], record["s"])
    assert latest == {k: v for k, v in want.items() if k in stream}
