"""The key-group store: versioned, checksummed keyed state (DESIGN.md section 5)."""

from __future__ import annotations

import json
import pickle

import pyarrow as pa
import pytest

from sluice.errors import StateCorruptionError, StateError
from sluice.runtime.state import FILE_CACHE, DeltaFile, KeyGroupStore, StateIndex

K = 8  # key groups in these tests (the runtime's default is 128)


def kg_of(key: int) -> int:
    return key % K


def upserts(values: dict[int, int]) -> pa.Table:
    keys = sorted(values)
    return pa.table(
        {
            "__kg": pa.array([kg_of(k) for k in keys], pa.int32()),
            "key": pa.array(keys, pa.int64()),
            "total": pa.array([values[k] for k in keys], pa.int64()),
        }
    )


def deletes(keys: list[int]) -> pa.Table:
    return pa.table({"__kg": pa.array([kg_of(k) for k in keys], pa.int32()), "key": pa.array(keys, pa.int64())})


def as_dict(table: pa.Table | None) -> dict[int, int]:
    if table is None:
        return {}
    d = table.to_pydict()
    assert d["__kg"] == [kg_of(k) for k in d["key"]]
    assert len(set(d["key"])) == len(d["key"]), "a key appears twice"
    return dict(zip(d["key"], d["total"]))


def read_all(store: KeyGroupStore, before_batch: int) -> dict[int, int]:
    return as_dict(store.read(store.index(before_batch), range(K)))


@pytest.fixture(autouse=True)
def cold_cache():
    FILE_CACHE.clear()  # each test proves its point from storage, not from the cache
    yield
    FILE_CACHE.clear()


@pytest.fixture
def store(tmp_path) -> KeyGroupStore:
    return KeyGroupStore(str(tmp_path / "ckpt"), "counts", ["key"])


def write_and_commit(store, batch, per_partition):
    """per_partition: {partition: (upsert dict, delete list)}"""
    files = [store.write_delta(batch, p, upserts(u), deletes(d) if d else None) for p, (u, d) in per_partition.items()]
    store.commit(batch, files)
    FILE_CACHE.clear()  # reads below come from storage (the write-through cache is tested apart)
    return files


def test_round_trip_upserts_and_deletes_across_batches(store):
    write_and_commit(store, 0, {0: ({1: 10, 2: 20, 3: 30}, []), 1: ({12: 120}, [])})
    write_and_commit(store, 1, {0: ({1: 11}, [2]), 1: ({13: 130}, [])})
    write_and_commit(store, 2, {0: ({2: 22}, [3])})
    assert read_all(store, 1) == {1: 10, 2: 20, 3: 30, 12: 120}
    assert read_all(store, 2) == {1: 11, 3: 30, 12: 120, 13: 130}
    assert read_all(store, 3) == {1: 11, 2: 22, 12: 120, 13: 130}
    result = store.read(store.index(3), range(K))
    assert result.column_names == ["__kg", "key", "total"]
    assert result.column("__kg").to_pylist() == sorted(result.column("__kg").to_pylist())


def test_read_only_asked_key_groups(store):
    write_and_commit(store, 0, {0: ({1: 10, 2: 20, 9: 90}, [])})
    assert as_dict(store.read(store.index(1), [1])) == {1: 10, 9: 90}
    assert store.index(1).key_groups_with_state() == [1, 2]


def test_later_wins_within_a_batch_upsert_beats_delete(store):
    u = pa.concat_tables([upserts({5: 1}), upserts({5: 2})])
    store.commit(0, [store.write_delta(0, 0, u, deletes([5]))])
    assert read_all(store, 1) == {5: 2}


def test_uncommitted_files_are_invisible_after_a_crash(store):
    write_and_commit(store, 0, {0: ({1: 10}, [])})
    store.write_delta(1, 0, upserts({1: 99, 2: 2}), None)  # crash: no commit
    assert not store.is_committed(1)
    assert read_all(store, 2) == {1: 10}
    # the replay runs with another routing: partition 3 now has the key groups
    write_and_commit(store, 1, {3: ({1: 11}, [])})
    assert read_all(store, 2) == {1: 11}
    removed = store.gc()
    assert "deltas/000000000001/part-00000.arrow" in removed
    assert read_all(store, 2) == {1: 11}


def test_recommit_of_a_replayed_batch_replaces_it(store):
    write_and_commit(store, 0, {0: ({1: 10}, [])})
    write_and_commit(store, 1, {0: ({1: 11, 2: 2}, [])})
    write_and_commit(store, 1, {1: ({1: 12}, [])})  # replay with different partitioning
    assert read_all(store, 2) == {1: 12}


def test_index_ignores_commits_at_or_after_before_batch(store):
    write_and_commit(store, 0, {0: ({1: 10}, [])})
    write_and_commit(store, 1, {0: ({1: 11}, [])})
    write_and_commit(store, 2, {0: ({1: 12}, [])})
    assert store.index(0).files_by_kg == {}
    assert store.read(store.index(0), range(K)) is None  # no state, no schema given
    assert read_all(store, 1) == {1: 10}
    assert read_all(store, 2) == {1: 11}
    # the cached index must not leak newer commits into an older view, and vice versa
    assert read_all(store, 3) == {1: 12}
    assert read_all(store, 2) == {1: 11}


def test_incremental_index_equals_a_fresh_one(store):
    for b in range(5):
        write_and_commit(store, b, {b % 2: ({b: b, 8 + b: b}, [b - 1] if b else [])})
        built = store.index(b + 1)
        fresh = KeyGroupStore(store.root, store.operator_id, store.key_columns).index(b + 1)
        assert built == fresh


def test_corruption_raises_naming_the_file(store, tmp_path):
    (f,) = write_and_commit(store, 0, {0: ({1: 10, 2: 20}, [])})
    path = tmp_path / "ckpt" / "state" / "counts" / f.path
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(StateCorruptionError, match=f.path.replace("/", ".")) as err:
        store.read(store.index(1), [1])
    assert "checksum" in str(err.value)


def test_truncated_or_missing_file_raises(store, tmp_path):
    (f,) = write_and_commit(store, 0, {0: ({1: 10}, [])})
    path = tmp_path / "ckpt" / "state" / "counts" / f.path
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(StateCorruptionError, match="truncated"):
        store.read(store.index(1), [1])
    path.unlink()
    with pytest.raises(StateCorruptionError, match="missing"):
        store.read(store.index(1), [1])


def test_corrupt_commit_record_raises(store, tmp_path):
    write_and_commit(store, 0, {0: ({1: 10}, [])})
    record = tmp_path / "ckpt" / "state" / "counts" / "commits" / "000000000000.json"
    body = json.loads(record.read_text())
    body["files"][0]["rows"] += 1
    record.write_text(json.dumps(body))
    with pytest.raises(StateCorruptionError, match="000000000000.json"):
        KeyGroupStore(store.root, "counts", ["key"]).index(1)


def test_key_groups_moved_between_partitions(store):
    # batch 0: partition 0 owns kgs 0-3, partition 1 owns 4-7; batch 1 swaps them
    write_and_commit(store, 0, {0: ({1: 1, 2: 2}, []), 1: ({5: 5, 6: 6}, [])})
    write_and_commit(store, 1, {1: ({1: 10}, [2]), 0: ({5: 50, 7: 70}, [])})
    write_and_commit(store, 2, {2: ({6: 60}, [])})
    assert read_all(store, 3) == {1: 10, 5: 50, 6: 60, 7: 70}
    assert as_dict(store.read(store.index(3), [6])) == {6: 60}


def test_compaction_preserves_content_and_bounds_files(store):
    for b in range(12):
        write_and_commit(store, b, {b % 3: ({k: b * 100 + k for k in range(b, b + 10)}, [b - 2] if b >= 2 else [])})
    expected = read_all(store, 12)
    before = store.index(12)
    assert len(before.files()) == 12
    store.compact(11)
    after = store.index(12)
    assert after.snapshot_batch == 11
    assert len(after.files()) == 1  # small state: one snapshot part
    assert read_all(store, 12) == expected
    # older views still work until gc, and later deltas stack on the snapshot
    assert as_dict(store.read(before, range(K))) == expected
    write_and_commit(store, 12, {0: ({1000: 1}, [11])})
    expected[1000] = 1
    del expected[11]
    assert read_all(store, 13) == expected
    assert len(store.index(13).files()) == 2


def test_compaction_splits_large_state_into_bounded_parts(tmp_path):
    store = KeyGroupStore(str(tmp_path), "big", ["key"], snapshot_target_bytes=2_000)
    write_and_commit(store, 0, {0: ({k: k for k in range(400)}, [])})
    parts = store.compact(0)
    assert 1 < len(parts) <= K
    idx = store.index(1)
    for kg in range(K):  # a key group is never split across parts
        assert len(idx.files_by_kg[kg]) == 1
    assert read_all(store, 1) == {k: k for k in range(400)}


def test_recommit_below_a_snapshot_drops_the_snapshot(store):
    write_and_commit(store, 0, {0: ({1: 10}, [])})
    write_and_commit(store, 1, {0: ({1: 11}, [])})
    store.compact(1)
    write_and_commit(store, 1, {0: ({1: 12}, [])})  # replay of batch 1
    assert store.index(2).snapshot_batch is None
    assert read_all(store, 2) == {1: 12}


def test_gc_removes_history_below_the_snapshot(store):
    for b in range(4):
        write_and_commit(store, b, {0: ({b: b}, [])})
    store.write_delta(4, 0, upserts({9: 9}), None)  # in flight: gc must keep it
    store.compact(2)
    removed = store.gc()
    assert "commits/000000000000.json" in removed and "commits/000000000002.json" in removed
    assert not any(r.startswith("deltas/000000000004") for r in removed)
    assert store.is_committed(3) and not store.is_committed(2)
    assert read_all(store, 4) == {0: 0, 1: 1, 2: 2, 3: 3}
    with pytest.raises(StateError, match="collected"):
        store.index(2)
    with pytest.raises(StateError, match="collected"):
        store.commit(2, [])


def test_works_through_a_file_uri(tmp_path):
    store = KeyGroupStore(tmp_path.as_uri() + "/ckpt", "uri-op", ["key"])
    write_and_commit(store, 0, {0: ({1: 10, 2: 20}, [])})
    write_and_commit(store, 1, {0: ({1: 11}, [2])})
    store.compact(1)
    assert read_all(store, 2) == {1: 11}
    assert (tmp_path / "ckpt" / "state" / "uri-op" / "snapshots" / "000000000001.json").exists()


def test_empty_delta_writes_nothing_and_schema_can_be_given(store):
    assert store.write_delta(0, 0, upserts({}), None) is None
    store.commit(0, [None])
    assert store.is_committed(0)
    schema = pa.schema([("key", pa.int64()), ("total", pa.int64())])
    empty = store.read(store.index(1), [0], schema=schema)
    assert empty.num_rows == 0 and empty.schema.names == ["__kg", "key", "total"]
    write_and_commit(store, 1, {0: ({1: 1}, [])})
    # key groups without state still get the schema learned from the files
    assert store.read(store.index(2), [5]).schema.names == ["__kg", "key", "total"]


def test_committed_files_lists_what_tasks_wrote(store):
    files = [store.write_delta(3, p, upserts({p: p}), None) for p in (2, 0)]
    assert store.committed_files(3) == sorted(files, key=lambda f: f.path)
    assert store.committed_files(4) == []


def test_delta_file_json_and_pickle_round_trip(store):
    write_and_commit(store, 0, {0: ({1: 10, 2: 20}, [])})
    (f,) = store.committed_files(0)
    assert DeltaFile.from_dict(json.loads(json.dumps(f.to_dict()))) == f
    idx = store.index(1)
    assert pickle.loads(pickle.dumps(idx)) == idx
    clone = pickle.loads(pickle.dumps(store))
    assert as_dict(clone.read(idx, range(K))) == {1: 10, 2: 20}


def test_key_group_sizes_follow_state(store):
    write_and_commit(store, 0, {0: ({k: k for k in range(0, 80, 8)} | {1: 1}, [])})
    sizes = store.key_group_sizes(store.index(1))
    assert set(sizes) == {0, 1}
    assert sizes[0] > sizes[1] > 0
    assert store.key_group_rows(store.index(1)) == {0: 10, 1: 1}


def test_cache_hit_and_miss_give_the_same_state(store):
    write_and_commit(store, 0, {0: ({1: 10, 2: 20}, [])})
    idx = store.index(1)
    FILE_CACHE.clear()
    cold = as_dict(store.read(idx, range(K)))
    hits = FILE_CACHE.hits
    warm = as_dict(store.read(idx, range(K)))
    assert cold == warm == {1: 10, 2: 20}
    assert FILE_CACHE.hits > hits


def test_missing_key_column_is_reported(store):
    bad = pa.table({"__kg": pa.array([0], pa.int32()), "other": [1]})
    with pytest.raises(StateError, match="key"):
        store.write_delta(0, 0, bad, None)


def test_index_of_another_operator_is_rejected(store, tmp_path):
    other = KeyGroupStore(store.root, "other", ["key"])
    with pytest.raises(StateError, match="other"):
        store.read(other.index(0), [0])


def test_state_index_type():
    assert StateIndex("x", 0, {}).key_groups_with_state() == []


def test_gc_removes_unfinished_snapshots_and_temp_files(store, tmp_path):
    write_and_commit(store, 0, {0: ({1: 10}, [])})
    write_and_commit(store, 1, {0: ({1: 11}, [])})
    base = tmp_path / "ckpt" / "state" / "counts"
    (base / "snapshots" / "000000000000").mkdir(parents=True)  # a compaction that crashed
    (base / "snapshots" / "000000000000" / "part-00000.arrow").write_bytes(b"partial")
    (base / "commits" / "000000000002.json.tmp-dead").write_bytes(b"{")
    removed = store.gc()
    assert "snapshots/000000000000" in removed
    assert "commits/000000000002.json.tmp-dead" in removed
    assert read_all(store, 2) == {1: 11}


def test_latest_committed_and_compaction_policy(store):
    assert store.latest_committed() is None
    for b in range(3):
        write_and_commit(store, b, {0: ({b: b}, [])})
    assert store.latest_committed() == 2 and store.committed_batches() == [0, 1, 2]
    assert KeyGroupStore.compaction_due(store.index(3), max_delta_batches=2)
    assert not KeyGroupStore.compaction_due(store.index(3), max_delta_batches=5, max_delta_ratio=10)
    store.compact(2)
    assert not KeyGroupStore.compaction_due(store.index(3))


def test_delta_bytes_do_not_depend_on_row_order(store):
    """A retried task whose shuffle delivered rows in another order writes the same file."""
    values = {k: k * 3 for k in range(40)}
    table = upserts(values)
    first = store.write_delta(0, 0, table, deletes([41, 45, 50]))
    shuffled = table.take(pa.array(list(reversed(range(table.num_rows)))))
    again = store.write_delta(0, 0, shuffled, deletes([50, 45, 41]))
    assert again.checksum == first.checksum
