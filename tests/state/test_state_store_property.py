"""Property: any sequence of batches, crashes, replays, compactions, gcs and driver restarts
leaves the key-group store equal to a plain dict that applied the committed batches."""

from __future__ import annotations

import tempfile

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.runtime.state import FILE_CACHE, KeyGroupStore

K = 4
KEYS = list(range(12))
PARTITIONS = 3
SCHEMA = pa.schema([("key", pa.int64()), ("v", pa.int64())])

# a change of one key: an int is an upsert to that value, None a deletion
changes = st.dictionaries(st.sampled_from(KEYS), st.one_of(st.none(), st.integers(-5, 5)), max_size=8)
routing = st.lists(st.integers(0, PARTITIONS - 1), min_size=K, max_size=K)  # kg -> partition
step = st.fixed_dictionaries(
    {
        "changes": changes,
        "routing": routing,
        "crash": st.one_of(st.none(), changes),  # a crashed attempt first, with other content
        "replay_last": st.booleans(),  # re-run and re-commit the previous batch instead
        "compact": st.booleans(),
        "gc": st.booleans(),
        "restart": st.booleans(),  # a new driver: a fresh store object on the same directory
        "cold": st.booleans(),  # drop the executors' cache
    }
)


def write_batch(store: KeyGroupStore, batch: int, change: dict, route: list[int], commit: bool):
    files = []
    for p in range(PARTITIONS):
        mine = {k: v for k, v in change.items() if route[k % K] == p}
        ups = {k: v for k, v in mine.items() if v is not None}
        dels = [k for k, v in mine.items() if v is None]
        up = pa.table(
            {
                "__kg": pa.array([k % K for k in ups], pa.int32()),
                "key": pa.array(list(ups), pa.int64()),
                "v": pa.array(list(ups.values()), pa.int64()),
            }
        )
        de = pa.table({"__kg": pa.array([k % K for k in dels], pa.int32()), "key": pa.array(dels, pa.int64())})
        files.append(store.write_delta(batch, p, up, de))
    if commit:
        store.commit(batch, files)


def apply(model: dict, change: dict) -> dict:
    out = dict(model)
    for k, v in change.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def state_of(store: KeyGroupStore, before: int) -> dict:
    table = store.read(store.index(before), range(K), schema=SCHEMA)
    d = table.to_pydict()
    assert len(set(d["key"])) == len(d["key"])
    return dict(zip(d["key"], d["v"]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(step, min_size=1, max_size=8))
def test_store_equals_a_dict_model(steps):
    FILE_CACHE.clear()
    with tempfile.TemporaryDirectory() as root:
        store = KeyGroupStore(root, "op", ["key"], snapshot_target_bytes=1500)
        models = [{}]  # models[b] = state visible to batch b (after batches < b)
        floor = -1  # batches <= floor were collected by gc
        for s in steps:
            if s["replay_last"] and len(models) > 1 and len(models) - 2 > floor:
                batch = len(models) - 2
                models.pop()
            else:
                batch = len(models) - 1
            if s["crash"] is not None:
                write_batch(store, batch, s["crash"], list(reversed(s["routing"])), commit=False)
            write_batch(store, batch, s["changes"], s["routing"], commit=True)
            models.append(apply(models[batch], s["changes"]))
            if s["compact"]:
                store.compact(batch)
            if s["gc"]:
                store.gc()
                snaps = store.index(batch + 1).snapshot_batch
                floor = max(floor, snaps if snaps is not None else -1)
            if s["restart"]:
                store = KeyGroupStore(root, "op", ["key"], snapshot_target_bytes=1500)
            if s["cold"]:
                FILE_CACHE.clear()
            assert state_of(store, batch + 1) == models[batch + 1]
        for b in range(floor + 1, len(models)):  # every view still kept is right
            assert state_of(store, b) == models[b]
