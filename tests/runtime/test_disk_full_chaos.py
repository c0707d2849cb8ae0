"""A running job's disk (its checkpoint and its files sinks) fills up mid-run and is freed:
the job stops with Sluice's one clear error naming the disk problem, leaves no temporary file,
and once space is freed it resumes on the same checkpoint and runs to the end, its outputs
exactly those of a run on a normal disk.

The fill comes at a random moment (after a random number of committed batches and a random
fraction of a second more), so over many runs it lands in each phase of a batch: Spark's
offset or commit log, a keyed stage's state, a sink's files, the batch records. Whatever the
moment, the checks are exact; the seed is in every failure message."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from benchmarks import chaos_disk
from tests.pipelines import disk_full

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROWS, PER_BATCH = 16_000, 2_000
BATCHES = ROWS // PER_BATCH


@pytest.fixture
def disk(tmp_path):
    """A tmpfs of its own for the job: a disk the test can fill."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    with chaos_disk.tmpfs(str(tmp_path / "disk")) as where:
        yield where


@pytest.fixture
def reference(spark, tmp_path):
    """The outputs of an uninterrupted run on a normal disk (in this process: the shared
    session is already up)."""
    out = str(tmp_path / "reference")
    disk_full.build(out, ROWS, PER_BATCH).run(os.path.join(out, "checkpoint"), spark=spark)
    return chaos_disk.outputs(out)


def test_a_disk_filled_mid_run_stops_the_job_clearly_and_once_freed_it_resumes_exactly(disk, reference, tmp_path):
    seed = int.from_bytes(os.urandom(4), "big")
    rng = random.Random(seed)
    after, delay = rng.randint(1, BATCHES - 4), rng.uniform(0, 0.8)
    moment = f"seed {seed}: filled after {after} batches + {delay:.2f} s"
    one = chaos_disk.fill_and_resume(disk, str(tmp_path / "job"), after, delay, rows=ROWS, per_batch=PER_BATCH)
    stopped = Path(one.log).read_text(errors="replace")

    assert one.returncode is not None, f"{moment}: the job hung on the full disk\n{stopped[-3000:]}"
    assert one.returncode == 1, f"{moment}: exit {one.returncode}\n{stopped[-3000:]}"
    assert one.error.startswith("sluice: error: cannot write "), f"{moment}\n{stopped[-3000:]}"
    assert "No space left on device" in one.error and "Free space" in one.error, f"{moment}: {one.error}"
    assert disk in one.error, f"{moment}: the error names no file on the disk: {one.error}"
    assert "Traceback" not in stopped and "\tat org.apache" not in stopped, f"{moment}: a trace buries the error\n{stopped}"
    assert one.leftovers == [], f"{moment}: temporary files left behind"

    assert one.resumed_returncode == 0, f"{moment}: the resumed run failed\n{Path(one.resumed_log).read_text()[-3000:]}"
    got = chaos_disk.outputs(os.path.join(disk, "out"))
    assert set(range(BATCHES)) <= set(got["counts"]), f"{moment}: batches missing"
    assert got == reference, f"{moment}: the outputs differ from the uninterrupted run's"
    assert chaos_disk.lost_and_duplicated(chaos_disk.source_counts(ROWS, PER_BATCH), got) == (0, 0), moment
