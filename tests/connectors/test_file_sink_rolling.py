"""The file sink leaves no empty directory for a batch without rows, and with a target file
size rolls small batches together behind itself, exactly once (also when a roll is cut short
by a crash at any step)."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sluice
from sluice import sinks, testing
from sluice.errors import PipelineError
from sluice.runtime.file_rolling import output_dirs, roll
from sluice.runtime.files import filesystem


def write_batch(base, batch_id: int, rows: range) -> None:
    directory = base / f"batch={batch_id:09d}"
    directory.mkdir(parents=True)
    pq.write_table(pa.table({"i": list(rows)}), directory / "part-00000.parquet")
    (directory / "_SUCCESS").touch()


def names(base) -> list[str]:
    return sorted(os.listdir(base))


def rows_of(base) -> list[int]:
    table = sinks.read_files(str(base))
    return [] if table is None else table.column("i").to_pylist()


def test_small_committed_batches_roll_into_files_of_the_target_size(tmp_path):
    for b in range(10):
        write_batch(tmp_path, b, range(b * 100, b * 100 + 100))
    size = os.path.getsize(tmp_path / "batch=000000000" / "part-00000.parquet")
    written = roll(str(tmp_path), up_to_batch=8, target_bytes=3 * size)  # batch 9 is not committed yet
    assert [w.rsplit("/", 1)[1] for w in written] == [
        "batches=000000000-000000002",
        "batches=000000003-000000005",
        "batches=000000006-000000008",
    ]
    assert names(tmp_path) == sorted([w.rsplit("/", 1)[1] for w in written] + ["batch=000000009"])
    assert rows_of(tmp_path) == list(range(1000))  # every row once, in batch order


def test_a_roll_cut_short_neither_loses_nor_doubles_a_row(tmp_path):
    for b in range(4):
        write_batch(tmp_path, b, range(b * 10, b * 10 + 10))
    # a crash after the rolled directory was renamed into place, before the originals went
    rolled = tmp_path / "batches=000000000-000000001"
    rolled.mkdir()
    pq.write_table(pa.table({"i": list(range(20))}), rolled / "part-00000.parquet")
    (rolled / "_SUCCESS").touch()
    # and one that died while writing its hidden directory
    (tmp_path / ".rolling-dead").mkdir()
    (tmp_path / ".rolling-dead" / "part-00000.parquet").write_bytes(b"half")
    assert rows_of(tmp_path) == list(range(40))
    fs, base = filesystem(str(tmp_path))
    assert [(d.first, d.last) for d in output_dirs(fs, base)] == [(0, 1), (2, 2), (3, 3)]
    roll(str(tmp_path), up_to_batch=3, target_bytes=10**9)  # nothing big enough to roll: only cleans up
    assert names(tmp_path) == ["batch=000000002", "batch=000000003", "batches=000000000-000000001"]
    assert rows_of(tmp_path) == list(range(40))


def test_target_file_size_is_checked_at_definition():
    assert sinks.files("out", target_file_size="64MB").target_file_bytes == 64 << 20
    with pytest.raises(PipelineError, match="target_file_size must be bytes or a size such as '64MB'"):
        sinks.files("out", target_file_size="big")
    with pytest.raises(PipelineError, match="target_file_size rolls Parquet files"):
        sinks.files("out", format="json", target_file_size="1MB")


@pytest.mark.spark
def test_a_job_writes_no_empty_directory_and_rolls_its_small_batches_across_a_restart(tmp_path):
    batches = [[{"i": i, "keep": b != 3} for i in range(b * 50, b * 50 + 50)] for b in range(8)]
    source = testing.Source(batches, schema={"i": "int", "keep": "bool"})
    out = tmp_path / "out"

    def pipeline() -> sluice.Pipeline:
        p = sluice.Pipeline("rolling")
        p.source(source.spec).filter("keep").sink(sinks.files(str(out), target_file_size="4KB"))
        return p

    testing.run(pipeline(), source, str(tmp_path / "ckpt"), batches=5)
    testing.run(pipeline(), source, str(tmp_path / "ckpt"))  # a restart goes on rolling
    expected = [i for b in range(8) if b != 3 for i in range(b * 50, b * 50 + 50)]
    assert rows_of(out) == expected  # every row once, in batch order
    dirs = names(out)
    assert "batch=000000003" not in dirs  # the batch whose rows were all filtered out left nothing
    assert any(d.startswith("batches=") for d in dirs) and len(dirs) < 7, dirs
