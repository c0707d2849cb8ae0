"""The thesis's guard on a running job: an operator reports its error with sluice.report, and
a guard switches to the accurate alternate when the error is above a threshold."""

from __future__ import annotations

import pyarrow as pa
import pytest

import sluice
from sluice import Alt, sinks, sources
from sluice.control import Guards, read_decisions
from sluice.runtime.batch.task_metrics import MetricKey, TaskMetrics
from sluice.runtime.reporting import report, reporting_to


def rough(batch: pa.RecordBatch) -> pa.RecordBatch:
    sluice.report("error", 0.4)
    sluice.report("error", 0.2)  # two reports a call: the batch's metric is their mean
    return batch


def accurate(batch: pa.RecordBatch) -> pa.RecordBatch:
    sluice.report("error", 0.01)
    return batch


def test_reports_outside_an_operator_are_ignored_and_inside_go_to_its_metrics():
    report("error", 1.0)  # a unit test of the function: nowhere to go, no error
    metrics = TaskMetrics(None)
    with reporting_to(metrics, "work"):
        rough(pa.RecordBatch.from_pydict({"id": [1]}))
    assert metrics.values[MetricKey("work", "user.error.sum")] == pytest.approx(0.6)
    assert metrics.values[MetricKey("work", "user.error.count")] == 2


@pytest.mark.spark
def test_a_guard_on_a_reported_error_switches_to_the_accurate_alternate(spark, tmp_path):
    p = sluice.Pipeline("guarded", partitions=1, max_parallelism=4)
    src = p.source(
        sources.generator(fields={"id": sources.Sequence()}, total_rows=400, max_rows_per_batch=100, seed=2), name="src"
    )
    src.map_batches(
        name="work", active="rough", alternates={"accurate": Alt(accurate, value=1.0), "rough": Alt(rough, value=0.6)}
    ).sink(sinks.memory(f"guarded_{tmp_path.name}"), name="out")
    guard = Guards([{"when": "metric('work', 'error') > 0.25", "use": {"work": "accurate"}}])
    result = p.run(str(tmp_path / "ckpt"), spark=spark, policies=[guard])
    ran = [m for m in result.metrics if m.rows_in]
    assert ran[0].alternates == {"work": "rough"}
    assert ran[0].operators["work"]["user.error.sum"] / ran[0].operators["work"]["user.error.count"] == pytest.approx(0.3)
    assert all(m.alternates == {"work": "accurate"} for m in ran[1:]) and len(ran) == 4
    (switch,) = [d for d in read_decisions(str(tmp_path / "ckpt")) if d["type"] == "decision"]
    assert switch["batch_id"] == ran[0].batch_id and "metric('work', 'error') > 0.25" in switch["action"]["reason"]
