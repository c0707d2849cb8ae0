"""Open windows survive a crash: kill the driver (SIGKILL) at several moments while windows
are open, restart from the checkpoint, and every window result and every late record equals
a run that never failed (the pattern of test_runtime_exactly_once)."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import time

import pyarrow.dataset as ds
import pytest

from sluice.runtime.side_outputs import read_side_output
from tests.pipelines import windows_crash

pytestmark = pytest.mark.spark

ROWS, PER_BATCH = 12000, 2000
BATCHES = ROWS // PER_BATCH
SINKS = ("sliding", "shared", "sessions")
WINDOW_OPS = ("sliding", "shared", "sessions")


def outputs(out: str, checkpoint: str) -> dict[str, dict[int, list]]:
    """sink -> batch id -> sorted rows; and each window operator's late records per batch."""
    result = {}
    for sink in SINKS:
        per_batch = {}
        for d in sorted(glob.glob(os.path.join(out, sink, "batch=*"))):
            assert os.path.exists(os.path.join(d, "_SUCCESS")), f"incomplete batch directory {d}"
            files = sorted(glob.glob(os.path.join(d, "part-*")))
            rows = ds.dataset(files, format="parquet").to_table().to_pylist() if files else []
            per_batch[int(d.rsplit("=", 1)[1])] = sorted((tuple(sorted(r.items())) for r in rows), key=repr)
        result[sink] = per_batch
    for op in WINDOW_OPS:
        late: dict[int, list] = {}
        for record in read_side_output(checkpoint, f"side/{op}/late"):
            late.setdefault(record["batch_id"], []).append(record["record"])
        result[f"late:{op}"] = {b: sorted(records) for b, records in late.items()}
    return result


def done_batches(checkpoint: str) -> set[int]:
    return {int(os.path.basename(p).split(".")[0]) for p in glob.glob(os.path.join(checkpoint, "batches", "*.done.json"))}


def started_batches(checkpoint: str) -> set[int]:
    return {int(os.path.basename(p).split(".")[0]) for p in glob.glob(os.path.join(checkpoint, "batches", "*.start.json"))}


def launch(out: str, checkpoint: str) -> subprocess.Popen:
    env = dict(os.environ, SLUICE_TEST_OUT=out, SLUICE_TEST_ROWS=str(ROWS), SLUICE_TEST_PER_BATCH=str(PER_BATCH),
               SLUICE_MASTER="local[2]")
    return subprocess.Popen([sys.executable, "-m", "sluice", "run", windows_crash.__file__, "--checkpoint", checkpoint,
                             "--quiet"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def kill_when(proc: subprocess.Popen, condition, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the pipeline exited ({proc.returncode}) before the moment to kill it")
        if condition():
            os.killpg(proc.pid, signal.SIGKILL)  # the driver and its Spark JVM, no goodbyes
            proc.wait()
            return
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    pytest.fail("the moment to kill never came")


@pytest.mark.slow
def test_open_windows_survive_sigkill_and_restart(spark, tmp_path):
    reference_out = str(tmp_path / "reference")
    reference_ckpt = os.path.join(reference_out, "checkpoint")
    windows_crash.build(reference_out, ROWS, PER_BATCH).run(reference_ckpt, spark=spark)
    reference = outputs(reference_out, reference_ckpt)
    assert sorted(reference["sliding"]) == list(range(BATCHES))
    assert sum(len(rows) for rows in reference["late:shared"].values()) > 0, "the test stream has late records"

    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    # 1. in the middle of batch 2 (started, not done): windows opened by batches 0-1 are in state
    proc = launch(out, checkpoint)
    kill_when(proc, lambda: 2 in started_batches(checkpoint) and 2 not in done_batches(checkpoint))
    # 2. as soon as a window operator has written state for batch 4, before the commit
    proc = launch(out, checkpoint)
    kill_when(proc, lambda: bool(glob.glob(os.path.join(checkpoint, "state", "*", "deltas", "*4", "*.arrow")))
              and 4 not in done_batches(checkpoint))
    # 3. restart and let it finish
    proc = launch(out, checkpoint)
    assert proc.wait(timeout=400) == 0
    got = outputs(out, checkpoint)
    for name in reference:
        assert got[name] == reference[name], f"{name} differs after crashes"
