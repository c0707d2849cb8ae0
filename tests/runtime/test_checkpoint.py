"""The checkpoint as a location: a relative path or a file:// URI names the same files, every
file of a run lands under it, and an error raised in a Spark task keeps its class."""

from __future__ import annotations

import os
import pickle

import pytest

import sluice
from sluice import agg, sinks, sources
from sluice.errors import StateCorruptionError, from_traceback
from sluice.runtime.batch import metrics as metrics_log
from sluice.runtime.checkpoint import Checkpoint
from sluice.runtime.sinks import clear_memory, memory_batches

ROWS, PER_BATCH = 1200, 400


def test_relative_path_and_file_uri_name_the_same_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    by_path = Checkpoint("ckpt")
    by_uri = Checkpoint(f"file://{tmp_path}/ckpt/")
    assert by_path.uri == str(tmp_path / "ckpt")
    assert by_uri.uri == f"file://{tmp_path}/ckpt"
    by_uri.write_json("batches/000000003.start.json", {"watermark": 7})
    by_uri.append_line("metrics.jsonl", "a")
    by_path.append_line("metrics.jsonl", "b")
    assert by_path.read_json("batches/000000003.start.json") == {"watermark": 7}
    assert by_path.started_batches() == [3]
    assert (tmp_path / "ckpt" / "metrics.jsonl").read_text() == "a\nb\n"
    assert by_uri.files("batches") == ["000000003.start.json"]  # no temporary file left behind
    assert by_uri.location("spark") == f"file://{tmp_path}/ckpt/spark"
    # what travels to Spark's tasks is the location only
    assert pickle.loads(pickle.dumps(by_uri)) == by_uri
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]


def test_error_text_from_a_task_comes_back_with_its_class():
    text = (
        "org.apache.spark.SparkException: Job aborted\nTraceback (most recent call last):\n"
        '  File "store.py", line 9, in read\n'
        "sluice.errors.StateCorruptionError: state file /c/state/x/deltas/1/part-00000.arrow fails its checksum\n"
        "\tat org.apache.spark.api.python.BasePythonRunner"
    )
    error = from_traceback(text)
    assert type(error) is StateCorruptionError
    assert str(error) == "state file /c/state/x/deltas/1/part-00000.arrow fails its checksum"
    assert from_traceback("java.lang.OutOfMemoryError: no sluice here") is None


def counting(rows: int = ROWS) -> sluice.Pipeline:
    p = sluice.Pipeline("checkpoint_uri", partitions=2, max_parallelism=8)
    readings = p.source(
        sources.generator(
            fields={"id": sources.Sequence(), "meter": sources.Keys(10, prefix="m")},
            seed=5,
            total_rows=rows,
            max_rows_per_batch=PER_BATCH,
        ),
        name="readings",
    )
    readings.key_by("meter").aggregate(n=agg.count(), name="counts").sink(sinks.memory("ckpt_counts"))
    return p


def final_counts() -> dict[str, int]:
    out: dict[str, int] = {}
    batches = memory_batches("ckpt_counts")
    for b in sorted(batches):
        out.update({r["meter"]: r["n"] for r in batches[b].to_pylist()})
    return out


@pytest.mark.spark
@pytest.mark.parametrize("form", ["file_uri", "relative"])
def test_a_run_keeps_every_file_under_the_checkpoint_it_was_given(spark, tmp_path, monkeypatch, form):
    monkeypatch.chdir(tmp_path)
    clear_memory("ckpt_counts")
    given = f"file://{tmp_path}/ckpt" if form == "file_uri" else "ckpt"
    result = counting().run(given, spark=spark)
    assert sum(final_counts().values()) == ROWS
    assert result.rows_in == ROWS
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]  # nothing beside it (no ./file:/...)
    kept = set(os.listdir(tmp_path / "ckpt"))
    assert {"plans", "batches", "metrics.jsonl", "sources", "state", "spark"} <= kept
    assert [m.batch_id for m in metrics_log.read(given)] == list(range(ROWS // PER_BATCH + 1))
    # a restart given the other form of the same location finds everything committed
    other = "ckpt" if form == "file_uri" else f"file://{tmp_path}/ckpt"
    assert counting().run(other, spark=spark).batches == 0


@pytest.mark.spark
def test_state_corruption_in_a_task_reaches_the_caller_as_state_corruption(spark, tmp_path):
    checkpoint = tmp_path / "ckpt"
    clear_memory("ckpt_counts")
    rows = 40 * PER_BATCH  # far more batches than the first run lets through
    counting(rows).run(str(checkpoint), spark=spark, stop_when=lambda executor: executor.batches_done >= 2)
    state = [path for path in checkpoint.joinpath("state").rglob("*.arrow")]
    assert state
    for path in state:
        with open(path, "r+b") as f:
            f.seek(8)
            f.write(b"garbage!")
    # the same checkpoint by its URI: Spark's Python workers cache state files by location,
    # so under this name they must read the corrupted bytes (in the keyed stage's tasks)
    with pytest.raises(StateCorruptionError, match="checksum"):
        counting(rows).run(f"file://{checkpoint}", spark=spark)
