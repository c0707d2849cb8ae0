"""The per-batch metrics record: its typed parts round-trip through metrics.jsonl, and a
line as older checkpoints wrote it (combine stages as ``op.combine`` operators, the slowest
task's time as ``time_s_max``, key groups as ``{op: {kg: {rows, state_bytes}}}``) reads into
the same parts, for the runtime, ``sluice status`` and the dashboard alike."""

from __future__ import annotations

import json

from sluice.core.checkpoint import METRICS, Checkpoint
from sluice.runtime.batch import metrics as metrics_log
from sluice.runtime.batch.metrics import BatchMetrics, KeyGroupLoad, OperatorProgress, SinkProgress, StageProgress, Traffic
from sluice.ui.job_view import batch_point

OLD_LINE = {
    "batch_id": 3,
    "plan_version": 1,
    "started_at": 100.0,
    "duration_s": 0.5,
    "rows_in": 40,
    "rows_by_source": {"src": 40},
    "backlog": {"src": 0},
    "operators": {
        "counts": {"rows_in": 40, "rows_out": 7, "time_s": 0.2, "time_s_max": 0.1, "input_wait_s": 0.05, "side_late": 2},
        "counts.combine": {"rows_in": 40, "rows_out": 9, "time_s": 0.04, "time_s_max": 0.03},
    },
    "sinks": {"out": {"rows": 7, "write_s": 0.1, "committed_ms": 480.0, "latency_p95_ms": 900.0}},
    "key_groups": {"counts": {"0": {"rows": 30, "state_bytes": 100}, "5": {"rows": 10, "state_bytes": 50}}},
    "traffic": {"counts": {"upstream": "up", "rows": 40, "local_rows": 30, "pairs": [[0, 0, 30]], "dropped_rows": 0}},
    "dead_letters": 1,
    "late_records": 2,
    "executors": [],
}

EXPECTED = BatchMetrics(
    batch_id=3,
    plan_version=1,
    started_at=100.0,
    duration_s=0.5,
    rows_in=40,
    rows_by_source={"src": 40},
    backlog={"src": 0},
    operators={
        "counts": OperatorProgress(
            rows_in=40,
            rows_out=7,
            time_s=0.2,
            slowest_task_s=0.1,
            input_wait_s=0.05,
            counters={"side_late": 2},
            combine=StageProgress(rows_in=40, rows_out=9, time_s=0.04, slowest_task_s=0.03),
        )
    },
    sinks={"out": SinkProgress(rows=7, write_s=0.1, committed_ms=480.0, latency_p95_ms=900.0)},
    key_groups={"counts": KeyGroupLoad({0: 30, 5: 10}, {0: 100, 5: 50})},
    traffic={"counts": Traffic(upstream="up", rows=40, local_rows=30, pairs=[[0, 0, 30]], dropped_rows=0)},
    dead_letters=1,
    late_records=2,
)


def test_an_old_line_reads_into_the_typed_parts(tmp_path):
    checkpoint = Checkpoint.of(str(tmp_path))
    checkpoint.append_line(METRICS, json.dumps(OLD_LINE))
    (record,) = metrics_log.read(str(tmp_path))
    assert record == EXPECTED
    assert record.operators["counts"].busy_s == 0.2 - 0.05 + 0.04
    assert record.traffic["counts"].collocation == 0.75 and record.latency_ms == {"p95": 900.0}


def test_the_record_round_trips_through_metrics_jsonl(tmp_path):
    metrics_log.append(str(tmp_path), EXPECTED)
    line = json.loads(Checkpoint.of(str(tmp_path)).read_bytes(METRICS).decode())
    assert "counts.combine" not in line["operators"] and "time_s_max" not in line["operators"]["counts"]
    assert metrics_log.read(str(tmp_path)) == [EXPECTED]


def test_the_dashboard_shows_an_old_line_as_the_same_line_written_now():
    old = batch_point(OLD_LINE, None)
    new = batch_point(json.loads(EXPECTED.to_json()), None)
    assert old == new
    assert old["key_groups"] == {"counts": [30, 0, 0, 0, 0, 10]} and old["state_bytes"] == {"counts": 150}
    assert old["operators"] == {"counts": 0.24} and old["late"] == 2
