"""State TTL (``runtime.kernels.ttl``) without Spark, against a reference that applies the
rule record by record: a key written at t (the batch's watermark, or its processing time)
lives while now < t + ttl; an expired key's next record starts it fresh."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from sluice import agg
from sluice.errors import PipelineError
from sluice.graph.ttl import StateTTL, parse_ttl
from sluice.graph.windows import EventTime, Tumbling, WindowQuery
from sluice.runtime.kernels.aggregate import AggregateKernel
from sluice.runtime.kernels.keyed import KEY_GROUP, BatchContext, KeyedKernel
from sluice.runtime.kernels.process import ProcessKernel
from sluice.runtime.kernels.ttl import STAMP, TTLKernel
from sluice.runtime.kernels.windows import WindowAggregateKernel


def drive(kernel: KeyedKernel, batches: list[pa.Table], clocks: list[tuple[int | None, int]]):
    """Run ``kernel`` as the runtime does, keeping its state in a dict by key; returns the
    output of every batch and the final state. ``clocks``: (watermark, processing time)."""
    state: dict = {}
    outputs = []
    schema = batches[0].schema
    kg_schema = schema.append(pa.field(KEY_GROUP, pa.int32()))
    state_schema = kernel.state_schema(kg_schema).append(pa.field(KEY_GROUP, pa.int32()))
    for b, (rows, (wm, pt)) in enumerate(zip(batches, clocks)):
        rows = rows.append_column(KEY_GROUP, pa.array(np.asarray([hash(k) % 4 for k in rows["k"].to_pylist()], np.int32)))
        table = pa.Table.from_pylist(list(state.values()), schema=state_schema)
        result = kernel.process(rows, table, BatchContext(b, 0, wm, pt))
        if result.deletes is not None:
            for row in result.deletes.to_pylist():
                state.pop(tuple(row[c] for c in kernel.key_columns), None)
        for row in result.upserts.to_pylist():
            state[tuple(row[c] for c in kernel.key_columns)] = row
        outputs.append(result.output)
    return outputs, state


def reference_counts(batches: list[pa.Table], nows: list[int | None], ttl: int):
    """Per batch, the running (count, sum) of each key it touched; and the final stamps."""
    live: dict = {}  # key -> [count, sum, stamp]
    out = []
    for rows, now in zip(batches, nows):
        for key in list(live):
            stamp = live[key][2]
            if now is not None and stamp is not None and stamp + ttl <= now:
                del live[key]
            elif now is not None and stamp is None:
                live[key][2] = now
        touched = {}
        for k, v in zip(rows["k"].to_pylist(), rows["v"].to_pylist()):
            entry = live.setdefault(k, [0, 0, now])
            entry[0] += 1
            entry[1] += v
            entry[2] = now
            touched[k] = (entry[0], entry[1])
        out.append(touched)
    return out, {k: e[2] for k, e in live.items()}


def random_batches(seed: int, n_batches: int, keys: int) -> list[pa.Table]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_batches):
        n = int(rng.integers(0, 30))
        out.append(
            pa.table(
                {
                    "k": pa.array([f"k{i}" for i in rng.integers(0, keys, n)], pa.string()),
                    "v": pa.array(rng.integers(0, 100, n), pa.int64()),
                }
            )
        )
    return out


def _counts(output: pa.Table) -> dict:
    return {r["k"]: (r["n"], r["s"]) for r in output.to_pylist()}


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("time", ["event", "processing"])
def test_running_aggregate_with_ttl_equals_the_reference(seed, time):
    ttl = 50
    batches = random_batches(seed, 40, 12)
    rng = np.random.default_rng(seed + 100)
    steps = np.cumsum(rng.integers(0, 30, len(batches)))  # the clock stands still now and then
    # event time: no watermark in the first two batches
    clocks = [(None if time == "event" and b < 2 else int(t), int(t) * 2) for b, t in enumerate(steps)]
    nows = [wm if time == "event" else pt for wm, pt in clocks]
    kernel = TTLKernel(AggregateKernel(["k"], {"n": agg.count(), "s": agg.sum("v")}), StateTTL(ttl, time))
    outputs, state = drive(kernel, batches, clocks)
    want, stamps = reference_counts(batches, nows, ttl)
    assert [_counts(o) for o in outputs] == want
    assert {k[0]: row[STAMP] for k, row in state.items()} == stamps


def test_expiry_is_exact_at_the_boundary():
    kernel = TTLKernel(AggregateKernel(["k"], {"n": agg.count(), "s": agg.sum("v")}), StateTTL(50))
    one = pa.table({"k": ["a"], "v": [1]})
    none = one.slice(0, 0)
    # written at watermark 100: alive at 149, gone at 150 (its next record starts at 1)
    outputs, state = drive(kernel, [one, none, one], [(100, 0), (149, 0), (149, 0)])
    assert _counts(outputs[2]) == {"a": (2, 2)}
    outputs, state = drive(kernel, [one, none, one], [(100, 0), (150, 0), (150, 0)])
    assert _counts(outputs[2]) == {"a": (1, 1)}
    outputs, state = drive(kernel, [one, none], [(100, 0), (150, 0)])
    assert state == {}  # gone from the store, not only ignored


def test_state_stays_bounded_over_an_unbounded_key_space():
    kernel = TTLKernel(AggregateKernel(["k"], {"n": agg.count(), "s": agg.sum("v")}), StateTTL(10))
    batches = [pa.table({"k": [f"u{b}-{i}" for i in range(20)], "v": list(range(20))}) for b in range(60)]
    _, state = drive(kernel, batches, [(b * 5, 0) for b in range(60)])
    assert len(state) == 2 * 20  # keys of the last two batches: those written less than 10 ago


def test_process_state_expires():
    def count(key, rows, state):
        state.update((state.value or 0) + rows.num_rows)
        return [{"k": key[0], "n": state.value}]

    kernel = TTLKernel(
        ProcessKernel(["k"], count, pa.schema([("k", pa.string()), ("n", pa.int64())])), StateTTL(10, "processing")
    )
    one = pa.table({"k": ["a"], "v": [1]})
    outputs, state = drive(kernel, [one, one, one, one], [(None, 0), (None, 9), (None, 19), (None, 20)])
    assert [o.to_pylist()[0]["n"] for o in outputs] == [1, 2, 1, 2]  # 9 -> 19 is 10: expired


def test_open_windows_expire_without_records():
    """A window kept open an hour after its end (allowed lateness) is dropped once its key
    sent nothing for the TTL; writes by time alone (the window's first firing) do not renew it."""
    query = WindowQuery(Tumbling(10), (("n", agg.count()),), EventTime("ts"), allowed_lateness=3600, mode="append")
    kernel = TTLKernel(WindowAggregateKernel(["k"], [query]), StateTTL(100))
    ts = pa.timestamp("us", tz="UTC")

    def batch(keys, times):
        return pa.table({"k": pa.array(keys, pa.string()), "ts": pa.array(times, ts)})

    batches = [batch(["a", "b"], [1, 2]), batch([], []), batch(["b"], [60]), batch([], []), batch([], [])]
    clocks = [(None, 0), (20, 0), (90, 0), (101, 0), (161, 0)]
    outputs, state = drive(kernel, batches, clocks)
    assert sorted(r["k"] for r in outputs[1].to_pylist()) == ["a", "b"]  # both windows fired at 20
    # a was written by a record at watermark 20 (stamped when the first watermark came): gone at 120
    assert {k[0] for k in state} == {"b"}  # b's record at watermark 90 keeps it until 190
    stamps = {k[0]: row[STAMP] for k, row in state.items()}
    assert stamps == {"b": 90}


def test_parse_ttl():
    assert parse_ttl("1d") == StateTTL(86_400_000_000, "event")
    assert parse_ttl(None) is None
    assert parse_ttl(30, "processing") == StateTTL(30_000_000, "processing")
    with pytest.raises(PipelineError, match="ttl_time"):
        parse_ttl("1h", "wall")
    with pytest.raises(PipelineError, match="ttl"):
        parse_ttl("-1h")
