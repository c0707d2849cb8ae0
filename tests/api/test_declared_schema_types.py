"""Declared output schemas with types Spark does not hold (``timestamp[ms]``, as
``pyarrow.parquet.read_schema`` gives for many files; unsigned integers) are cast when the
graph is built, so the job runs and the values keep their meaning."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from sluice import Pipeline, sinks, sources
from sluice.graph.schemas import as_schema
from sluice.runtime.sinks import clear_memory, memory_batches

START = 1_700_000_000.0


def test_declared_types_become_the_ones_spark_holds():
    declared = pa.schema(
        [
            ("ts", pa.timestamp("ms", tz="UTC")),
            ("local", pa.timestamp("ns")),
            ("n", pa.uint32()),
            ("xs", pa.list_(pa.timestamp("s", tz="UTC"))),
            ("s", pa.string()),
        ]
    )
    got = as_schema(declared)
    assert got.types == [
        pa.timestamp("us", tz="UTC"),
        pa.timestamp("us"),
        pa.int64(),
        pa.list_(pa.timestamp("us", tz="UTC")),
        pa.string(),
    ]
    assert as_schema({"ts": pa.timestamp("ms", tz="UTC")}).field("ts").type == pa.timestamp("us", tz="UTC")


def to_millis(batch: pa.RecordBatch) -> pa.RecordBatch:
    """What a user's function reading Parquet files often returns: millisecond timestamps."""
    return pa.RecordBatch.from_arrays(
        [
            batch.column("i"),
            pc.cast(batch.column("ts"), pa.timestamp("ms", tz="UTC"), safe=False),
            pc.cast(batch.column("i"), pa.uint32()),
        ],
        names=["i", "ts", "u"],
    )


@pytest.mark.spark
def test_a_map_declaring_millisecond_timestamps_runs_on_spark(spark, tmp_path):
    clear_memory()
    p = Pipeline("declared_ms")
    spec = sources.generator(
        fields={"i": sources.Sequence(), "ts": sources.EventTime(step=0.0015)}, total_rows=50, seed=1, start_time=START
    )
    declared = pa.schema([("i", pa.int64()), ("ts", pa.timestamp("ms", tz="UTC")), ("u", pa.uint32())])
    p.source(spec, name="rows").map_batches(to_millis, schema=declared).sink(sinks.memory("declared_ms"))
    p.run(str(tmp_path / "ckpt"), spark=spark)
    rows = pa.concat_tables(memory_batches("declared_ms").values()).sort_by("i")
    assert rows.column("i").to_pylist() == list(range(50))
    micros = rows.column("ts").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_pylist()
    assert micros == [int(START * 1e6) + (i * 1500 // 1000) * 1000 for i in range(50)]  # ms precision kept
    assert rows.column("u").to_pylist() == list(range(50))
    clear_memory()
