"""What monitoring shows of a job, from its checkpoint alone: the job named by its pipeline,
the watermark and event-time lag per source and stateful operator, state size and dead
letters per operator, in /metrics and `sluice status`."""

from __future__ import annotations

import json
import os
import urllib.request

from sluice.cli.status import status_text
from sluice.runtime.batch.metrics import BatchMetrics, append
from sluice.ui import serve

T0 = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC


def make_checkpoint(path: str) -> None:
    os.makedirs(os.path.join(path, "ckpt", "batches"))
    checkpoint = os.path.join(path, "ckpt")  # a folder name many jobs share: the label must not come from it
    for i in range(3):
        append(
            checkpoint,
            BatchMetrics(
                batch_id=i,
                plan_version=0,
                started_at=T0 + 10 * i,
                duration_s=1.0,
                rows_in=100,
                rows_by_source={"clicks": 100},
                backlog={"clicks": 0},
                operators={"parse": {"rows_in": 100, "rows_out": 98, "time_s": 0.1, "dead_letters": 2}},
                key_groups={
                    "per_user": {"0": {"rows": 60, "state_bytes": 1000 * (i + 1)}, "1": {"rows": 38, "state_bytes": 500}}
                },
                dead_letters=3,
                watermark=int((T0 + 10 * i - 4.5) * 1e6),
            ),
        )
        with open(os.path.join(checkpoint, "batches", f"{i:09d}.done.json"), "w") as f:
            json.dump(
                {"max_event_us_so_far": {"clicks": int((T0 + 10 * i - 1.5) * 1e6)}, "watermark": int((T0 + 10 * i - 4.5) * 1e6)},
                f,
            )
    with open(os.path.join(checkpoint, "pipeline.json"), "w") as f:
        json.dump({"format": 1, "pipeline": "orders", "operators": {"per_user": {}}}, f)


def test_metrics_name_the_job_by_its_pipeline_and_show_event_time_state_and_dead_letters(tmp_path):
    make_checkpoint(str(tmp_path))
    server = serve(str(tmp_path / "ckpt"), port=0)  # as `sluice ui ckpt` does: no --job
    try:
        lines = urllib.request.urlopen(server.url + "metrics", timeout=10).read().decode().splitlines()
    finally:
        server.stop()
    assert 'sluice_batches_total{job="orders"} 3.0' in lines
    assert 'sluice_watermark_seconds{job="orders"} 1.7672256155e+09' in lines
    assert 'sluice_operator_watermark_lag_seconds{job="orders",operator="per_user"} 4.5' in lines
    assert 'sluice_source_event_time_lag_seconds{job="orders",source="clicks"} 1.5' in lines
    assert 'sluice_state_bytes{job="orders",operator="per_user"} 3500.0' in lines
    assert 'sluice_operator_dead_letters_total{job="orders",operator="parse"} 6.0' in lines
    assert 'sluice_operator_dead_letters_total{job="orders",operator="sources"} 3.0' in lines


def test_status_says_the_job_its_event_time_and_who_sent_dead_letters(tmp_path):
    make_checkpoint(str(tmp_path))
    text = status_text(str(tmp_path / "ckpt"), now=T0 + 30)
    assert text.startswith("job 'orders' at checkpoint ")
    assert (
        "  event time         watermark 2026-01-01 00:00:15 UTC, 4.5 s behind (one watermark for every stateful "
        "operator); clicks latest event 2026-01-01 00:00:18 UTC (1.5 s behind)"
    ) in text
    assert "  dead letters       9 (parse 6, sources 3)" in text
    assert "per_user 3.4 KiB" in text


def test_the_dashboard_breaks_its_lines_where_the_job_was_down(tmp_path):
    """Batches every second, then ten minutes without any (the job was down), then more: no
    line is drawn across the gap; the event-time and state charts and the dead letters per
    operator show."""
    from playwright.sync_api import sync_playwright
    from test_dashboard_browser import CHROMIUM, CHROMIUM_ARGS

    make_checkpoint(str(tmp_path))
    checkpoint = str(tmp_path / "ckpt")
    for i, t in enumerate([T0 + 600 + k for k in range(4)], start=3):
        append(
            checkpoint,
            BatchMetrics(
                batch_id=i,
                plan_version=0,
                started_at=t,
                duration_s=0.5,
                rows_in=50,
                rows_by_source={"clicks": 50},
                operators={"parse": {"rows_in": 50, "rows_out": 50, "time_s": 0.1}},
                key_groups={"per_user": {"0": {"rows": 50, "state_bytes": 4000}}},
                sinks={"out": {"rows": 50, "latency_p50_ms": 80.0, "latency_p95_ms": 120.0, "latency_p99_ms": 150.0}},
                watermark=int((t - 3) * 1e6),
            ),
        )
        with open(os.path.join(checkpoint, "batches", f"{i:09d}.done.json"), "w") as f:
            json.dump({"max_event_us_so_far": {"clicks": int((t - 1) * 1e6)}, "watermark": int((t - 3) * 1e6)}, f)
    server = serve(checkpoint, port=0)
    errors: list[str] = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1250})
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(server.url)
            page.wait_for_function("() => +document.getElementById('c-throughput').dataset.points >= 7", timeout=60_000)
            assert page.get_attribute("#c-throughput", "data-breaks") == "1"  # rows/s: one break at the gap
            assert page.get_attribute("#c-event", "data-points") == "7"
            assert page.get_attribute("#c-state", "data-series") == "per_user"
            assert page.inner_text("#dead-note") == "dead letters by operator: parse 6, sources 3"
            assert "clicks latest event" in page.inner_text("#event-note")
            assert page.inner_text("#job") == "orders"
            browser.close()
    finally:
        server.stop()
    assert not errors, errors


def test_the_grafana_dashboard_and_scrape_config_use_metrics_sluice_serves(tmp_path):
    """Every metric the docs' Grafana dashboard queries is one /metrics serves (a renamed
    metric would leave a panel empty without anyone noticing)."""
    import re
    from pathlib import Path

    import yaml

    docs = Path(__file__).resolve().parents[2] / "docs"
    dashboard = json.loads((docs / "monitoring" / "grafana-dashboard.json").read_text())
    queried = {m for p in dashboard["panels"] for t in p["targets"] for m in re.findall(r"sluice_[a-z_]+", t["expr"])}
    scrape = yaml.safe_load((docs / "monitoring" / "prometheus.yml").read_text())
    assert scrape["scrape_configs"][0]["honor_labels"] is True
    make_checkpoint(str(tmp_path))
    checkpoint = str(tmp_path / "ckpt")
    with open(os.path.join(checkpoint, "batches", f"{3:09d}.done.json"), "w") as f:
        json.dump({"max_event_us_so_far": {"clicks": int((T0 + 39) * 1e6)}}, f)
    append(
        checkpoint,
        BatchMetrics(
            batch_id=3,
            plan_version=0,
            started_at=T0 + 40,
            duration_s=1.0,
            rows_in=1,
            rows_by_source={"clicks": 1},
            backlog={"clicks": 5},
            sinks={"out": {"rows": 1, "latency_p50_ms": 1.0, "latency_p95_ms": 2.0, "latency_p99_ms": 3.0}},
            watermark=int((T0 + 30) * 1e6),
            key_groups={"per_user": {"0": {"rows": 1, "state_bytes": 10}}},
            operators={"parse": {"rows_in": 1, "rows_out": 1, "time_s": 0.1, "dead_letters": 1}},
            executors=[{"host": "driver"}],
        ),
    )
    with open(os.path.join(checkpoint, "decisions.jsonl"), "w") as f:
        f.write(json.dumps({"batch_id": 1, "policy": "batch_sizing", "action": "x", "reason": "y"}) + "\n")
    server = serve(checkpoint, port=0, constraints=[{"name": "latency_1", "bound_ms": 800.0}])
    try:
        text = urllib.request.urlopen(server.url + "metrics", timeout=10).read().decode()
    finally:
        server.stop()
    served = set(re.findall(r"^(sluice_[a-z_]+)", text, re.M))
    assert queried and queried <= served, queried - served
    documented = set(re.findall(r"`(sluice_[a-z_]+)`", (docs / "monitoring.md").read_text()))
    assert served <= documented, served - documented
