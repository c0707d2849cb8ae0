"""benchmarks/run_all.py knows every benchmark and lists them without running any (no Spark)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from benchmarks import run_all

ROOT = Path(__file__).resolve().parents[2]


def test_run_all_knows_every_benchmark_with_a_main():
    scripts = run_all.benchmark_scripts()
    assert "keyed_throughput" in scripts and "nexmark" in scripts and "measure" not in scripts
    assert set(run_all.BENCHMARKS) == scripts


def test_every_benchmark_publishes_through_the_shared_record():
    """Each benchmark writes its results with measure.Record (anchor, load, outputs_equal)."""
    for name, bench in run_all.BENCHMARKS.items():
        path = ROOT / "benchmarks" / (f"{name}/run.py" if bench.module else f"{name}.py")
        text = path.read_text()
        assert f'Record("{name}"' in text or "Record(NAME" in text, name
        assert ".publish(" in text, name


def test_list_prints_every_benchmark_and_the_budget():
    out = subprocess.run(
        [sys.executable, "benchmarks/run_all.py", "--list"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    listed = [line.split()[0] for line in out.splitlines()]
    assert listed[:-1] == list(run_all.BENCHMARKS)
    assert listed[-1] == "total" and f"budget {run_all.BUDGET_S} s" in out


def test_only_refuses_an_unknown_benchmark():
    done = subprocess.run(
        [sys.executable, "benchmarks/run_all.py", "--list", "--only", "chaining,no_such"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "no_such" in done.stderr


def test_the_summary_is_the_last_json_line():
    lines = ["starting\n", json.dumps({"x": 1}) + "\n", "{not json}\n", json.dumps({"ratio": 1.5, "anchor": {}}) + "\n"]
    assert run_all.last_json(lines) == {"ratio": 1.5, "anchor": {}}
    assert run_all.last_json(["no json here\n"]) is None
