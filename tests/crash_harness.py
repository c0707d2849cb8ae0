"""Run a pipeline file in a subprocess, SIGKILL it at chosen moments, and read what its file
sinks committed: the machinery of the exactly-once tests."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import time

import pyarrow.dataset as ds
import pytest


def batch_rows(out: str, sink: str, fmt: str = "parquet") -> dict[int, list]:
    """batch id -> sorted rows, from the complete batch directories a file sink wrote."""
    per_batch = {}
    for d in sorted(glob.glob(os.path.join(out, sink, "batch=*"))):
        assert os.path.exists(os.path.join(d, "_SUCCESS")), f"incomplete batch directory {d}"
        # an empty batch (e.g. the end-of-input batch) leaves a 0-byte JSON part pyarrow can't read
        files = sorted(f for f in glob.glob(os.path.join(d, "part-*")) if os.path.getsize(f) > 0)
        rows = ds.dataset(files, format=fmt).to_table().to_pylist() if files else []
        per_batch[int(d.rsplit("=", 1)[1])] = sorted((tuple(sorted(r.items())) for r in rows), key=repr)
    return per_batch


def _batches(checkpoint: str, record: str) -> set[int]:
    return {int(os.path.basename(p).split(".")[0]) for p in glob.glob(os.path.join(checkpoint, "batches", f"*.{record}.json"))}


def done_batches(checkpoint: str) -> set[int]:
    return _batches(checkpoint, "done")


def started_batches(checkpoint: str) -> set[int]:
    return _batches(checkpoint, "start")


def state_written(checkpoint: str, batch_id: int) -> bool:
    """A keyed stage has written a delta file for ``batch_id`` (committed or not)."""
    return bool(glob.glob(os.path.join(checkpoint, "state", "*", "deltas", f"*{batch_id}", "*.arrow")))


def launch(pipeline_file: str, checkpoint: str, env: dict[str, str], *args: str) -> subprocess.Popen:
    """``sluice run`` the file (with ``args``, e.g. ``--policies f.yaml``) in its own process
    group (so a kill takes its Spark JVM too)."""
    return subprocess.Popen(
        [sys.executable, "-m", "sluice", "run", pipeline_file, "--checkpoint", checkpoint, "--quiet", *args],
        env=dict(os.environ, SLUICE_MASTER="local[2]", **env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def kill_when(proc: subprocess.Popen, condition, timeout: float = 300) -> None:
    """SIGKILL the pipeline the moment ``condition()`` holds."""
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
