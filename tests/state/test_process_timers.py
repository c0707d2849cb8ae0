"""Timers in ``process`` (``runtime.kernels.process``) without Spark, against references:
event-time timers ("alert when a meter has sent nothing for 5 minutes"), processing-time
timers deleted before they fire ("close an order if no payment arrives within 30 minutes"),
a timer firing for a key with no new records, and a timer's failure."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pytest
from tests.state.test_state_ttl import drive

from sluice.runtime.kernels.process import EVENT_TIMERS, KeyState, ProcessKernel, to_micros

TS = pa.timestamp("us", tz="UTC")
QUIET = 200  # microseconds of silence before the alert, in these tests' small clock


def silence_after(quiet: int):
    def silence(key, rows, state):
        """Keep one event-time timer per meter, ``quiet`` after its latest reading."""
        latest = int(np.max(rows["ts"].cast(pa.int64()).to_numpy()))
        if state.value is not None:
            if latest + quiet <= state.value:
                return None
            state.delete_event_timer(state.value)
        state.update(latest + quiet)
        state.register_event_timer(latest + quiet)
        return None

    return silence


def alert(key, when, state):
    state.clear()
    return [{"k": key[0], "silent_at": to_micros(when)}]


OUT = pa.schema([("k", pa.string()), ("silent_at", pa.int64())])


def readings(seed: int, n_batches: int) -> list[pa.Table]:
    rng = np.random.default_rng(seed)
    out, base = [], 0
    for _ in range(n_batches):
        n = int(rng.integers(0, 12))
        keys = [f"m{x}" for x in rng.integers(0, 10, n)]
        out.append(pa.table({"k": pa.array(keys, pa.string()), "ts": pa.array(base + rng.integers(0, 100, n), TS)}))
        base += int(rng.integers(0, 150))
    return out


def silence_reference(batches, marks, quiet: int = QUIET):
    """Per batch, the alerts (key, deadline): deadlines due by the batch's watermark fire
    first, then the batch's readings move their meters' deadlines."""
    deadline: dict = {}
    out = []
    for rows, wm in zip(batches, marks):
        fired = sorted((d, k) for k, d in deadline.items() if wm is not None and d <= wm)
        for _, k in fired:
            del deadline[k]
        out.append(sorted((k, d) for d, k in fired))
        latest: dict = {}
        for k, ts in zip(rows["k"].to_pylist(), rows["ts"].cast(pa.int64()).to_pylist()):
            latest[k] = max(latest.get(k, ts), ts)
        for k, ts in latest.items():
            deadline[k] = max(deadline.get(k, ts + quiet), ts + quiet)
    return out, deadline


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_event_time_timers_equal_the_reference(seed):
    batches = readings(seed, 40)
    marks, seen = [], None
    for rows in batches:
        marks.append(seen)
        if rows.num_rows:
            top = int(np.max(rows["ts"].cast(pa.int64()).to_numpy()))
            seen = top if seen is None else max(seen, top)
    kernel = ProcessKernel(["k"], silence_after(QUIET), OUT, on_timer=alert)
    outputs, state = drive(kernel, batches, [(m, 0) for m in marks])
    want, pending = silence_reference(batches, marks)
    assert [sorted((r["k"], r["silent_at"]) for r in o.to_pylist()) for o in outputs] == want
    assert sum(len(w) for w in want) > 20  # alerts fired, also for meters without records in that batch
    assert any(k not in set(batches[b]["k"].to_pylist()) for b, fired in enumerate(want) for k, _ in fired)
    assert {k[0]: row[EVENT_TIMERS] for k, row in state.items()} == {k: [d] for k, d in pending.items()}


def test_deleted_processing_time_timers_never_fire():
    def order(key, rows, state):
        for kind, at in zip(rows["kind"].to_pylist(), rows["at"].to_pylist()):
            if kind == "order":
                state.update(at + 30)
                state.register_processing_timer(at + 30)
            elif state.value is not None:  # paid: the order stays open no longer
                state.delete_processing_timer(state.value)
                state.clear()
        return None

    def close(key, when, state):
        state.clear()
        return [{"k": key[0], "closed_at": to_micros(when)}]

    kernel = ProcessKernel(["k"], order, pa.schema([("k", pa.string()), ("closed_at", pa.int64())]), on_timer=close)
    batches = [
        pa.table({"k": ["a", "b"], "kind": ["order", "order"], "at": [0, 0]}),
        pa.table({"k": ["b"], "kind": ["payment"], "at": [10]}),
        pa.table(
            {"k": [], "kind": [], "at": []}, schema=pa.schema([("k", pa.string()), ("kind", pa.string()), ("at", pa.int64())])
        ),
        pa.table({"k": ["c"], "kind": ["order"], "at": [40]}),
    ]
    outputs, state = drive(kernel, batches, [(None, 0), (None, 20), (None, 30), (None, 50)])
    assert [o.to_pylist() for o in outputs] == [[], [], [{"k": "a", "closed_at": 30}], []]
    assert {k[0] for k in state} == {"c"}  # a closed, b paid: both gone


def test_a_failing_timer_is_a_dead_letter_and_fires_no_more():
    calls = []

    def keep(key, rows, state):
        state.register_event_timer(datetime(1970, 1, 1, 0, 0, 0, 100, tzinfo=UTC))
        return None

    def boom(key, when, state):
        calls.append(when)
        raise ValueError("no")

    kernel = ProcessKernel(["k"], keep, pa.schema([("k", pa.string())]), on_timer=boom)
    empty = pa.table({"k": pa.array([], pa.string())})
    rows = pa.table({"k": ["a"]})
    results = []
    state_table = None
    from sluice.runtime.kernels.keyed import KEY_GROUP, BatchContext

    schema = kernel.state_schema(rows.schema.append(pa.field(KEY_GROUP, pa.int32()))).append(pa.field(KEY_GROUP, pa.int32()))
    state_table = schema.empty_table()
    for b, (batch, wm) in enumerate([(rows, None), (empty, 100), (empty, 200)]):
        batch = batch.append_column(KEY_GROUP, pa.array([0] * batch.num_rows, pa.int32()))
        result = kernel.process(batch, state_table, BatchContext(b, 0, wm, 0))
        results.append(result)
        if result.upserts.num_rows:
            state_table = result.upserts
        elif result.deletes is not None and result.deletes.num_rows:
            state_table = schema.empty_table()
    assert len(calls) == 1 and calls[0] == datetime(1970, 1, 1, 0, 0, 0, 100, tzinfo=UTC)
    assert [d.record for d in results[1].dead_letters] == [{"timer": 100, "domain": "event"}]
    assert results[2].dead_letters == []


def test_timers_need_on_timer():
    with pytest.raises(TypeError, match="on_timer"):
        KeyState().register_event_timer(5)
