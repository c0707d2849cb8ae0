"""The terminal side of a job: the rich progress table, the run summary, `sluice status`,
and the plan's figures `sluice plan` prints and `sluice run --plan` applies."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from sluice.cli import main
from sluice.cli.progress_table import ProgressTable, RunTotals
from sluice.cli.run import read_plan_file
from sluice.cli.status import status_text
from sluice.cli.summary import run_summary
from sluice.job import JobResult
from sluice.runtime.batch.metrics import BatchMetrics, append

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "plan_linear_microdag.py"


def batch(i: int, rows: int, *, start: float, late: int = 0, dead: int = 0, p99: float = 100.0) -> BatchMetrics:
    return BatchMetrics(
        batch_id=i,
        plan_version=0,
        started_at=start,
        duration_s=1.0,
        rows_in=rows,
        rows_by_source={"readings": rows},
        backlog={"readings": 500},
        operators={
            "parse": {"rows_in": rows, "rows_out": rows - dead, "time_s": 0.5},
            "per_minute": {"rows_in": rows - dead, "rows_out": 3, "time_s": 0.25, "late_seen": late, "side_late": late},
        },
        sinks={"out": {"rows": 3, "latency_p50_ms": p99 / 2, "latency_p95_ms": p99 * 0.9, "latency_p99_ms": p99}},
        key_groups={"per_minute": {"0": {"rows": rows - dead, "state_bytes": 2048}, "5": {"rows": 0, "state_bytes": 1024}}},
        dead_letters=dead,
        late_records=late,
        executors=[{"host": "driver:7077", "storage_mb": 0.5}],
    )


def test_rates_count_from_the_first_batch_not_from_spark_start_up():
    totals = RunTotals()
    # Spark took 30 s to start before batch 0; three batches of 1 s, one per second
    for i in range(3):
        totals.add(batch(i, 1000, start=1030.0 + i))
    assert totals.elapsed_s == 3.0
    assert totals.rate(totals.rows) == 1000.0


def test_progress_table_shows_sources_operators_and_sinks():
    out = io.StringIO()
    table = ProgressTable(Console(file=out, width=140, force_terminal=False))
    table(batch(0, 1000, start=100.0, dead=2))
    table(batch(1, 3000, start=101.0, late=7, p99=250.0))
    table.control(
        {
            "constraints": {"alerts": {"state": "met", "mean_ms": 120.0, "bound_ms": 500.0}},
            "last_decision": {"batch_id": 1, "action": {"kind": "admission", "target": "*", "value": 2500}},
        }
    )
    table.close()
    text = out.getvalue()
    last = text[text.rfind("batch 1 ") :]
    assert "4,000" in last and "2,000 rows/s" in last  # 4000 rows over 2 s since the first batch
    assert "dead letters 2" in last and "late 7" in last
    rows = {line.split()[1]: line for line in last.splitlines() if line.split()[:1] in (["source"], ["operator"], ["sink"])}
    assert set(rows) == {"readings", "parse", "per_minute", "out"}
    assert "backlog 500" in rows["readings"] and "latency p99 250 ms" in rows["out"]
    assert "3,998" in rows["parse"]  # rows out of parse: 4000 in, 2 dead letters
    control = text[text.rfind("control  ") :].splitlines()[0]  # the controller's state, as the line shows it
    assert "alerts met 120/500 ms" in control and "last: admission * -> 2500 (batch 1)" in control


def test_run_summary_gives_latency_dead_letters_and_late_records(tmp_path):
    metrics = [
        batch(0, 1000, start=10.0, p99=100.0),
        batch(1, 1000, start=11.0, dead=3, late=5, p99=300.0),
        batch(2, 1000, start=12.0, p99=200.0),
    ]
    result = JobResult(str(tmp_path), batches=2, rows_in=2000, elapsed_s=9.0, metrics=metrics)
    text = run_summary(result, str(tmp_path))
    assert "2,000 in 2 micro-batches" in text
    assert "1,000 rows/s from the first batch" in text  # batches 1 and 2: 2000 rows over 2 s
    assert "p99 300 ms" in text  # median of this run's batches (300, 200) is the upper one
    assert "dead letters        3" in text and "late records        5" in text
    assert "control" not in text  # no controller ran
    result.control = {"constraints": {"alerts": {"state": "violated", "mean_ms": 900.0, "bound_ms": 500.0}}}
    assert "  control             alerts violated 900/500 ms" in run_summary(result, str(tmp_path))


def test_status_summarizes_a_checkpoint(tmp_path, capsys):
    checkpoint = str(tmp_path)
    for i in range(4):
        append(checkpoint, batch(i, 1000 * (i + 1), start=100.0 + i, dead=1, p99=100.0 * (i + 1)))
    with open(tmp_path / "decisions.jsonl", "w") as f:
        for i in range(3):
            f.write(
                json.dumps({"batch_id": i, "policy": "batch_sizing", "action": {"kind": "set_max_rows"}, "reason": f"reason {i}"})
                + "\n"
            )
    text = status_text(checkpoint, decisions=2, now=200.0)
    assert "batches            4 (last: 3, 96 s ago)" in text
    assert "10,000 in 4.0 s: 2,500 rows/s" in text
    assert "p99 300 ms" in text and "last batch p99 400 ms" in text
    assert "state              3.0 KiB: per_minute 3.0 KiB" in text
    assert "dead letters       4" in text and "executors          1: driver:7077" in text
    assert "reason 0" not in text and "batch 1: batch_sizing set_max_rows - reason 1" in text and "reason 2" in text
    assert main(["status", checkpoint]) == 0
    assert "batches            4" in capsys.readouterr().out
    assert main(["status", str(tmp_path / "nothing")]) == 1
    assert main(["ui", str(tmp_path / "nothing")]) == 1
    assert "no checkpoint directory at" in capsys.readouterr().err


def test_plan_without_models_says_so_instead_of_an_infinite_rate(tmp_path, capsys):
    pipeline = tmp_path / "p.py"
    pipeline.write_text(
        "from sluice import Pipeline, sinks, sources\n"
        "pipeline = Pipeline('free')\n"
        "pipeline.source(sources.generator(fields={'id': sources.Sequence()}), name='S')"
        ".map(lambda r: r, name='m').sink(sinks.console(), name='K')\n"
    )
    assert main(["plan", str(pipeline), "--rate", "100", "--unmodelled", "native"]) == 0
    text = capsys.readouterr().out
    assert "inf" not in text and "limited by ," not in text
    assert "not bounded by any model" in text


def test_run_applies_the_plans_recommended_master(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert main(["plan", str(EXAMPLE), "--rate", "100", "--output", str(out)]) == 0
    plan, master = read_plan_file(str(out))
    assert master == "local[7]" and plan.version == 0
    out.write_text(plan.to_json())  # a plan written by hand recommends nothing
    assert read_plan_file(str(out))[1] is None


@pytest.mark.spark
def test_sluice_run_with_ui_serves_while_running_and_summarizes(spark, tmp_path, capsys):
    """`sluice run --ui` on a finite pipeline: the dashboard starts, the job runs on the
    session the dashboard lists executors of, and the summary counts what the job did."""
    pipeline = tmp_path / "p.py"
    pipeline.write_text(
        "from sluice import Pipeline, agg, sinks, sources\n"
        "pipeline = Pipeline('cli_ui')\n"
        "rows = pipeline.source(sources.generator(fields={'k': sources.Keys(5)}, rate=None, total_rows=300,"
        " max_rows_per_batch=100))\n"
        f"rows.key_by('k').aggregate(n=agg.count()).sink(sinks.files({str(tmp_path / 'out')!r}))\n"
    )
    checkpoint = str(tmp_path / "checkpoint")
    assert main(["run", str(pipeline), "--checkpoint", checkpoint, "--ui", "--port", "0", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "dashboard at http://127.0.0.1:" in out
    assert "rows processed      300 in 4 micro-batches" in out  # three of 100 rows and the end of input
    assert "dead letters        0" in out and "late records        0" in out
    assert f"`sluice ui {checkpoint}` serves it again" in out
