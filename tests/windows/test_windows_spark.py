"""Windows through the API on local Spark: results equal the brute-force reference.

The generator source is deterministic and, unthrottled, admits exactly ``max_rows_per_batch``
rows per batch, so the test can rebuild every batch and its watermark (max event time of the
earlier batches minus the source's delay) and recompute every window from raw records. The
source's end-of-input batch then closes the windows still open, so every window is emitted.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from sluice import Pipeline, agg, sinks, sources
from sluice import windows as W
from sluice.errors import PipelineError
from sluice.runtime.side_outputs import read_side_output
from sluice.sinks import memory_table
from windows_harness import assert_rows_equal, reference, watermarks

pytestmark = pytest.mark.spark

START = 1_700_000_000.0
ROWS, PER_BATCH = 6_000, 1_500
DELAY = 0.2  # seconds of watermark delay


def _spec(jitter=0.5):
    return sources.generator(
        fields={
            "meter": sources.Keys(7, prefix="m"),
            "kwh": sources.Uniform(0.0, 2.0),
            "ts": sources.EventTime(jitter=jitter, step=0.002),
        },
        total_rows=ROWS,
        seed=3,
        start_time=START,
        max_rows_per_batch=PER_BATCH,
        watermark_delay=DELAY,
    )


def _expected(spec, queries, key_columns):
    """Reference rows per batch, from the same rows cut into the same batches, then the
    end-of-input batch (no rows, watermark END_OF_TIME) that flushes every open window."""
    rows = pa.Table.from_batches(spec.generate(0, ROWS, int(START * 1e6)))
    rows = rows.set_column(rows.schema.get_field_index("ts"), "ts", pc.cast(rows["ts"], pa.int64()))
    batches = [rows.slice(i, PER_BATCH) for i in range(0, ROWS, PER_BATCH)]
    return reference(queries, key_columns, batches, watermarks(batches, "ts", int(DELAY * 1e6)))


def _as_micros(table: pa.Table) -> list[dict]:
    for c in ("window_start", "window_end"):
        table = table.set_column(table.schema.get_field_index(c), c, pc.cast(table[c], pa.int64()))
    return table.to_pylist()


@pytest.mark.slow
def test_windows_on_spark_equal_the_reference(spark, tmp_path):
    """One pipeline, three window operators fed by one source:

    - a keyed sliding window with allowed lateness (records up to 2 s out of order, a
      watermark delay of 0.2 s: some records are late);
    - two queries sharing panes (``KeyedStream.windows``);
    - a window over the whole stream (``Stream.window``, one global key).
    """
    spec = _spec(jitter=2.0)
    p = Pipeline("windows_it", partitions=2)
    readings = p.source(spec, name="readings")
    meters = readings.key_by("meter")
    meters.window(W.sliding("1s", "0.25s"), allowed_lateness="0.1s").aggregate(
        n=agg.count(), avg=agg.mean("kwh"), top=agg.max("kwh"), name="win"
    ).sink(sinks.memory("w_it"))
    meters.windows(
        W.query(W.tumbling("1s"), name="1s", n=agg.count()),
        W.query(W.sliding("2s", "0.5s"), name="2s", n=agg.count(), total=agg.sum("kwh")),
        name="shared",
    ).sink(sinks.memory("w_shared"))
    readings.window(W.tumbling("1s")).aggregate(n=agg.count(), name="everything").sink(sinks.memory("w_global"))
    checkpoint = str(tmp_path / "ckpt")
    result = p.run(checkpoint, spark=spark)

    expected = _expected(spec, list(p.graph["win"].spec.queries), ["meter"])
    got = _as_micros(memory_table("w_it"))
    assert got, "windows fired"
    assert_rows_equal(got, [r for rows, _ in expected for r in rows], "sliding window")
    late = read_side_output(checkpoint, "side/win/late")
    assert len(late) == sum(len(lr) for _, lr in expected) > 0
    every_late = sum(len(read_side_output(checkpoint, f"side/{op}/late")) for op in ("win", "shared", "everything"))
    assert result.late_records == every_late  # the running total the summary and progress show

    expected = _expected(spec, list(p.graph["shared"].spec.queries), ["meter"])
    shared = _as_micros(memory_table("w_shared"))
    assert_rows_equal(shared, [r for rows, _ in expected for r in rows], "shared panes")

    assert set(memory_table("w_global").column_names) == {"window_start", "window_end", "n"}
    per_meter: dict[int, int] = {}
    for row in shared:
        if row["query"] == "1s":
            per_meter[row["window_start"]] = per_meter.get(row["window_start"], 0) + row["n"]
    assert {r["window_start"]: r["n"] for r in _as_micros(memory_table("w_global"))} == per_meter


def test_window_time_must_be_the_sources_event_time():
    p = Pipeline("bad")
    keyed = p.source(_spec(), name="readings").key_by("meter")
    with pytest.raises(PipelineError, match="event_time"):
        keyed.window(W.tumbling("1s"), time="kwh").aggregate(n=agg.count())
    assert isinstance(
        keyed.window(W.tumbling(1), time="processing").aggregate(n=agg.count()).op.spec.queries[0].time, W.ProcessingTime
    )
