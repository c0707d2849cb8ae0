"""A Parquet directory whose first consumers run in Spark is read by Spark's own Parquet
reader (``sources.native_files``): the same rows as the directory reader gives, across a
restart, with a file of another type cast and a broken file sent to dead letters as before."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice import Pipeline, sinks, sources
from sluice.core.checkpoint import Checkpoint
from sluice.job.sources import read_natively, source_reader
from sluice.runtime.sinks import clear_memory, memory_batches
from sluice.runtime.sources.native_files import NATIVE_FILES_ENV, BatchFiles

pytestmark = pytest.mark.spark

START_US = 1_700_000_000_000_000
FILES, PER_FILE = 4, 300
TS = pa.timestamp("us", tz="UTC")


def _files(inbox) -> None:
    for f in range(FILES):
        i = list(range(f * PER_FILE, (f + 1) * PER_FILE))
        pq.write_table(
            pa.table(
                {
                    "k": [f"k{n % 7}" for n in i],
                    "v": pa.array(i, pa.int64()),
                    "ts": pa.array([START_US + n * 1_000 for n in i], TS),
                }
            ),
            inbox / f"part-{f}.parquet",
        )
    # v as int32: Sluice casts it to the schema's int64, so the directory reader reads this file
    pq.write_table(
        pa.table({"k": ["x", "y"], "v": pa.array([5, 7], pa.int32()), "ts": pa.array([START_US, START_US + 1], TS)}),
        inbox / "part-8-int32.parquet",
    )
    whole = (inbox / "part-0.parquet").read_bytes()
    (inbox / "part-9-cut.parquet").write_bytes(whole[: len(whole) // 2])


def _pipeline(inbox, name: str) -> Pipeline:
    p = Pipeline(name, partitions=2)
    p.dead_letter(sinks.memory(f"{name}_dlq"))
    spec = sources.directory(str(inbox), format="parquet", event_time="ts", max_rows_per_batch=PER_FILE, available_now=True)
    p.source(spec, name="files").filter("v % 3 <> 0").select("k", "v * 2 AS v2", "ts").sink(sinks.memory(name))
    return p


def _run_with_restart(p: Pipeline, checkpoint: str, spark) -> tuple[list[tuple], int]:
    first = p.run(checkpoint, spark=spark, stop_when=lambda executor: executor.batches_done >= 2)
    second = p.run(checkpoint, spark=spark)
    rows = sorted((r["k"], r["v2"], r["ts"]) for t in memory_batches(p.graph.name).values() for r in t.to_pylist())
    return rows, first.dead_letters + second.dead_letters


def test_spark_reads_a_native_first_parquet_directory_as_the_directory_reader_does(spark, tmp_path, monkeypatch):
    inbox = tmp_path / "in"
    inbox.mkdir()
    _files(inbox)
    clear_memory()
    native = _pipeline(inbox, "native_files")
    source = native.graph.sources()[0]
    assert read_natively(native.graph, source)
    got, dead = _run_with_restart(native, str(tmp_path / "native"), spark)
    # the driver finds each batch's files in Spark's offset log and the source's file log
    checkpoint = Checkpoint(str(tmp_path / "native"))
    found = BatchFiles(
        source_reader(spark, source.connector, source.id, checkpoint),
        lambda b: checkpoint.read_bytes(Checkpoint.spark_offsets(b)),
    )
    batches = [found.slices(b) for b in range(FILES + 2)]
    assert [[s.path.rsplit("/", 1)[1] for s in files] for files in batches] == [[f"part-{f}.parquet"] for f in range(FILES)] + [
        ["part-8-int32.parquet", "part-9-cut.parquet"],
        [],
    ]
    assert found.slices(FILES + 2) is None  # no such batch: the source stage then reads the splits

    monkeypatch.setenv(NATIVE_FILES_ENV, "0")
    python = _pipeline(inbox, "python_files")
    assert not read_natively(python.graph, python.graph.sources()[0])
    expected, expected_dead = _run_with_restart(python, str(tmp_path / "python"), spark)

    n = FILES * PER_FILE
    assert len(expected) == len([v for v in range(n) if v % 3]) + 2  # the int32 file's 5 and 7
    assert got == expected  # each row once, across the restart
    assert dead == expected_dead == 1
    assert [d["location"] for t in memory_batches("native_files_dlq").values() for d in t.to_pylist()] == [
        str(inbox / "part-9-cut.parquet")
    ]
    clear_memory()
