"""Ctrl-C stops ``sluice run`` between batches, quietly, and a restart goes on exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from crash_harness import batch_rows, done_batches

PIPELINE = os.path.join(os.path.dirname(__file__), "..", "pipelines", "interruptible.py")
ROWS = 3000


def _run(checkpoint: str, out: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "sluice", "run", PIPELINE, "--checkpoint", checkpoint],
        env=dict(os.environ, SLUICE_MASTER="local[2]", SLUICE_TEST_OUT=out, SLUICE_TEST_ROWS=str(ROWS)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
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
    assert "sluice: stopping after this batch (Ctrl-C again to stop now)" in stderr
    assert "Summary" in stdout and "rows processed" in stdout
    first_run = done_batches(checkpoint)
    assert first_run and len(first_run) < ROWS // 500  # stopped before the end of its input

    proc = _run(checkpoint, out)  # the restart runs to the end of the input
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    rows = [r for batch in batch_rows(out, "doubled").values() for r in batch]
    assert sorted(dict(r)["i"] for r in rows) == list(range(ROWS))  # nothing lost, nothing twice
    assert all(dict(r)["twice"] == 2 * dict(r)["i"] for r in rows)


@pytest.mark.spark
def test_a_batch_spark_starts_after_the_stop_is_refused_whole_and_runs_after_the_restart(spark, tmp_path):
    """Between the last check that no batch runs and the query's stop, Spark may start the
    next batch: it is refused before it writes anything (never cut short half-written), the
    run ends without an error, and the restart runs it exactly once."""
    import sluice
    from sluice import sinks, sources

    def pipeline() -> sluice.Pipeline:
        p = sluice.Pipeline("refused")
        p.source(
            sources.generator(fields={"i": sources.Sequence()}, total_rows=6_000, max_rows_per_batch=1_000), name="numbers"
        ).sink(sinks.files(str(tmp_path / "out")), name="files")
        return p

    checkpoint = str(tmp_path / "ck")

    def stop_after_two(executor) -> bool:  # asks for the stop, but lets the loop go on
        if executor.batches_done >= 2:
            executor.stop_after_this_batch()
        return False

    first = pipeline().run(checkpoint, spark=spark, stop_when=stop_after_two)
    assert 2 <= first.batches < 6
    written = batch_rows(str(tmp_path / "out"), "")  # every batch directory is complete
    assert len(written) == first.batches
    second = pipeline().run(checkpoint, spark=spark)
    rows = [dict(r)["i"] for batch in batch_rows(str(tmp_path / "out"), "").values() for r in batch]
    assert sorted(rows) == list(range(6_000)) and first.rows_in + second.rows_in == 6_000
