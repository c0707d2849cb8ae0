"""A source that has fallen behind its rate (here: started 100 s ago, as after downtime) is
admitted in bounded batches by default, and the backlog each batch reports is the rows
still waiting, counted against the input."""

from __future__ import annotations

import time

import pytest

import sluice
from sluice import sinks, sources
from sluice.runtime.batch import metrics as metrics_log
from sluice.runtime.sinks import clear_memory, memory_table
from sluice.runtime.sources.admission import DEFAULT_MAX_ROWS_PER_BATCH

TOTAL = 250_000


@pytest.mark.spark
@pytest.mark.slow
def test_a_source_behind_its_rate_is_admitted_in_bounded_batches_with_a_true_backlog(spark, tmp_path):
    clear_memory("behind")
    p = sluice.Pipeline("behind")
    # 3,000 rows/s for the last 100 s: 300,000 rows due, of which the first TOTAL exist
    p.source(
        sources.generator(fields={"i": sources.Sequence()}, rate=3000, start_time=time.time() - 100, total_rows=TOTAL),
        name="numbers",
    ).sink(sinks.memory("behind"))
    checkpoint = str(tmp_path / "ck")
    result = p.run(checkpoint, spark=spark)
    batches = [m for m in metrics_log.read(checkpoint) if m.rows_in]
    assert [m.rows_in for m in batches] == [
        DEFAULT_MAX_ROWS_PER_BATCH,
        DEFAULT_MAX_ROWS_PER_BATCH,
        TOTAL - 2 * DEFAULT_MAX_ROWS_PER_BATCH,
    ]
    # what waits after each batch: every row is due already, so exactly the rest of the input
    assert [m.backlog["numbers"] for m in batches] == [
        TOTAL - DEFAULT_MAX_ROWS_PER_BATCH,
        TOTAL - 2 * DEFAULT_MAX_ROWS_PER_BATCH,
        0,
    ]
    ids = memory_table("behind").column("i").to_pylist()
    assert sorted(ids) == list(range(TOTAL)) and result.rows_in == TOTAL


@pytest.mark.spark
def test_a_restart_first_admits_what_the_last_committed_batch_did_then_its_limit(spark, tmp_path):
    """After a crash the backlog would make the first batch one of the whole limit, run by a
    cold JVM: it admits the last committed batch's rows instead, and the limit after it."""
    from sluice.runtime.sources import get_max_rows

    def pipeline() -> sluice.Pipeline:
        p = sluice.Pipeline("ramp")
        p.source(sources.generator(fields={"i": sources.Sequence()}, total_rows=20_000), name="numbers").sink(
            sinks.memory("ramp")
        )
        return p

    clear_memory("ramp")
    checkpoint = str(tmp_path / "ck")
    pipeline().run(checkpoint, spark=spark, max_rows_per_batch=1_500, stop_when=lambda executor: executor.batches_done >= 2)
    before = [m.rows_in for m in metrics_log.read(checkpoint) if m.rows_in]
    # two, or three when the next had started as the stop came (it finishes: a clean stop)
    assert before in ([1_500] * 2, [1_500] * 3)
    limits = []  # the admission limit in force as each batch of the restart commits

    def seen(m) -> None:
        limits.append(get_max_rows(str(tmp_path / "ck" / "sources"), "numbers"))

    result = pipeline().run(checkpoint, spark=spark, max_rows_per_batch=6_000, on_batch=seen)
    after = [m.rows_in for m in metrics_log.read(checkpoint) if m.rows_in][len(before) :]
    rest = 20_000 - sum(before) - 1_500
    assert after == [1_500] + [6_000] * (rest // 6_000) + ([rest % 6_000] if rest % 6_000 else [])
    assert limits[0] == 6_000  # set back once the first batch committed, before the next is planned
    ids = memory_table("ramp").column("i").to_pylist()
    assert sorted(ids) == list(range(20_000)) and result.rows_in == 20_000 - sum(before)
