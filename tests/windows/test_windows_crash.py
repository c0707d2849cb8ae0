"""Open windows survive a crash: kill the driver (SIGKILL) at several moments while windows
are open, restart from the checkpoint, and every window result and every late record equals
a run that never failed (the pattern of test_runtime_exactly_once)."""

from __future__ import annotations

import os

import pytest
from tests import crash_harness as harness
from tests.crash_harness import batch_rows, done_batches, kill_when, started_batches, state_written
from tests.pipelines import windows_crash

from sluice.runtime.side_outputs import read_side_output

pytestmark = pytest.mark.spark

ROWS, PER_BATCH = 12000, 2000
BATCHES = ROWS // PER_BATCH
SINKS = ("sliding", "shared", "sessions")
WINDOW_OPS = ("sliding", "shared", "sessions")


def outputs(out: str, checkpoint: str) -> dict[str, dict[int, list]]:
    """sink -> batch id -> sorted rows; and each window operator's late records per batch."""
    result = {sink: batch_rows(out, sink) for sink in SINKS}
    for op in WINDOW_OPS:
        late: dict[int, list] = {}
        for record in read_side_output(checkpoint, f"side/{op}/late"):
            late.setdefault(record["batch_id"], []).append(record["record"])
        result[f"late:{op}"] = {b: sorted(records) for b, records in late.items()}
    return result


def launch(out: str, checkpoint: str):
    env = dict(SLUICE_TEST_OUT=out, SLUICE_TEST_ROWS=str(ROWS), SLUICE_TEST_PER_BATCH=str(PER_BATCH))
    return harness.launch(windows_crash.__file__, checkpoint, env)


@pytest.mark.slow
def test_open_windows_survive_sigkill_and_restart(spark, tmp_path):
    reference_out = str(tmp_path / "reference")
    reference_ckpt = os.path.join(reference_out, "checkpoint")
    windows_crash.build(reference_out, ROWS, PER_BATCH).run(reference_ckpt, spark=spark)
    reference = outputs(reference_out, reference_ckpt)
    # windows close from the second batch on, the last at the end of input; a batch that
    # emits nothing writes no directory
    assert len(reference["sliding"]) >= BATCHES - 1 and max(reference["sliding"]) >= BATCHES
    assert sum(len(rows) for rows in reference["late:shared"].values()) > 0, "the test stream has late records"

    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    # 1. in the middle of batch 2 (started, not done): windows opened by batches 0-1 are in state
    proc = launch(out, checkpoint)
    kill_when(proc, lambda: 2 in started_batches(checkpoint) and 2 not in done_batches(checkpoint))
    # 2. as soon as a window operator has written state for batch 4, before the commit
    proc = launch(out, checkpoint)
    kill_when(proc, lambda: state_written(checkpoint, 4) and 4 not in done_batches(checkpoint))
    # 3. restart and let it finish
    proc = launch(out, checkpoint)
    assert proc.wait(timeout=400) == 0
    got = outputs(out, checkpoint)
    for name in reference:
        assert got[name] == reference[name], f"{name} differs after crashes"
