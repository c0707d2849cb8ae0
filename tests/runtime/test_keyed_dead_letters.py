"""A keyed user function that raises: the record goes to the dead-letter sink with the error,
operator, key and batch id, the key's state stays as documented, and the job goes on.

- ``reduce``: the record that raised is a dead letter; the fold goes on from the accumulated
  record as it was before it (the key's other records of the batch are applied).
- ``process`` and a UDAF (``add`` or ``result``): the call for the key's records of the batch
  is the unit; they are all dead letters, the key emits nothing and keeps its state from
  before the batch.
- a window's UDAF: ``add`` on the records of one (key, pane) of a map task is the unit; they
  are all dead letters and count in no window.

The kernels are checked on their own, then one pipeline on local Spark, stopped after its
first batch or two and restarted: output rows plus dead letters account for every input record, and no
dead letter is lost or repeated.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sluice
from sluice import agg, sinks, sources
from sluice import windows as W
from sluice.graph.windows import EventTime
from sluice.runtime.kernels.aggregate import AggregateKernel
from sluice.runtime.kernels.keyed import KEY_GROUP, BatchContext
from sluice.runtime.kernels.process import ProcessKernel
from sluice.runtime.kernels.reduce import ReduceKernel
from sluice.runtime.kernels.windows import WindowAggregateKernel
from sluice.runtime.side_outputs import DEAD_LETTER, read_side_output
from sluice.runtime.sinks import clear_memory, memory_batches, memory_table

ROWS, PER_BATCH = 600, 200
START_US, STEP_US = 1_700_000_000_000_000, 10_000  # 100 records a second: six 1 s windows
KEYS = ["a", "b", "c", "ü", None]


def poisoned(record_id: int) -> bool:
    return record_id % 97 == 13


def _input() -> pa.Table:
    rng = np.random.default_rng(5)
    return pa.table(
        {
            "id": pa.array(np.arange(ROWS), pa.int64()),
            "k": pa.array([KEYS[i] for i in rng.integers(0, len(KEYS), ROWS)], pa.string()),
            "v": pa.array(rng.integers(1, 50, ROWS), pa.int64()),
            "ts": pa.array(START_US + np.arange(ROWS) * STEP_US, pa.timestamp("us", tz="UTC")),
        }
    )


def add_v(acc: dict, record: dict) -> dict:
    if poisoned(record["id"]):
        acc["v"] = -1_000_000  # a change to the dict it got must not leak into the state
        raise ValueError(f"poisoned record {record['id']}")
    return dict(acc, v=acc["v"] + record["v"])


def count_seen(key, rows: pa.Table, state):
    ids = rows["id"].to_pylist()
    if any(poisoned(i) for i in ids):
        raise ValueError("poisoned batch")
    seen = state.value or 0
    state.update(seen + len(ids))
    return [{"k": key[0], "id": i, "seen": seen + n + 1} for n, i in enumerate(ids)]


def fragile_sum():
    def add(acc, values):
        values = values.to_pylist()
        if any(poisoned(i) for i in values):
            raise ValueError("poisoned values")
        return acc + sum(values)

    return agg.udaf("id", create=lambda: 0, add=add, merge=lambda a, b: a + b, result=lambda acc: acc)


# ---- the reference: the documented rules, record by record -----------------------------------


def reference(rows: list[dict]) -> dict:
    """Final state per key of each operator and the ids of its dead letters."""
    reduced, reduce_dead = {}, []
    for r in rows:
        acc = reduced.get(r["k"])
        if acc is None:
            reduced[r["k"]] = r["v"]  # the first record of a key is the accumulator: no call
        elif poisoned(r["id"]):
            reduce_dead.append(r["id"])
        else:
            reduced[r["k"]] = acc + r["v"]
    seen, sums, counts, batch_dead = Counter(), Counter(), Counter(), []
    for start in range(0, len(rows), PER_BATCH):
        by_key = {}
        for r in rows[start : start + PER_BATCH]:
            by_key.setdefault(r["k"], []).append(r["id"])
        for key, ids in by_key.items():
            if any(poisoned(i) for i in ids):
                batch_dead += ids
            else:
                seen[key] += len(ids)
                sums[key] += sum(ids)
                counts[key] += len(ids)
    return {
        "reduce": (reduced, sorted(reduce_dead)),
        "process": (dict(seen), sorted(batch_dead)),
        "udaf": ({k: (counts[k], sums[k]) for k in counts}, sorted(batch_dead)),
    }


# ---- kernels on their own ------------------------------------------------------------------


def _run(kernel, rows: pa.Table, keys: list[str]):
    """Feed the batches to ``kernel`` with the state it committed (one key group)."""
    from sluice.runtime.state.format import build_state_table, merge_latest

    rows = rows.append_column(KEY_GROUP, pa.array(np.zeros(rows.num_rows, np.int32)))
    state, outputs, dead = None, [], []
    for b, start in enumerate(range(0, rows.num_rows, PER_BATCH)):
        schema = kernel.state_schema(rows.schema).append(pa.field(KEY_GROUP, pa.int32()))
        current = state.select(schema.names) if state is not None else schema.empty_table()
        result = kernel.process(rows.slice(start, PER_BATCH), current, BatchContext(b, 0))
        committed = [] if state is None else [build_state_table(state, None, keys, "test")]
        state = merge_latest(committed + [build_state_table(result.upserts, result.deletes, keys, "test")], keys)
        outputs.append(result.output)
        dead += result.dead_letters
    return state, pa.concat_tables(outputs), dead


def test_reduce_skips_the_record_that_raised_and_applies_the_others():
    table = _input()
    want, want_dead = reference(table.to_pylist())["reduce"]
    state, _, dead = _run(ReduceKernel(["k"], add_v), table.select(["k", "id", "v"]), ["k"])
    assert dict(zip(state["k"].to_pylist(), state["v"].to_pylist())) == want
    assert sorted(d.record["id"] for d in dead) == want_dead and want_dead
    assert all(isinstance(d.error, ValueError) and "poisoned record" in str(d.error) for d in dead)
    assert all(d.key == (d.record["k"],) for d in dead)


def test_process_and_udaf_reject_the_keys_batch_as_a_whole():
    table = _input()
    ref = reference(table.to_pylist())
    schema = pa.schema([("k", pa.string()), ("id", pa.int64()), ("seen", pa.int64())])
    _, output, dead = _run(ProcessKernel(["k"], count_seen, schema), table, ["k"])
    want, want_dead = ref["process"]
    assert sorted(d.record["id"] for d in dead) == want_dead and want_dead
    assert output.num_rows + len(dead) == table.num_rows
    final = {}
    for row in output.to_pylist():
        final[row["k"]] = row["seen"]
    assert final == want

    state, output, dead = _run(AggregateKernel(["k"], {"n": agg.count(), "s": fragile_sum()}), table, ["k"])
    want, want_dead = ref["udaf"]
    assert sorted(d.record["id"] for d in dead) == want_dead
    final = {row["k"]: (row["n"], row["s"]) for row in output.to_pylist()}
    assert final == want


def test_window_udaf_rejects_the_records_of_one_key_and_pane():
    table = _input()
    query = W.query(W.tumbling("1s"), name="w", n=agg.count(), s=fragile_sum())
    kernel = WindowAggregateKernel(["k"], [dataclasses.replace(query, time=EventTime("ts"))])
    kernel.bind(table.schema)
    combined, late, dead = kernel.combine(table, BatchContext(0, 0, None, 0))
    assert late.num_rows == 0
    window_of = {r["id"]: (r["k"], r["id"] * STEP_US // 1_000_000) for r in table.to_pylist()}
    rejected = {window_of[i] for i in range(ROWS) if poisoned(i)}
    assert sorted(d.record["id"] for d in dead) == sorted(i for i in range(ROWS) if window_of[i] in rejected)
    assert all(d.key == (d.record["k"],) and "poisoned values" in str(d.error) for d in dead)
    assert combined.num_rows == len(set(window_of.values()) - rejected)  # one row per other (key, pane)


# ---- on Spark, with a restart ----------------------------------------------------------------


def build(path: str) -> sluice.Pipeline:
    p = sluice.Pipeline("keyed_dead_letters", partitions=2)
    p.dead_letter(sinks.memory("kdl_dead"))
    s = p.source(sources.ReplaySource(path, format="parquet", event_time="ts", max_rows_per_batch=PER_BATCH), name="rows")
    keyed = s.key_by("k")
    keyed.reduce(add_v, name="reduce_v").sink(sinks.memory("kdl_reduce"))
    keyed.process(count_seen, schema={"k": "string", "id": "int64", "seen": "int64"}, name="process_seen").sink(
        sinks.memory("kdl_process")
    )
    keyed.aggregate(n=agg.count(), s=fragile_sum(), name="udaf_sum").sink(sinks.memory("kdl_udaf"))
    keyed.window(W.tumbling("1s")).aggregate(n=agg.count(), s=fragile_sum(), name="window_udaf").sink(sinks.memory("kdl_window"))
    return p


@pytest.mark.spark
@pytest.mark.slow
def test_keyed_dead_letters_on_spark_across_a_restart(spark, tmp_path):
    clear_memory()
    table = _input()
    path = str(tmp_path / "rows.parquet")
    pq.write_table(table, path)
    checkpoint = str(tmp_path / "checkpoint")
    # stopped after its first batch (the one running then finishes: 1 or 2 of the 3 data
    # batches), well before the source is exhausted, then restarted
    first = build(path).run(checkpoint, spark=spark, stop_when=lambda executor: executor.batches_done >= 1)
    assert first.batches in (1, 2)
    build(path).run(checkpoint, spark=spark)  # restarted from the checkpoint
    ref = reference(table.to_pylist())

    dead = read_side_output(checkpoint, DEAD_LETTER)
    by_op = {}
    for d in dead:
        record = json.loads(d["record"])
        assert json.loads(d["key"]) == [record["k"]]
        assert d["batch_id"] == record["id"] // PER_BATCH  # the batch the record came in
        assert "test_keyed_dead_letters.py" in d["location"] and "ValueError: poisoned" in d["error"]
        by_op.setdefault(d["operator"], []).append(record["id"])
    # each dead letter once, none lost, none repeated by the restart
    window_dead = by_op.pop("window_udaf")
    assert {op: sorted(ids) for op, ids in by_op.items()} == {
        "reduce_v": ref["reduce"][1],
        "process_seen": ref["process"][1],
        "udaf_sum": ref["udaf"][1],
    }
    # a window's UDAF rejects the records of a (key, pane) of a map task with a poisoned one
    window_of = {r["id"]: (r["k"], (r["id"] * STEP_US) // 1_000_000) for r in table.to_pylist()}
    poisoned_windows = {window_of[i] for i in range(ROWS) if poisoned(i)}
    assert len(set(window_dead)) == len(window_dead)
    assert {i for i in range(ROWS) if poisoned(i)} <= set(window_dead)
    assert all(window_of[i] in poisoned_windows for i in window_dead)
    want = {}
    for i in set(range(ROWS)) - set(window_dead):
        n, total = want.get(window_of[i], (0, 0))
        want[window_of[i]] = (n + 1, total + i)
    windows = memory_table("kdl_window").to_pylist()
    got = {(w["k"], (int(w["window_start"].timestamp() * 1e6) - START_US) // 1_000_000): (w["n"], w["s"]) for w in windows}
    assert len(got) == len(windows) and got == want
    assert sum(n for n, _ in got.values()) + len(window_dead) == ROWS  # output + dead letters = input
    assert memory_table("kdl_dead").num_rows == len(dead)

    process_out = memory_table("kdl_process")
    assert process_out.num_rows + len(ref["process"][1]) == ROWS  # output + dead letters = input
    assert sorted(process_out["id"].to_pylist() + ref["process"][1]) == list(range(ROWS))

    def final(sink: str) -> dict:
        out = {}
        for _b, batch in sorted(memory_batches(sink).items()):
            for row in batch.to_pylist():
                out[row["k"]] = row
        return out

    assert {k: row["v"] for k, row in final("kdl_reduce").items()} == ref["reduce"][0]
    assert {k: row["seen"] for k, row in final("kdl_process").items()} == ref["process"][0]
    assert {k: (row["n"], row["s"]) for k, row in final("kdl_udaf").items()} == ref["udaf"][0]


def test_session_udaf_rejects_the_new_records_of_its_session():
    """Sessions (gap 0.5 s over records 10 ms apart: one session per key and run of its
    records): a session whose UDAF raises on its new records rejects them all; the key's
    other sessions, and later batches, go on as if they had never arrived."""
    table = _input()
    query = W.query(W.session("500ms"), name="s", n=agg.count(), s=fragile_sum())
    from sluice.runtime.kernels.sessions import SessionWindowKernel

    kernel = SessionWindowKernel(["k"], dataclasses.replace(query, time=EventTime("ts")))
    rows = table.append_column(KEY_GROUP, pa.array(np.zeros(table.num_rows, np.int32)))
    schema = kernel.state_schema(rows.schema).append(pa.field(KEY_GROUP, pa.int32()))
    result = kernel.process(rows.slice(0, PER_BATCH), schema.empty_table(), BatchContext(0, 0, None, 0))
    first = rows.slice(0, PER_BATCH).to_pylist()
    # records 10 ms apart, five keys: every key's records of the batch form one open session
    poisoned_keys = {r["k"] for r in first if poisoned(r["id"])}
    assert poisoned_keys
    want_dead = sorted(r["id"] for r in first if r["k"] in poisoned_keys)
    assert sorted(d.record["id"] for d in result.dead_letters) == want_dead
    assert all("poisoned values" in str(d.error) and d.key == (d.record["k"],) for d in result.dead_letters)
    # the state holds the sessions of the other keys only, as if the rejected records never came
    clean = kernel.process(
        rows.slice(0, PER_BATCH).filter(pa.array([r["k"] not in poisoned_keys for r in first])),
        schema.empty_table(),
        BatchContext(0, 0, None, 0),
    )
    assert result.upserts.equals(clean.upserts)
