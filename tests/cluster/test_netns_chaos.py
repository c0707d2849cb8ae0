"""Sluice on a standalone cluster whose master and workers are separate hosts: each in a
network namespace of its own, on a bridge the driver reaches from the root namespace
(``LocalCluster(network_namespaces=True)``). One run of a keyed pipeline with a checkpoint,
driven by ``sluice run --master spark://...``, goes through three failures:

1. a worker's network is cut while a batch runs and restored a few seconds later;
2. a worker is SIGKILLed with its executor, and a replacement worker joins in a new namespace;
3. the driver's process group is SIGKILLed mid-batch and ``sluice run`` starts again on the
   same checkpoint.

Its outputs equal those of an undisturbed run of the same pipeline on local Spark. Needs
root and iproute2's ``ip``; skipped, saying so, without them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from tests.cluster.test_cluster import BATCHES, PER_BATCH, PIPELINE, ROWS, SINKS, local_reference, outputs
from tests.crash_harness import done_batches, started_batches

pytestmark = [pytest.mark.spark, pytest.mark.slow]

CUT_S = 4.0
# A link that stays down longer than this fails the fetches and calls over it rather than
# waiting Spark's default two minutes; heartbeats often enough for a lost executor to show.
DRIVER_CONF = {
    "spark.executor.memory": "512m",
    "spark.network.timeout": "30s",
    "spark.network.timeoutInterval": "10s",
    "spark.executor.heartbeatInterval": "3s",
}


@pytest.fixture
def namespaces_available() -> None:
    from sluice.errors import EnvironmentProblem
    from sluice.runtime.netns import check_environment

    try:
        check_environment()
    except EnvironmentProblem as exc:
        pytest.skip(f"no network namespaces here: {exc}")


def test_a_cut_network_a_killed_worker_and_a_killed_driver_leave_the_outputs_of_an_undisturbed_run(
    namespaces_available, spark, tmp_path, monkeypatch
):
    from sluice.runtime.cluster import LocalCluster

    reference = local_reference(spark, tmp_path, monkeypatch)
    assert sorted(reference["totals"]) == list(range(BATCHES))

    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "ckpt")
    cluster = LocalCluster(workers=2, cores=1, memory="1g", root=str(tmp_path / "cluster"), network_namespaces=True)
    with cluster:
        assert cluster.network is not None
        names = {m.namespace for m in cluster.network.members.values()}
        assert names <= set(namespaces()), "the cluster's namespaces are not there"

        log = tmp_path / "driver-1.log"
        first = drive(cluster, out, checkpoint, log)
        try:
            # each failure strikes the first batch seen running after the last one struck (a
            # batch of this size can start and commit between two looks on a quiet machine)
            cut_batch = wait_mid_batch(first, log, checkpoint, after=0)
            cluster.cut_worker(0)
            try:
                time.sleep(CUT_S)
            finally:
                cluster.restore_worker(0)

            kill_batch = wait_mid_batch(first, log, checkpoint, after=cut_batch)
            assert cluster.worker_executor_pids(1), "worker 1 runs no executor to lose"
            cluster.kill_worker(1)
            replacement = cluster.add_worker()

            driver_batch = wait_mid_batch(first, log, checkpoint, after=kill_batch)
        finally:
            stop(first)  # the driver and its JVM, no goodbyes
        assert driver_batch not in done_batches(checkpoint)

        second = drive(cluster, out, checkpoint, tmp_path / "driver-2.log")
        try:
            second.wait(timeout=400)
        finally:
            stop(second)
        assert second.returncode == 0, (tmp_path / "driver-2.log").read_text(errors="replace")[-4000:]
        # the replacement worker ran executors of the job (a directory per application)
        assert os.listdir(tmp_path / "cluster" / f"worker-{replacement}"), "the replacement worker ran no executor"
    assert not names & set(namespaces()), "the cluster left namespaces behind"

    got = outputs(out)
    for sink in SINKS:
        assert got[sink] == reference[sink], f"{sink} differs from the undisturbed run"


def drive(cluster, out: str, checkpoint: str, log) -> subprocess.Popen:
    """``sluice run`` the pipeline against the cluster, in its own process group, from
    another directory (the executors get the pipeline's modules as shipped files only)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(SLUICE_TEST_OUT=out, SLUICE_TEST_ROWS=str(ROWS), SLUICE_TEST_PER_BATCH=str(PER_BATCH))
    conf = [arg for key, value in {**cluster.spark_conf(), **DRIVER_CONF}.items() for arg in ("--conf", f"{key}={value}")]
    command = [sys.executable, "-m", "sluice", "run", PIPELINE, "--master", cluster.master_url]
    command += ["--checkpoint", f"file://{checkpoint}", "--quiet", *conf]
    with open(log, "ab") as sink:
        return subprocess.Popen(
            command,
            env=env,
            cwd=os.path.dirname(checkpoint),
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def wait_mid_batch(proc: subprocess.Popen, log, checkpoint: str, after: int, timeout: float = 300) -> int:
    """The first batch after ``after`` seen running (started, not done); returns while it runs."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-4000:]
            pytest.fail(f"the run exited ({proc.returncode}) before a batch after {after} was seen running:\n{tail}")
        done = set(done_batches(checkpoint))
        running = [b for b in started_batches(checkpoint) if b > after and b not in done]
        if running:
            return min(running)
        time.sleep(0.02)
    pytest.fail(f"no batch after {after} started in {timeout:.0f} s")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def namespaces() -> list[str]:
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return [line.split()[0] for line in listing.splitlines() if line.strip()]
