"""Retention keeps the checkpoint bounded while `sluice status` and the dashboard still total
the whole run (no Spark)."""

from __future__ import annotations

import json
import time

import pytest

from sluice.control.decisions import DecisionLog, read_decisions
from sluice.errors import ConfigError
from sluice.runtime import retention
from sluice.runtime.batch import metrics as metrics_log
from sluice.runtime.batch.metrics import BatchMetrics
from sluice.runtime.checkpoint import Checkpoint
from sluice.runtime.side_outputs import DEAD_LETTER, SideOutputWriter
from sluice.ui import job_view
from sluice.ui.job_view import JobView


def _batch(checkpoint: Checkpoint, i: int, started_at: float) -> None:
    checkpoint.write_json(Checkpoint.batch_record(i, "start"), {"watermark": i})
    checkpoint.write_json(Checkpoint.batch_record(i, "done"), {"max_event_us": {}})
    writer = SideOutputWriter(checkpoint, DEAD_LETTER, i, "op", 0)
    writer.dead("op", {"i": i}, "bad")
    writer.flush()
    late = SideOutputWriter(checkpoint, "side/win/late", i, "win", 0)
    late.dead("win", {"i": i}, "late")
    late.flush()
    DecisionLog(checkpoint).append({"type": "decision", "id": i + 1, "batch_id": i, "policy": "p"})
    metrics_log.append(
        checkpoint,
        BatchMetrics(
            batch_id=i, plan_version=0, started_at=started_at, duration_s=0.5, rows_in=10, dead_letters=1, late_records=2
        ),
    )


def test_older_batches_are_pruned_everywhere_and_the_totals_still_cover_the_run(tmp_path, monkeypatch):
    monkeypatch.setenv("SLUICE_RETAIN_BATCHES", "100")
    monkeypatch.setenv("SLUICE_RETAIN_DAYS", "0")
    checkpoint = Checkpoint(str(tmp_path))
    now = time.time()
    for i in range(350):  # metrics.append prunes at batches 100, 200 and 300
        _batch(checkpoint, i, now - 1000 + i)
    kept = [m.batch_id for m in metrics_log.read(checkpoint)]
    assert kept == list(range(201, 350))
    assert checkpoint.done_batches()[0] == 201 and checkpoint.started_batches()[-1] == 349
    assert {int(d.split("=")[1]) for d in checkpoint.dirs(DEAD_LETTER)} == set(range(201, 350))
    assert {int(d.split("=")[1]) for d in checkpoint.dirs("side/win/late")} == set(range(201, 350))
    assert [d["batch_id"] for d in read_decisions(checkpoint)] == list(range(201, 350))
    assert DecisionLog(checkpoint).next_id() == 351  # ids go on
    summary = retention.read_summary(checkpoint)
    assert summary["batches"] == 201 and summary["rows_in"] == 2010 and summary["through_batch"] == 200
    view = JobView(str(tmp_path))
    view.refresh()
    totals = view.totals()
    assert totals["batches"] == 350 and totals["rows"] == 3500 and totals["dead_letters"] == 350
    assert totals["late"] == 700 and totals["first_t"] == pytest.approx(now - 1000)

    from sluice.cli.status import status_text

    text = status_text(str(tmp_path))
    assert "batches            350 " in text and "3,500" in text


def test_old_batches_go_by_age_but_the_latest_are_always_kept(tmp_path):
    checkpoint = Checkpoint(str(tmp_path))
    now = time.time()
    for i in range(250):  # the first 200 are 40 days old
        metrics_log.append(
            checkpoint,
            BatchMetrics(batch_id=i, plan_version=0, duration_s=0.1, rows_in=1, started_at=now - (40 * 86400 if i < 200 else 10)),
        )
    assert retention.prune(checkpoint, 249, retention.Retention(batches=10_000, days=30), now=now) == 150
    assert metrics_log.read(checkpoint)[0].batch_id == 150  # 100 kept even though old


def test_a_dashboard_keeps_a_bounded_tail_in_memory_and_counts_the_rest(tmp_path, monkeypatch):
    monkeypatch.setattr(job_view, "MAX_BATCHES", 50)
    checkpoint = Checkpoint(str(tmp_path))
    view = JobView(str(tmp_path))
    for i in range(400):
        metrics_log.append(checkpoint, BatchMetrics(batch_id=i, plan_version=0, started_at=1000.0 + i, duration_s=0.5, rows_in=i))
        if i % 97 == 0:
            view.refresh()
    state = view.state(-1)
    assert len(view.batches) == 50 and [b["batch_id"] for b in state["batches"]] == list(range(350, 400))
    assert state["totals"]["batches"] == 400 and state["totals"]["rows"] == sum(range(400))
    assert state["totals"]["first_t"] == 1000.0


@pytest.mark.parametrize("batches,days", [(10, 30), (10_000, -1)])
def test_bad_retention_settings_are_config_errors(batches, days):
    with pytest.raises(ConfigError, match="retention"):
        retention.Retention(batches, days)


def test_damaged_summary_does_not_stop_the_totals(tmp_path):
    (tmp_path / retention.SUMMARY).write_text("{not json")
    assert retention.read_summary(str(tmp_path))["batches"] == 0
    assert json.loads(json.dumps(JobView(str(tmp_path)).totals()))["batches"] == 0
