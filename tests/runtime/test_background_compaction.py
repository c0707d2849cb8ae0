"""State compaction runs in the background, between and during batches, without changing
what a job computes: the snapshot becomes visible whole, and the history it replaces is
collected only once no batch can read it."""

from __future__ import annotations

import pytest

from sluice import Pipeline, agg, sinks, sources
from sluice.runtime.sinks import clear_memory, memory_batches
from sluice.runtime.state import KeyGroupStore

pytestmark = pytest.mark.spark

KEYS, PER_BATCH, BATCHES = 40, 400, 8


def _pipeline() -> Pipeline:
    spec = sources.generator(
        fields={"meter": sources.Keys(KEYS, prefix="m"), "kwh": sources.Uniform(0.0, 1.0)},
        total_rows=PER_BATCH * BATCHES,
        seed=5,
        max_rows_per_batch=PER_BATCH,
    )
    p = Pipeline("background_compaction", partitions=2)
    # every batch updates every key: each delta is as large as the state, so compaction is
    # due every few batches
    p.source(spec, name="readings").key_by("meter").aggregate(n=agg.count(), name="counts").sink(
        sinks.memory("background_compaction")
    )
    return p


def test_compaction_in_the_background_keeps_state_and_collects_history(spark, tmp_path):
    clear_memory("background_compaction")
    p = _pipeline()
    checkpoint = str(tmp_path / "ck")
    result = p.run(checkpoint, spark=spark)
    assert result.batches >= BATCHES

    op = p.graph["counts"]
    store = KeyGroupStore(checkpoint, op.id, ["meter"])
    state_dir = tmp_path / "ck" / "state" / op.id
    snapshots = sorted((state_dir / "snapshots").glob("*.json"))
    assert snapshots, "no compaction ran"
    floor = (state_dir / "history.json").read_text()
    assert '"floor"' in floor  # the history below the snapshot was collected
    last = max(m.batch_id for m in result.metrics)
    oldest_delta = min(int(d.name) for d in (state_dir / "deltas").iterdir())
    assert oldest_delta > int(snapshots[0].stem)  # no delta the snapshot replaces is left

    # the state read through the snapshot is the count of every record per key
    state = store.read(store.index(before_batch=last + 1), range(p.graph.max_parallelism))
    assert state.num_rows == KEYS
    emitted = [r for _, t in sorted(memory_batches("background_compaction").items()) for r in t.to_pylist()]
    latest = {}
    for row in emitted:
        latest[row["meter"]] = row["n"]
    assert sum(latest.values()) == PER_BATCH * BATCHES
