"""Elastic executors on a Spark standalone cluster (a master and two workers from the pyspark
wheel): the controller's ``executors`` action asks Spark for a second executor, which joins
and runs tasks, then releases one, which leaves; the job's output stays exactly once. On
local Spark the same action is rejected with the reason, and nothing changes."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys

import pyarrow as pa
import pytest
from tests.crash_harness import batch_rows
from tests.pipelines import __file__ as pipelines_init

from sluice.control import Controller, Executors, Policy, read_decisions
from sluice.runtime.batch import metrics as metrics_log

PIPELINE = os.path.join(os.path.dirname(pipelines_init), "elastic_executors.py")


def held(m) -> dict[str, dict]:
    return {e["id"]: e for e in m.executors if e.get("id") not in (None, "driver")}


@pytest.mark.spark
@pytest.mark.slow
def test_executors_join_and_leave_between_batches_and_output_stays_exactly_once(tmp_path):
    from tests.pipelines.elastic_executors import spec

    from sluice.runtime.cluster import LocalCluster

    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "ckpt")
    with LocalCluster(workers=2, cores=1, memory="1g", root=str(tmp_path / "cluster")) as cluster:
        log = tmp_path / "driver.log"
        env = {k: v for k, v in os.environ.items() if k != "SLUICE_SPARK_UI"}
        with open(log, "wb") as sink:
            proc = subprocess.Popen(
                [sys.executable, PIPELINE, cluster.master_url, f"file://{checkpoint}", out],
                env=env,
                cwd=str(tmp_path),
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            proc.wait(timeout=600)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        assert proc.returncode == 0, log.read_text(errors="replace")[-4000:]

    batches = metrics_log.read(checkpoint)
    decisions = [d for d in read_decisions(checkpoint) if d["type"] == "decision"]
    assert [d["action"]["value"] for d in decisions] == [2, 1]
    grow, shrink = (d["batch_id"] for d in decisions)
    first = set(held(batches[grow]))
    assert len(first) == 1  # the run held one executor from its first batch
    # the second executor joined after the request and ran tasks of a batch
    joined = [
        (m.batch_id, i)
        for m in batches
        if m.batch_id > grow
        for i, e in held(m).items()
        if i not in first and e.get("tasks", 0) > 0
    ]
    assert joined and joined[0][0] <= shrink
    assert all(e["cores"] == 1 and e["since"] > 0 for m in batches for e in held(m).values())
    # after the release one executor is left, and it stays so
    after = [m for m in batches if m.batch_id > shrink]
    assert after and len(held(after[-1])) == 1
    # exactly once: every admitted row counted once, whatever executors ran it
    admitted = sum(m.rows_in for m in batches)
    assert admitted > 0
    rows = pa.Table.from_batches(spec().generate(0, admitted, 0)).column("meter").to_pylist()
    latest: dict[str, int] = {}
    for _, out_rows in sorted(batch_rows(out, "counts").items()):
        for row in out_rows:
            r = dict(row)
            latest[r["meter"]] = r["n"]
    assert latest == dict(collections.Counter(rows))


class AskForExecutors(Policy):
    name = "ask"

    def propose(self, view):
        return [Executors(count=3, reason="more executors")] if view.batch_id == 0 else []


def test_on_local_resources_an_executors_action_is_rejected_with_the_reason(tmp_path):
    from tests.pipelines.elastic_executors import build

    from sluice.plan.physical import Plan
    from sluice.runtime.batch.metrics import BatchMetrics

    graph = build(str(tmp_path / "out")).graph
    controller = Controller(graph, [AskForExecutors()], checkpoint=str(tmp_path))
    plan = Plan(version=0, max_parallelism=16)
    m = BatchMetrics(batch_id=0, plan_version=0, started_at=0.0, duration_s=1.0, rows_in=10)
    assert controller(m, plan) is None  # nothing changes
    rejected = [d for d in read_decisions(str(tmp_path)) if d["type"] == "rejected"]
    assert len(rejected) == 1 and rejected[0]["action"]["kind"] == "executors"
    assert "standalone cluster" in rejected[0]["reason"]
    assert controller.resources.executors == 1
