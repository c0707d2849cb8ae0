"""Ctrl-C stops ``sluice run`` between batches, quietly, and a restart goes on exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from crash_harness import batch_rows, done_batches

PIPELINE = os.path.join(os.path.dirname(__file__), "pipelines", "interruptible.py")
ROWS = 3000


def _run(checkpoint: str, out: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "sluice", "run", PIPELINE, "--checkpoint", checkpoint],
        env=dict(os.environ, SLUICE_MASTER="local[2]", SLUICE_TEST_OUT=out, SLUICE_TEST_ROWS=str(ROWS)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )


@pytest.mark.slow
def test_ctrl_c_stops_quietly_between_batches_and_a_restart_goes_on_exactly_once(tmp_path):
    checkpoint, out = str(tmp_path / "ck"), str(tmp_path / "out")
    proc = _run(checkpoint, out)
    deadline = time.time() + 240
    while not done_batches(checkpoint) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the pipeline ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)  # what Ctrl-C sends the driver
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr and "Exception" not in stderr and "at org.apache" not in stderr, stderr
    assert "Summary" in stdout and "rows processed" in stdout
    first_run = done_batches(checkpoint)
    assert first_run and len(first_run) < ROWS // 500  # stopped before the end of its input

    proc = _run(checkpoint, out)  # the restart runs to the end of the input
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    rows = [r for batch in batch_rows(out, "doubled").values() for r in batch]
    assert sorted(dict(r)["i"] for r in rows) == list(range(ROWS))  # nothing lost, nothing twice
    assert all(dict(r)["twice"] == 2 * dict(r)["i"] for r in rows)
