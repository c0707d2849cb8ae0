"""State TTL on local Spark: a running count whose keys expire after 2 s of event time equals
the reference rule (tests/state/test_state_ttl.py) applied to the batches as they ran, also with
key groups moved between partitions every batch and across a restart."""

from __future__ import annotations

import pytest
from tests.keyed_harness import RandomRebalancer, run_with_restart
from tests.state.test_state_ttl import reference_counts

from sluice import Pipeline, agg, sinks, sources
from sluice.runtime.kernels.panes import END_OF_TIME
from sluice.runtime.sinks import memory_batches

pytestmark = pytest.mark.spark

ROWS, PER_BATCH, TTL_S = 8_000, 1_000, 2


def build() -> Pipeline:
    p = Pipeline("ttl", partitions=2, max_parallelism=16)
    raw = p.source(
        sources.generator(
            fields={"k": sources.Keys(3_000, prefix="u"), "v": sources.Sequence(), "ts": sources.EventTime(step=0.001)},
            total_rows=ROWS,
            seed=3,
            start_time=1_700_000_000.0,
            max_rows_per_batch=PER_BATCH,
        ),
        name="raw",
    )
    raw.sink(sinks.memory("ttl_raw"))
    raw.key_by("k").aggregate(n=agg.count(), s=agg.sum("v"), ttl=f"{TTL_S}s", name="counts").sink(sinks.memory("ttl_counts"))
    return p


def test_ttl_counts_equal_the_reference_across_moves_and_a_restart(spark, tmp_path, memory):
    rebalance = RandomRebalancer("counts", seed=5)
    result = run_with_restart(build, str(tmp_path / "ckpt"), spark, 3, controller=rebalance)
    assert sum(rebalance.moves) > 20  # key groups really moved

    metrics = {m.batch_id: m for m in result.metrics}
    raw, counts = memory_batches("ttl_raw"), memory_batches("ttl_counts")
    ids = sorted(metrics)
    assert metrics[ids[-1]].watermark == END_OF_TIME
    batches = [raw[b] if b in raw else raw[ids[0]].slice(0, 0) for b in ids]
    assert sum(t.num_rows for t in batches) == ROWS
    want, _ = reference_counts(batches, [metrics[b].watermark for b in ids], TTL_S * 1_000_000)
    got = [{r["k"]: (r["n"], r["s"]) for r in counts[b].to_pylist()} if b in counts else {} for b in ids]
    assert got == want
    restarted = sum(1 for touched in want for n, _ in touched.values() if n == 1)
    assert restarted > 3_000  # many keys expired and started again (3,000 distinct keys)
