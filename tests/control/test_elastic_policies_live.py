"""The thesis's schedulers live on a Spark standalone cluster (two workers of one core): CE,
GA and PLAStiCC each decide the executors a job holds as its input rises above what one
executor holds and falls back; each decision is actuated (the executor asked for joins and
runs tasks, the one released leaves) and every reading is counted once."""

from __future__ import annotations

import collections
import os
import re
import signal
import subprocess
import sys

import pyarrow as pa
import pytest
from tests.crash_harness import batch_rows
from tests.pipelines import __file__ as pipelines_init

from sluice.control import read_decisions
from sluice.runtime.batch import metrics as metrics_log

PIPELINE = os.path.join(os.path.dirname(pipelines_init), "elastic_policies.py")

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from sluice.runtime.cluster import LocalCluster

    with LocalCluster(workers=2, cores=1, memory="1g", root=str(tmp_path_factory.mktemp("cluster"))) as running:
        yield running


def held(m) -> dict[str, dict]:
    return {e["id"]: e for e in m.executors if e.get("id") not in (None, "driver")}


@pytest.mark.parametrize("policy", ["ce", "ga", "plasticc"])
def test_an_elastic_policys_executors_join_and_leave_and_output_stays_exactly_once(cluster, tmp_path, policy):
    from tests.pipelines.elastic_policies import LOW, spec

    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "ckpt")
    log = tmp_path / "driver.log"
    env = {k: v for k, v in os.environ.items() if k != "SLUICE_SPARK_UI"}
    with open(log, "wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, PIPELINE, cluster.master_url, f"file://{checkpoint}", out, policy],
            env=env,
            cwd=str(tmp_path),
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, log.read_text(errors="replace")[-4000:]

    batches = metrics_log.read(checkpoint)
    decisions = [d for d in read_decisions(checkpoint) if d["type"] == "decision" and d["action"]["kind"] == "executors"]
    assert all(d["policy"] == f"elastic_{policy}" for d in decisions)
    counts = [d["action"]["value"] for d in decisions]
    assert 2 in counts and 1 in counts[counts.index(2) :], decisions
    grow = next(d["batch_id"] for d in decisions if d["action"]["value"] == 2)
    # the scale-out answers the rise (hundreds of readings/s offered), not the start's backlog
    offered = float(
        re.search(r"([\d,.]+) rows/s offered", decisions[counts.index(2)]["action"]["reason"]).group(1).replace(",", "")
    )
    assert offered > 2 * LOW, decisions
    shrink = next(d["batch_id"] for d in decisions if d["action"]["value"] == 1 and d["batch_id"] > grow)
    first = set(held(batches[grow]))
    assert len(first) == 1  # one executor until the policy asked for a second
    # the executor asked for joined and ran tasks before the release
    joined = [
        m.batch_id
        for m in batches
        if grow < m.batch_id <= shrink and any(i not in first and e.get("tasks", 0) > 0 for i, e in held(m).items())
    ]
    assert joined, [(m.batch_id, sorted(held(m))) for m in batches]
    # the release was actuated: one executor left after it
    after = [m for m in batches if m.batch_id > shrink]
    assert after and len(held(after[-1])) == 1
    # exactly once: every admitted reading counted once, whatever executors ran it
    admitted = sum(m.rows_in for m in batches)
    assert admitted > 0
    rows = pa.Table.from_batches(spec().generate(0, admitted, 0)).column("meter").to_pylist()
    latest: dict[str, int] = {}
    for _, out_rows in sorted(batch_rows(out, "counts").items()):
        for row in out_rows:
            r = dict(row)
            latest[r["meter"]] = r["n"]
    assert latest == dict(collections.Counter(rows))
