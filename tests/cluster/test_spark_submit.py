"""docs/cluster.md's spark-submit example as written: its job file, checked by `sluice check`,
then submitted with the pyspark wheel's `spark-submit` and the command the page shows. The
master is spark-submit's (local[2]), not Sluice's default (local[*]), and the output is
every row counted once."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

DOC = Path(__file__).resolve().parents[2] / "docs" / "cluster.md"
STEP = re.compile(r"<!-- cluster: (?P<what>[^>]+?) -->\n```\w*\n(?P<body>.*?)```", re.S)


def steps() -> dict[str, str]:
    return {m["what"]: m["body"] for m in STEP.finditer(DOC.read_text())}


@pytest.mark.timeout(600)
def test_the_spark_submit_example_runs_on_spark_submits_master(tmp_path):
    from sluice import sinks

    doc = steps()
    job = tmp_path / "meters_job.py"
    # the page's file, and a line that says which master the session it ran on had
    job.write_text(
        doc["spark-submit job"]
        + "\n    from pyspark import SparkContext\n\n"
        + "    print('sluice ran on', SparkContext._active_spark_context.master)\n"
    )
    bin_dir = os.path.dirname(sys.executable)
    check = subprocess.run(
        [os.path.join(bin_dir, "sluice"), "check", str(job)], capture_output=True, text=True, cwd=tmp_path, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr

    command = " ".join(line.rstrip("\\").strip() for line in doc["spark-submit command"].strip().splitlines())
    env, argv = {}, []
    for word in shlex.split(command):
        if not argv and "=" in word:
            key, value = word.split("=", 1)
            env[key] = value.replace("$PWD/.venv/bin/python", sys.executable)
        else:
            argv.append(word)
    assert argv[0] == ".venv/bin/spark-submit" and env == {"PYSPARK_PYTHON": sys.executable}
    argv[0] = os.path.join(bin_dir, "spark-submit")
    checkpoint, out = str(tmp_path / "ckpt"), str(tmp_path / "out" / "per_meter")
    argv[-3:] = [str(job), checkpoint, out]
    submitted = subprocess.run(
        argv, capture_output=True, text=True, cwd=tmp_path, timeout=500, env={**os.environ, **env, "SLUICE_SPARK_UI": "0"}
    )
    assert submitted.returncode == 0, submitted.stdout[-3000:] + submitted.stderr[-3000:]
    assert "sluice ran on local[2]" in submitted.stdout, submitted.stdout[-2000:]

    latest = sinks.read_latest(out, keys="meter")
    assert latest.num_rows == 100
    assert sum(latest.column("n").to_pylist()) == 20_000
