"""A session the user made (``run(spark=...)``) with Spark's own defaults: Sluice runs on it
with its SQL settings for the length of the run, and says what to do when the session's
Python workers cannot import Sluice. Each test starts its own driver (a process holds one
SparkContext), so they are slow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import json, sys, tempfile
    from pyspark.sql import SparkSession
    # Spark's defaults (adaptive execution on) and a time zone that is not UTC
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.session.timeZone", "America/New_York").getOrCreate())
    from sluice import Pipeline, agg, sinks, sources
    from sluice import windows as W
    from sluice.errors import SluiceError
    from sluice.runtime.sinks import memory_table
    spec = sources.generator(fields={"meter": sources.Keys(300, prefix="m"), "kwh": sources.Uniform(0.0, 2.0),
                                     "ts": sources.EventTime(jitter=0.5, step=0.001)},
                             total_rows=20_000, seed=3, start_time=1_700_000_000.0, max_rows_per_batch=5_000)
    p = Pipeline("user_session", partitions=3)
    meters = p.source(spec, name="readings").key_by("meter")  # two consumers: Spark observes the source
    meters.window(W.sliding("4s", "1s"), time="ts").aggregate(n=agg.count(), name="windows") \\
        .sink(sinks.memory("windows"))
    meters.aggregate(n=agg.count(), name="running").sink(sinks.memory("running"))
    before = spark.conf.get("spark.sql.adaptive.enabled")
    try:
        result = p.run(tempfile.mkdtemp(), spark=spark)
    except SluiceError as e:
        print(json.dumps({"error": type(e).__name__, "message": str(e)}))
        sys.exit(0)
    last = {}
    for row in memory_table("running").to_pylist():
        last[row["meter"]] = row["n"]
    print(json.dumps({"rows": result.rows_in, "window_records": sum(r["n"] for r in memory_table("windows").to_pylist()),
                      "running_records": sum(last.values()), "adaptive_before": before,
                      "adaptive_after": spark.conf.get("spark.sql.adaptive.enabled")}))
""")


def _clean_env() -> dict:
    """This process's environment without what a Sluice session put there (its PYTHONPATH
    lets any interpreter import Sluice), as a user's shell would have it."""
    return {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH")}


def _run(tmp_path, python: str) -> dict:
    script = tmp_path / "user_session.py"
    script.write_text(SCRIPT)
    env = _clean_env()
    env["PYSPARK_PYTHON"] = python
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_user_session_with_sparks_defaults_runs_with_sluices_settings_and_gets_its_own_back(tmp_path):
    got = _run(tmp_path, sys.executable)
    assert got == {
        "rows": 20_000,
        "window_records": 4 * 20_000,
        "running_records": 20_000,
        "adaptive_before": "true",
        "adaptive_after": "true",
    }


@pytest.mark.slow
def test_workers_that_cannot_import_sluice_get_a_clear_error(tmp_path):
    base = getattr(sys, "_base_executable", None)
    check = subprocess.run([base, "-c", "import sluice"], capture_output=True, env=_clean_env()) if base else None
    if base is None or check is None or check.returncode == 0 or not os.path.exists(base):
        pytest.skip("no interpreter without sluice on this machine")
    got = _run(tmp_path, base)
    assert got["error"] == "EnvironmentProblem"
    assert "cannot import sluice" in got["message"] and f"PYSPARK_PYTHON={sys.executable}" in got["message"]
