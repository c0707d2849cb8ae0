"""`sluice plan` on a pipeline file, and the JobGraph -> planner DAG conversion."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sluice.cli import main
from sluice.cli.loading import load_pipeline
from sluice.errors import ModelError
from sluice.plan.allocation import allocate_mba, task_rates
from sluice.plan.from_graph import dag_from_graph

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "plan_linear_microdag.py"


def test_graph_converts_to_the_papers_linear_dag():
    dag = dag_from_graph(load_pipeline(str(EXAMPLE)).job_graph())
    assert dag.topological_order() == ["S", "X", "P", "T", "B", "F", "K"]
    assert dag.by_id["S"].kind == "source" and dag.by_id["K"].kind == "sink"
    assert allocate_mba(dag, 100).tasks["B"].threads == 170
    assert set(task_rates(dag, 100).values()) == {100}


def test_operator_without_a_model_is_named(tmp_path):
    from sluice import sinks, sources
    from sluice.api import Pipeline

    p = Pipeline("p")
    p.source(sources.generator(fields={"id": sources.Sequence()}), name="S").map(lambda r: r, name="mystery").filter(
        "id > 0", name="f"
    ).sink(sinks.console(), name="K")
    with pytest.raises(ModelError, match="'mystery'.*no performance model"):
        dag_from_graph(p.job_graph())
    dag = dag_from_graph(p.job_graph(), unmodelled="native")
    assert dag.by_id["mystery"].kind == "native" and dag.by_id["f"].kind == "native"
    alloc = allocate_mba(dag, 10)
    assert alloc.tasks["mystery"].threads == 0


def test_sluice_plan_prints_and_writes_a_run_plan(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert main(["plan", str(EXAMPLE), "--rate", "100", "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert "rho = 7 slots" in text
    assert "predicted sustainable rate: 100.0" in text
    assert "spark.executor.cores = 4" in text and "local[7]" in text
    saved = json.loads(out.read_text())
    from sluice.plan.physical import Plan

    Plan.from_json(out.read_text())  # `sluice run --plan` can read it
    blob = next(o for o in saved["model_plan"]["operators"] if o["id"] == "B")
    assert blob["threads"] == 170 and sorted(blob["threads_per_partition"]) == [20, 50, 50, 50]


def test_sluice_plan_json_with_lsa_rsm(capsys):
    assert main(["plan", str(EXAMPLE), "--rate", "50", "--allocation", "LSA", "--mapping", "RSM", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    blob = next(o for o in report["operators"] if o["id"] == "B")
    assert blob["threads"] == 25 and blob["memory"] == pytest.approx(5.98)
    assert report["allocated_slots"] == 7


def test_sluice_plan_rejects_bad_rate(capsys):
    assert main(["plan", str(EXAMPLE), "--rate", "-1"]) == 1
    assert "--rate" in capsys.readouterr().err
