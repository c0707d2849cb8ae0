"""What follows a batch's commit (its metrics line, housekeeping, ``on_batch``) runs beside
Spark's work between batches when the job has no controller: the next batch starts only
once it is done, and what it raises fails the next batch, never the committed one."""

from __future__ import annotations

import json
import time

import pytest

import sluice
from sluice import agg, sinks, sources
from sluice.errors import SluiceError
from sluice.runtime.batch import metrics as metrics_log
from sluice.runtime.sinks import clear_memory, memory_table

ROWS, PER_BATCH = 4_000, 1_000


def _pipeline() -> sluice.Pipeline:
    p = sluice.Pipeline("after_commit", partitions=2)
    (
        p.source(
            sources.generator(
                fields={"i": sources.Sequence(), "k": sources.Keys(5)}, total_rows=ROWS, max_rows_per_batch=PER_BATCH
            ),
            name="numbers",
        )
        .key_by("k")
        .aggregate(n=agg.count(), name="counts")
        .sink(sinks.memory("after_commit"))
    )
    return p


def _start_us(checkpoint, batch_id: int) -> int:
    return json.loads((checkpoint / "batches" / f"{batch_id:09d}.start.json").read_text())["processing_time"]


@pytest.mark.spark
def test_the_next_batch_waits_for_the_last_ones_hooks_and_their_error_fails_it_alone(spark, tmp_path):
    clear_memory("after_commit")
    checkpoint = tmp_path / "ck"
    hooks: dict[int, tuple[float, float, bool]] = {}  # batch -> (hook start, hook end, its line written)

    def slow_then_failing(m) -> None:
        began = time.time()
        written = any(line.batch_id == m.batch_id for line in metrics_log.read(str(checkpoint)))
        if m.batch_id == 0:
            time.sleep(1.0)  # longer than Spark takes to plan the next batch
        hooks[m.batch_id] = (began, time.time(), written)
        if m.batch_id == 1:
            raise RuntimeError("the hook of batch 1 failed")

    with pytest.raises(SluiceError, match="the hook of batch 1 failed"):
        _pipeline().run(str(checkpoint), spark=spark, on_batch=slow_then_failing)
    assert hooks[0][2] and hooks[1][2]  # each batch's metrics line is written before its hook
    # batch 1 started (its start record's time) only once batch 0's hook had returned
    assert _start_us(checkpoint, 1) >= int(hooks[0][1] * 1e6)
    done = sorted(int(f.name[:9]) for f in (checkpoint / "batches").glob("*.done.json"))
    assert done == [0, 1]  # the failed hook's batch stays committed; the next one never ran
    assert [m.batch_id for m in metrics_log.read(str(checkpoint))] == [0, 1]

    result = _pipeline().run(str(checkpoint), spark=spark)  # the restart goes on after batch 1
    assert sum(m.rows_in for m in metrics_log.read(str(checkpoint))) == ROWS
    assert result.rows_in == ROWS - 2 * PER_BATCH
    table = memory_table("after_commit")
    assert table is not None
    final = {}
    for row in table.to_pylist():  # the running counts, the last one per key
        final[row["k"]] = row["n"]
    assert sum(final.values()) == ROWS  # every record counted once
