"""Timers in ``process`` on local Spark: an alert per meter silent for 2 s of event time,
equal to the reference (tests/state/test_process_timers.py) over the batches as they ran, with key
groups moved between partitions every batch and a restart in the middle; and a
processing-time timer that fires on a quiet stream."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest
from tests.keyed_harness import RandomRebalancer, run_with_restart
from tests.state.test_process_timers import OUT, alert, silence_after, silence_reference

from sluice import Pipeline, sinks, sources
from sluice.runtime.sinks import memory_batches

pytestmark = pytest.mark.spark

ROWS, PER_BATCH, QUIET_US = 8_000, 1_000, 2_000_000


def build() -> Pipeline:
    p = Pipeline("timers", partitions=2, max_parallelism=16)
    raw = p.source(
        sources.generator(
            fields={"k": sources.Keys(1_500, prefix="m"), "ts": sources.EventTime(step=0.001)},
            total_rows=ROWS,
            seed=4,
            start_time=1_700_000_000.0,
            max_rows_per_batch=PER_BATCH,
        ),
        name="raw",
    )
    raw.sink(sinks.memory("timers_raw"))
    raw.key_by("k").process(silence_after(QUIET_US), schema=OUT, on_timer=alert, name="silence").sink(
        sinks.memory("timers_alerts")
    )
    return p


def test_event_time_timers_across_moves_and_a_restart(spark, tmp_path, memory):
    rebalance = RandomRebalancer("silence", seed=2)
    result = run_with_restart(build, str(tmp_path / "ckpt"), spark, 3, controller=rebalance)
    assert sum(rebalance.moves) > 20
    metrics = {m.batch_id: m for m in result.metrics}
    ids = sorted(metrics)
    raw, alerts = memory_batches("timers_raw"), memory_batches("timers_alerts")
    empty = raw[ids[0]].slice(0, 0)
    batches = [raw.get(b, empty) for b in ids]
    want, pending = silence_reference(batches, [metrics[b].watermark for b in ids], QUIET_US)
    got = [sorted((r["k"], r["silent_at"]) for r in alerts[b].to_pylist()) if b in alerts else [] for b in ids]
    assert got == want
    assert sum(len(w) for w in want) > 500 and not pending  # the end of input fired the rest


def test_a_processing_time_timer_fires_on_a_quiet_stream(spark, tmp_path, memory):
    """One record, then nothing: its timer, 2 s later, still fires (a batch without input)."""

    def remember(key, rows, state):
        state.update(1)
        state.register_processing_timer(int(time.time() * 1e6) + 2_000_000)

    def ring(key, when, state):
        state.clear()
        return [{"k": key[0], "rang": 1}]

    import os

    import pyarrow.parquet as pq

    inbox = tmp_path / "in"
    os.makedirs(inbox)
    pq.write_table(pa.table({"k": ["a"]}), inbox / "part-0.parquet")
    p = Pipeline("ring", partitions=1, max_parallelism=4)
    p.source(sources.directory(str(inbox), format="parquet"), name="events").key_by("k").process(
        remember, schema={"k": "string", "rang": "int"}, on_timer=ring, name="ring"
    ).sink(sinks.memory("timers_ring"))
    result = p.run(
        str(tmp_path / "ckpt"),
        spark=spark,
        duration=60,
        stop_when=lambda ex: any(t.num_rows for t in memory_batches("timers_ring").values()),
    )
    rang = [r for t in memory_batches("timers_ring").values() for r in t.to_pylist()]
    assert rang == [{"k": "a", "rang": 1}]
    assert [m.rows_in for m in result.metrics][0] == 1 and result.metrics[-1].rows_in == 0
