"""Torn, stray and damaged files in a checkpoint, and a disk that is full or read-only: each
is tolerated where that is safe or reported naming the file and the way out (no Spark)."""

from __future__ import annotations

import json
import os
import subprocess
import warnings

import pytest

from sluice.control.decisions import DecisionLog, read_decisions
from sluice.errors import CheckpointError
from sluice.runtime.batch import metrics as metrics_log
from sluice.runtime.batch.metrics import BatchMetrics
from sluice.runtime.checkpoint import METRICS, Checkpoint
from sluice.runtime.jsonlines import DamagedLineWarning
from sluice.runtime.lease import LEASE, Lease
from sluice.runtime.planlog import PlanLog


def _metrics(batch_id: int) -> BatchMetrics:
    return BatchMetrics(batch_id=batch_id, plan_version=0, started_at=1.0 + batch_id, duration_s=0.1, rows_in=10)


def test_a_torn_last_line_is_skipped_and_the_next_append_starts_a_line_of_its_own(tmp_path):
    checkpoint = Checkpoint(str(tmp_path))
    for i in range(3):
        metrics_log.append(checkpoint, _metrics(i))
    DecisionLog(checkpoint).append({"type": "decision", "id": 1})
    for name in (METRICS, "decisions.jsonl"):  # a crash (or a full disk) mid-append
        with open(tmp_path / name, "ab") as f:
            f.write(b'{"batch_id": 3, "started_a')
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a torn last line is expected: no warning
        assert [m.batch_id for m in metrics_log.read(checkpoint)] == [0, 1, 2]
        assert read_decisions(checkpoint) == [{"type": "decision", "id": 1}]
    metrics_log.append(checkpoint, _metrics(3))
    DecisionLog(checkpoint).append({"type": "decision", "id": 2})
    with pytest.warns(DamagedLineWarning, match=r"metrics.jsonl, line 4"):
        assert [m.batch_id for m in metrics_log.read(checkpoint)] == [0, 1, 2, 3]
    with pytest.warns(DamagedLineWarning, match=r"decisions.jsonl, line 2"):
        assert [d["id"] for d in read_decisions(checkpoint)] == [1, 2]


def test_only_the_tail_of_the_metrics_is_read_when_asked(tmp_path):
    checkpoint = Checkpoint(str(tmp_path))
    for i in range(200):
        metrics_log.append(checkpoint, _metrics(i))
    size = os.path.getsize(tmp_path / METRICS)
    recent = metrics_log.read(checkpoint, max_bytes=size // 10)
    assert 10 <= len(recent) <= 21 and recent[-1].batch_id == 199
    assert [m.batch_id for m in recent] == list(range(200 - len(recent), 200))


def test_stray_files_in_plans_and_batches_are_not_records(tmp_path):
    from sluice.plan.physical import Plan

    checkpoint = Checkpoint(str(tmp_path))
    log = PlanLog(checkpoint)
    log.write(Plan(version=0, max_parallelism=8))
    checkpoint.write_json(Checkpoint.batch_record(0, "start"), {})
    checkpoint.write_json(Checkpoint.batch_record(0, "done"), {})
    for stray in (
        "plans/notes.txt",
        "plans/000000000.json.bak",
        "plans/copy of 1.json",
        "batches/README",
        "batches/000000001.done.json~",
        "batches/x.done.json",
    ):
        (tmp_path / stray).write_text("not a record")
    assert PlanLog(checkpoint).versions() == [0]
    assert checkpoint.started_batches() == [0] and checkpoint.done_batches() == [0]


def test_a_truncated_plan_entry_or_batch_record_is_named_with_the_way_out(tmp_path):
    from sluice.plan.physical import Plan

    checkpoint = Checkpoint(str(tmp_path))
    PlanLog(checkpoint).write(Plan(version=0, max_parallelism=8))
    path = tmp_path / "plans" / "000000000.json"
    path.write_bytes(path.read_bytes()[:10])
    with pytest.raises(CheckpointError, match=rf"{path}.*damaged.*new checkpoint"):
        PlanLog(checkpoint).latest()
    checkpoint.write_json(Checkpoint.batch_record(4, "done"), {"a": 1})
    record = tmp_path / "batches" / "000000004.done.json"
    record.write_bytes(b'{"a": ')
    with pytest.raises(CheckpointError, match=rf"{record}.*damaged"):
        checkpoint.read_json(Checkpoint.batch_record(4, "done"))


@pytest.mark.parametrize("garbage", [b"garbage", b"{}", b'{"epoch": "x"}', b"\xff\x00"])
def test_a_garbage_lease_is_named_with_the_way_out(tmp_path, garbage):
    (tmp_path / LEASE).write_bytes(garbage)
    with pytest.raises(CheckpointError, match=rf"{tmp_path / LEASE} is damaged.*delete"):
        Lease(Checkpoint(str(tmp_path))).acquire()


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs: a disk that fills up (and can be made read-only)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    where = tmp_path / "disk"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_disk_is_a_clear_error_leaves_no_temporary_file_and_frees_the_lease(small_disk):
    checkpoint = Checkpoint(str(small_disk / "ckpt"))
    lease = Lease(checkpoint)
    lease.acquire()
    PlanLog(checkpoint).write(__import__("sluice.plan.physical", fromlist=["Plan"]).Plan(version=0, max_parallelism=8))
    with pytest.raises(CheckpointError) as error:
        checkpoint.write_bytes("state/big.bin", os.urandom(1 << 20))
    message = str(error.value)
    assert "state/big.bin" in message and "No space left on device" in message and "Free space" in message
    leftovers = [os.path.join(d, f) for d, _, fs in os.walk(small_disk) for f in fs if ".tmp-" in f]
    assert leftovers == []
    with pytest.raises(CheckpointError, match=r"metrics.jsonl.*No space left"):
        metrics_log.append(
            checkpoint,
            BatchMetrics(
                batch_id=0,
                plan_version=0,
                started_at=1.0,
                duration_s=0.1,
                rows_in=1,
                operators={"x" * 10: {"y": 1.0}} | {str(i): {} for i in range(40000)},
            ),
        )
    assert (small_disk / "ckpt" / METRICS).read_bytes() == b""  # the refused append is cut off: no torn line
    lease.release()  # the disk is full: no error from releasing
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    with pytest.raises(CheckpointError, match=r"Read-only file system"):
        checkpoint.write_json("batches/000000001.done.json", {})
    Lease(checkpoint).release()  # nothing held: nothing to do, no error
    assert json.loads((small_disk / "ckpt" / LEASE).read_bytes())["epoch"] == 1


@pytest.mark.spark
def test_a_job_whose_disk_fills_stops_with_a_clear_error_and_runs_on_once_space_is_freed(spark, small_disk):
    import sluice
    from sluice import agg, sinks, sources

    def pipeline():
        p = sluice.Pipeline("disk_full")
        (
            p.source(sources.generator(fields={"k": sources.Keys(1000)}, rate=200_000), name="src")
            .key_by("k")
            .aggregate(n=agg.count(), name="counts")
            .sink(sinks.memory("disk_full_out"))
        )
        return p

    checkpoint = str(small_disk / "ckpt")
    subprocess.run(["mount", "-o", "remount,size=1m", str(small_disk)], check=True)
    with pytest.raises(CheckpointError) as error:
        pipeline().run(checkpoint, spark=spark, duration=120, max_rows_per_batch=20_000)
    message = str(error.value)
    assert "No space left on device" in message and "Free space" in message and checkpoint in message
    leftovers = [os.path.join(d, f) for d, _, fs in os.walk(small_disk) for f in fs if ".tmp-" in f]
    assert leftovers == []
    done = Checkpoint(checkpoint).done_batches()
    assert done  # it ran until the disk was full
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    result = pipeline().run(
        checkpoint,
        spark=spark,
        duration=120,
        max_rows_per_batch=20_000,
        stop_when=lambda _: len(Checkpoint(checkpoint).done_batches()) >= len(done) + 2,
    )
    assert Checkpoint(checkpoint).done_batches()[-1] > done[-1]  # the lease was free and the job went on
    assert result.batches >= 2


def test_a_refused_write_spark_reports_names_where_it_went():
    """Spark's text of a failed log write names no file: the caller says where it went; a
    files sink's failed write job names its batch directory."""
    from sluice.errors import from_traceback

    log = from_traceback("java.io.IOException: No space left on device\n=== Streaming Query ===", "/ck/spark")
    assert isinstance(log, CheckpointError) and str(log).startswith("cannot write /ck/spark: No space left on device.")
    sink = "[TASK_WRITE_FAILED] Task failed while writing rows to file:/out/counts/batch=000000002. SQLSTATE: 58030\n"
    written = from_traceback(sink + "Caused by: java.io.IOException: No space left on device", "/ck/spark")
    assert str(written).startswith("cannot write /out/counts/batch=000000002: No space left on device.")


def test_spark_temporaries_are_removed_and_nothing_else(tmp_path):
    checkpoint = Checkpoint(str(tmp_path))
    uuid = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
    left = [f"spark/commits/.4.{uuid}.tmp", f"spark/commits/..4.{uuid}.tmp.crc", f"spark/offsets/.5.{uuid}.tmp"]
    left.append(f"spark/.metadata.{uuid}.tmp")
    kept = ["spark/commits/3", "spark/commits/.3.crc", "spark/offsets/5", "spark/metadata", "spark/commits/notes.tmp"]
    for rel in left + kept:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"x")
    assert sorted(checkpoint.remove_spark_temporaries()) == sorted(str(tmp_path / rel) for rel in left)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()) == sorted(kept)


def test_the_lease_heartbeat_outlives_a_full_disk(small_disk):
    """While the disk is full the renewals fail; the heartbeat keeps trying, and renews again
    once there is space (nobody else claimed the lease)."""
    import time

    checkpoint = Checkpoint(str(small_disk / "ckpt"))
    lease = Lease(checkpoint, ttl=0.4)
    lease.acquire()
    lease.start_heartbeat()
    filler = small_disk / "filler"
    try:
        with pytest.raises(OSError), open(filler, "wb") as f:
            f.write(b"\0" * (1 << 20))  # fill the disk
        time.sleep(0.5)  # beats fail meanwhile
        assert lease._thread is not None and lease._thread.is_alive()
        filler.unlink()
        before = json.loads((small_disk / "ckpt" / LEASE).read_bytes())["expires_at"]
        time.sleep(0.5)
        assert json.loads((small_disk / "ckpt" / LEASE).read_bytes())["expires_at"] > before
        assert lease._thread.is_alive() and not lease.fenced
    finally:
        lease.release()
