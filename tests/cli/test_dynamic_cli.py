"""`sluice simulate SCENARIO.yaml`: table, JSON, CSV and plot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sluice.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "scenarios"


def test_simulate_writes_summary_csv_and_plot(tmp_path, capsys):
    scenario = tmp_path / "short.yaml"
    scenario.write_text("dataflow: linear-road\nhours: 1\nrate: {kind: random_walk, mean: 100}\nscheduler: CE\n")
    out = tmp_path / "out"
    rc = main(["simulate", str(scenario), "--out", str(out), "--quiet", "--scheduler", "CE", "--scheduler", "SH"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "| scheduler |" in printed and "SH" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert [r["scheduler"] for r in summary["results"]] == ["CE", "SH"]
    assert all(0 <= r["omega"] <= 1 for r in summary["results"])
    lines = (out / "timeseries.csv").read_text().splitlines()
    assert len(lines) == 1 + 2 * 12
    assert (out / "timeseries.png").stat().st_size > 0


def test_simulate_reports_a_bad_scenario(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("scheduler: NOPE\nhours: 1\n")
    assert main(["simulate", str(bad), "--out", str(tmp_path / "o"), "--quiet", "--no-plot"]) == 1
    assert "unknown scheduler" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_example_scenarios_load(name):
    from sluice.sim.scenario import Scenario, build_dataflow, make_scheduler

    sc = Scenario.from_yaml(EXAMPLES / name)
    assert build_dataflow(sc).n_ops in (8, 30)
    make_scheduler(sc.scheduler, sc.scheduler_options)
