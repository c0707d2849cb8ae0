"""The demo pipeline end to end (in-process, finite input) and the CLI's error paths."""

from __future__ import annotations

import os
import subprocess

import pytest

from sluice.cli import main as cli_main
from sluice.demo import SPIKE_FACTOR, build_pipeline
from sluice.runtime.batch import metrics as metrics_log
from sluice.runtime.side_outputs import DEAD_LETTER, read_side_output
from sluice.runtime.sinks import read_files


@pytest.mark.spark
def test_demo_pipeline_counts_every_valid_reading_and_isolates_corrupt_ones(spark, tmp_path):
    rows = 30_000
    pipeline = build_pipeline(str(tmp_path), rate=None, total_rows=rows)
    result = pipeline.run(str(tmp_path / "checkpoint"), spark=spark)
    dead = read_side_output(str(tmp_path / "checkpoint"), DEAD_LETTER)
    assert dead and all(d["operator"] == "parse" and "corrupt reading" in d["error"] for d in dead)
    stats = read_files(str(tmp_path / "stats")).to_pandas()
    final = stats.groupby("meter")["readings"].max()  # running counts only grow
    records = metrics_log.read(str(tmp_path / "checkpoint"))
    # the end-of-input batch has no rows, and no operator metrics
    valid = sum(m.operators["meter_stats"]["rows_in"] for m in records if m.rows_in)
    assert final.sum() == valid
    assert valid + len(dead) <= rows and rows - valid - len(dead) < rows * 0.01  # the voltage filter drops a few
    assert sum(m.rows_in for m in records) == rows == result.rows_in
    alerts = read_files(str(tmp_path / "alerts"), format="json")
    if alerts is not None:
        a = alerts.to_pandas()
        assert (a["kwh"] > SPIKE_FACTOR * a["running_mean"]).all()


def test_cli_lists_its_commands(capsys):
    with pytest.raises(SystemExit):
        cli_main(["--help"])
    out = capsys.readouterr().out
    for command in ("run", "demo", "plan", "profile", "simulate"):
        assert command in out


def test_cli_run_reports_a_missing_file_clearly(capsys):
    assert cli_main(["run", "no/such/pipeline.py"]) == 1
    assert "no such pipeline file: no/such/pipeline.py" in capsys.readouterr().err


def test_cli_run_reports_a_file_without_pipeline(tmp_path, capsys):
    f = tmp_path / "p.py"
    f.write_text("x = 1\n")
    assert cli_main(["run", str(f)]) == 1
    assert "must define a variable `pipeline`" in capsys.readouterr().err


def test_make_checks_java_with_a_clear_message(tmp_path):
    script = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "check_java.sh")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "java").write_text("#!/bin/sh\necho 'openjdk version \"11.0.2\" 2019-01-15' >&2\n")
    (fake / "java").chmod(0o755)
    env = {"PATH": f"{fake}:/usr/bin:/bin"}
    proc = subprocess.run(["bash", script], env=env, capture_output=True, text=True)
    assert proc.returncode == 1 and "Spark needs Java 17 or newer" in proc.stderr and "apt-get install" in proc.stderr
    env = {"PATH": "/nonexistent"}
    proc = subprocess.run(["/bin/bash", script], env=env, capture_output=True, text=True)
    assert proc.returncode == 1 and "no 'java' was found" in proc.stderr
