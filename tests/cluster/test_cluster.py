"""Sluice on a Spark standalone cluster (a master and two workers from the pyspark wheel):
``sluice run --master spark://...`` with a file:// checkpoint, one executor SIGKILLed
mid-run, gives exactly the output of a local[2] run of the same pipeline. The run serves
Spark's UI (on by default outside the test suite) at the address it prints."""

from __future__ import annotations

import json
import os
import runpy
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
from tests.crash_harness import batch_rows, done_batches, started_batches
from tests.pipelines import __file__ as pipelines_init

pytestmark = [pytest.mark.spark, pytest.mark.slow]

PIPELINE = os.path.join(os.path.dirname(pipelines_init), "cluster_meters.py")
ROWS, PER_BATCH = 12000, 1500
BATCHES = ROWS // PER_BATCH
SINKS = ("totals", "sliding")


def outputs(out: str) -> dict[str, dict[int, list]]:
    return {sink: batch_rows(out, sink) for sink in SINKS}


def local_reference(spark, tmp_path, monkeypatch) -> dict[str, dict[int, list]]:
    """The pipeline's outputs on the test session's local[2]: what a cluster run must equal."""
    monkeypatch.syspath_prepend(os.path.dirname(PIPELINE))  # its `import meter_units`, here
    reference_out = str(tmp_path / "reference")
    build = runpy.run_path(PIPELINE, run_name="__reference__")["build"]
    build(reference_out, ROWS, PER_BATCH).run(str(tmp_path / "reference-ckpt"), spark=spark, ship=PIPELINE)
    return outputs(reference_out)


def test_a_run_on_a_standalone_cluster_survives_a_killed_executor_and_equals_local(spark, tmp_path, monkeypatch):
    from sluice.runtime.cluster import LocalCluster

    reference = local_reference(spark, tmp_path, monkeypatch)
    # every data batch wrote totals; the end-of-input batch has none and leaves no directory
    assert sorted(reference["totals"]) == list(range(BATCHES))
    assert sum(len(rows) for rows in reference["sliding"].values()) > 0

    out, checkpoint = str(tmp_path / "out"), f"file://{tmp_path}/ckpt"
    with LocalCluster(workers=2, cores=1, memory="1g", root=str(tmp_path / "cluster")) as cluster:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SLUICE_SPARK_UI")}
        env.update(SLUICE_TEST_OUT=out, SLUICE_TEST_ROWS=str(ROWS), SLUICE_TEST_PER_BATCH=str(PER_BATCH))
        # from another directory: neither the driver nor the executors find the pipeline's
        # modules through the working directory
        log = tmp_path / "driver.log"
        with open(log, "wb") as sink:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "sluice",
                    "run",
                    PIPELINE,
                    "--master",
                    cluster.master_url,
                    "--checkpoint",
                    checkpoint,
                    "--quiet",
                ],
                env=env,
                cwd=str(tmp_path),
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            killed = kill_an_executor_during(cluster, proc, batch=2, checkpoint=str(tmp_path / "ckpt"))
            applications = spark_ui_applications(log.read_text(errors="replace"))
            proc.wait(timeout=600)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        assert proc.returncode == 0, log.read_text(errors="replace")[-4000:]
        assert killed not in cluster.executor_pids()
    assert [app["name"] for app in applications] == ["sluice"]
    got = outputs(out)
    for sink in SINKS:
        assert got[sink] == reference[sink], f"{sink} differs on the cluster"


def kill_an_executor_during(cluster, proc: subprocess.Popen, batch: int, checkpoint: str, timeout: float = 400) -> int:
    """SIGKILL one executor while ``batch`` runs; its pid."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the run exited ({proc.returncode}) before batch {batch} started")
        executors = cluster.executor_pids()
        if batch in started_batches(checkpoint) and batch not in done_batches(checkpoint) and executors:
            os.kill(executors[0], signal.SIGKILL)
            return executors[0]
        time.sleep(0.05)
    pytest.fail(f"batch {batch} never started")


def spark_ui_applications(log: str) -> list[dict]:
    """What the Spark UI whose address the run printed says through its REST API."""
    printed = [line.split("Spark UI at ", 1)[1].strip() for line in log.splitlines() if "Spark UI at " in line]
    assert printed, f"the run printed no Spark UI address: {log[-2000:]}"
    with urllib.request.urlopen(f"{printed[0]}/api/v1/applications", timeout=30) as response:
        return json.load(response)
