"""The state reader over a key-group store written directly (no Spark): only batches with a
done record are read, deletions remove keys, timers come back as timestamps, and a batch whose
history was collected is refused naming the batches kept."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pyarrow as pa
import pytest

import sluice
from sluice.core.checkpoint import Checkpoint
from sluice.errors import StateError
from sluice.runtime.kernels.process import EVENT_TIMERS, PROCESSING_TIMERS
from sluice.runtime.state import KEY_GROUP, KeyGroupStore

T0 = 1_700_000_000_000_000  # microseconds


def state_rows(keys: list[str], values: list[bytes], timers: list[list[int]]) -> pa.Table:
    return pa.table(
        {
            KEY_GROUP: pa.array([hash(k) % 4 for k in keys], pa.int32()),
            "user": keys,
            "__state": pa.array(values, pa.binary()),
            EVENT_TIMERS: pa.array(timers, pa.list_(pa.int64())),
            PROCESSING_TIMERS: pa.array([[] for _ in keys], pa.list_(pa.int64())),
        }
    )


@pytest.fixture
def checkpoint(tmp_path):
    ckpt = Checkpoint(str(tmp_path / "ckpt"))
    ckpt.write_json(
        "pipeline.json",
        {
            "format": 1,
            "max_parallelism": 4,
            "operators": {"sessions": {"kind": "process", "name": "sessions", "keys": ["user string"]}},
        },
    )
    store = KeyGroupStore(ckpt.uri, "sessions", ["user"])
    batches = [  # (upserts, deletes) per batch
        (state_rows(["a", "b"], [b"1", b"2"], [[T0], []]), None),
        (state_rows(["a", "c"], [b"10", b"3"], [[T0, T0 + 5], [T0 + 9]]), None),
        (None, pa.table({KEY_GROUP: pa.array([hash("b") % 4], pa.int32()), "user": ["b"]})),
        (state_rows(["d"], [b"4"], [[]]), None),
    ]
    for batch_id, (upserts, deletes) in enumerate(batches):
        store.commit(batch_id, [store.write_delta(batch_id, 0, upserts, deletes)])
        if batch_id < 3:  # batch 3's state is committed, its done record not written (yet)
            ckpt.write_json(Checkpoint.batch_record(batch_id, "done"), {})
    return ckpt


def as_dict(table: pa.Table) -> dict:
    return {r["user"]: (r["__state"], r[EVENT_TIMERS]) for r in table.to_pylist()}


def at(us: int) -> datetime:
    return datetime.fromtimestamp(us / 1e6, UTC)


def test_the_last_done_batch_is_read_not_a_commit_without_its_done_record(checkpoint):
    state = sluice.state.read(checkpoint.uri)  # the only stateful operator
    assert state.schema.field(EVENT_TIMERS).type == pa.list_(pa.timestamp("us", tz="UTC"))
    assert as_dict(state) == {"a": (b"10", [at(T0), at(T0 + 5)]), "c": (b"3", [at(T0 + 9)])}
    assert as_dict(sluice.state.read(checkpoint.uri, "sessions", batch=0)) == {"a": (b"1", [at(T0)]), "b": (b"2", [])}
    with pytest.raises(StateError, match="batch 3 is not a committed batch.*committed batches: 0-2"):
        sluice.state.read(checkpoint.uri, batch=3)


def test_a_batch_whose_history_was_collected_is_refused_naming_the_kept_ones(checkpoint):
    store = KeyGroupStore(checkpoint.uri, "sessions", ["user"])
    store.compact(1)
    store.gc(before_batch=3)
    assert sluice.state.kept_batches(checkpoint.uri) == [1, 2]
    assert as_dict(sluice.state.read(checkpoint.uri, batch=1))["b"] == (b"2", [])
    with pytest.raises(StateError, match=r"batch 0 is no longer kept.*kept: 1-2"):
        sluice.state.read(checkpoint.uri, batch=0)


def test_a_directory_without_a_pipeline_record_is_named(tmp_path):
    with pytest.raises(StateError, match="pipeline.json is missing"):
        sluice.state.read(str(tmp_path))
    (tmp_path / "pipeline.json").write_text(json.dumps({"operators": {}}))
    with pytest.raises(StateError, match="holds the state of 0 operators"):
        sluice.state.read(str(tmp_path))
