"""The dashboard in a real browser: headless Chromium (Debian's package, driven by
Playwright) loads the page while the demo pipeline runs on Spark, and the charts fill with
the job's data and the controller's decision appears.

`make test` installs Chromium when it is missing (scripts/check_browser.sh). Set
SLUICE_DASHBOARD_SCREENSHOT=path.png to keep the screenshot (a run held at a fixed admission
cap; the README's picture of a healthy run is taken by scripts/screenshot_dashboard.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading

import pytest

from sluice.demo import build_pipeline
from sluice.ui import serve

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def points(page, selector: str) -> int:
    return int(page.get_attribute(selector, "data-points") or 0)


@pytest.mark.spark
@pytest.mark.timeout(900)
def test_dashboard_fills_while_a_pipeline_runs(spark, tmp_path):
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: run scripts/check_browser.sh (as root it installs Debian's chromium)")
    from playwright.sync_api import sync_playwright

    from sluice.control import FixedAdmission

    checkpoint = str(tmp_path / "checkpoint")
    pipeline = build_pipeline(str(tmp_path / "out"), rate=5_000)
    pipeline.constrain("2s", over="10s", name="alerts")
    stop = threading.Event()
    errors: list[BaseException] = []

    def run():
        try:
            # the real control loop, with a policy that surely acts: cap admission at 4,000 rows a batch
            pipeline.run(
                checkpoint, spark=spark, policies=[FixedAdmission(4000)], stop_when=lambda _: stop.is_set(), duration=900
            )
        except BaseException as exc:
            errors.append(exc)

    # a screenshot for the docs waits for a fuller picture than the test needs
    keep_shot = os.environ.get("SLUICE_DASHBOARD_SCREENSHOT")
    enough = 20 if keep_shot else 3
    job = threading.Thread(target=run)
    job.start()
    server = serve(checkpoint, port=0, job="smart_meter_demo", constraints=[c.to_dict() for c in pipeline.graph.constraints])
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1250})
            page.goto(server.url)
            page.wait_for_function(
                f"() => document.querySelectorAll('#decisions tr.decision').length > 0"
                f" && +document.getElementById('c-throughput').dataset.points >= {enough}"
                f" && +document.getElementById('c-latency').dataset.points >= {enough}"
                f" && document.querySelector('#heatmaps canvas')"
                f" && +document.querySelector('#heatmaps canvas').dataset.points >= {enough}",
                timeout=800_000 if keep_shot else 300_000,
            )
            assert not errors, errors
            state = page.evaluate("fetch('/api/state').then(r => r.json())")
            batches = [b for b in state["batches"] if not b["skipped"]]
            # the page drew what the job measured: one point per batch with rows, per series
            assert points(page, "#c-operators") == len({op for b in batches for op in b["operators"]}) > 0
            assert page.inner_text("#t-batches").replace(",", "") != "0"
            heatmaps = page.eval_on_selector_all("#heatmaps canvas", "cs => cs.map(c => c.dataset.op)")
            assert set(heatmaps) == {"meter_stats", "spike_alerts"}
            row = page.inner_text("#decisions tbody")
            assert "fixed" in row and "admission * -> 4000" in row and "fixed configuration" in row
            # the latency chart holds the constrained path's mean and the bound of 2,000 ms
            assert page.get_attribute("#c-latency", "data-lines") == "bound alerts: 2.0k ms"
            assert "alerts mean" in page.get_attribute("#c-latency", "data-series").split("|")
            assert "dashed: constraint bound" in page.inner_text("#constraint-note")
            assert any(b["paths"].get("alerts") is not None for b in batches)
            assert page.inner_text("#status").startswith("live")
            # local Spark: one executor (the driver), from the metrics; the plan's two keyed stages
            plan = page.inner_text("#plan")
            assert "executors: 1" in plan and "meter_stats 2 partitions" in plan.replace("\n", " ")
            # when the executor joined, as a wall-clock time, not seconds since the epoch
            since = re.search(r"since\s+(\S+)", plan)
            assert since and ":" in since.group(1) and not re.fullmatch(r"[0-9.]+", since.group(1)), plan
            shot = tmp_path / "dashboard.png"
            page.wait_for_timeout(1500)  # one more poll, so the screenshot shows the latest batch
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000
            if keep_shot:
                shutil.copy(shot, keep_shot)
            browser.close()
    finally:
        stop.set()
        job.join(timeout=120)
        server.stop()
    assert not errors, errors


def test_prometheus_endpoint_reads_the_checkpoint(tmp_path):
    """/metrics serves the checkpoint's figures with conventional names and labels."""
    import urllib.request

    from sluice.runtime.batch.metrics import BatchMetrics, append

    checkpoint = str(tmp_path)
    for i, rows in enumerate([100, 250]):
        append(
            checkpoint,
            BatchMetrics(
                batch_id=i,
                plan_version=0,
                started_at=1000.0 + i,
                duration_s=0.5,
                rows_in=rows,
                rows_by_source={"readings": rows},
                backlog={"readings": 40 - i},
                operators={"parse": {"rows_in": rows, "rows_out": rows - 1, "time_s": 0.25}},
                sinks={"out": {"rows": rows - 1, "latency_p50_ms": 80.0, "latency_p95_ms": 120.0, "latency_p99_ms": 150.0}},
                dead_letters=1,
                executors=[{"host": "driver:4040", "storage_mb": 1.5}],
            ),
        )
    with open(os.path.join(checkpoint, "decisions.jsonl"), "w") as f:
        f.write(json.dumps({"batch_id": 1, "policy": "rebalance", "action": "move", "reason": "hot key group"}) + "\n")
        f.write("{not json\n")  # tolerated: skipped, never fatal
    server = serve(checkpoint, port=0, job="meters")
    try:
        text = urllib.request.urlopen(server.url + "metrics").read().decode()
    finally:
        server.stop()
    lines = set(text.splitlines())
    assert 'sluice_source_rows_total{job="meters",source="readings"} 350.0' in lines
    assert 'sluice_sink_rows_total{job="meters",sink="out"} 348.0' in lines
    assert 'sluice_operator_seconds_total{job="meters",operator="parse"} 0.5' in lines
    assert 'sluice_dead_letters_total{job="meters"} 2.0' in lines
    assert 'sluice_batches_total{job="meters"} 2.0' in lines
    assert 'sluice_source_backlog_rows{job="meters",source="readings"} 39.0' in lines
    assert 'sluice_sink_latency_seconds{job="meters",quantile="0.99",sink="out"} 0.15' in lines
    assert 'sluice_controller_decisions_total{job="meters",policy="rebalance"} 1.0' in lines
    assert 'sluice_last_batch_id{job="meters"} 1.0' in lines
    assert 'sluice_executors{job="meters"} 1.0' in lines
