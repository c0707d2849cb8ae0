"""`sluice cluster up` starts a standalone cluster that requires spark.authenticate, and a
driver started from the same directory joins it with the cluster's secret."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

_JOB = r"""
import json
from sluice.runtime.session import spark_session
spark = spark_session(master=MASTER, ui=False)
conf = spark.sparkContext.getConf()
total = spark.range(1000).repartition(2).groupBy().sum("id").collect()[0][0]  # runs on executors, with a shuffle
print(json.dumps({"auth": conf.get("spark.authenticate"), "total": total}))
spark.stop()
"""


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_cluster_up_requires_authentication_and_a_run_from_its_directory_joins(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SLUICE_SPARK_AUTH")}
    up = subprocess.run(
        [sys.executable, "-m", "sluice", "cluster", "up", "--workers", "1"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert up.returncode == 0, up.stderr[-3000:]
    try:
        info = json.loads((tmp_path / ".sluice" / "cluster.json").read_text())
        secret_file = info["secret_file"]
        assert stat.S_IMODE(os.stat(secret_file).st_mode) == 0o600
        properties = open(secret_file).read()
        assert "spark.authenticate true" in properties and "spark.authenticate.secret " in properties
        # the master and the worker run with the properties file (their command lines name it, not the secret)
        checked = 0
        for pid in info["pids"]:
            children = subprocess.run(
                ["pgrep", "-g", str(pid), "-f", "deploy"], capture_output=True, text=True, check=False
            ).stdout.split()
            for child in children:
                with open(f"/proc/{child}/cmdline", "rb") as f:
                    cmdline = f.read().decode(errors="replace")
                assert secret_file in cmdline
                assert properties.split("spark.authenticate.secret ")[1].strip() not in cmdline
                checked += 1
        assert checked >= 2  # the master's JVM and the worker's
        logs = tmp_path / ".sluice" / "cluster" / "logs"
        for name in ("master.log", "worker-0.log"):
            assert "authentication enabled" in (logs / name).read_text(errors="replace"), name
        job = subprocess.run(
            [sys.executable, "-c", f"MASTER = {info['master_url']!r}\n" + _JOB],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert job.returncode == 0, job.stderr[-3000:]
        result = json.loads(job.stdout.strip().splitlines()[-1])
        assert result == {"auth": "true", "total": sum(range(1000))}
    finally:
        subprocess.run(
            [sys.executable, "-m", "sluice", "cluster", "down"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            timeout=120,
            check=False,
        )
