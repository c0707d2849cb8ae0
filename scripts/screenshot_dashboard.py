"""Take the README's dashboard screenshot: a healthy run of the demo pipeline.

Runs the demo pipeline (``sluice.demo``) with ``sluice run ... --ui --latency 2s`` at a rate
this machine holds (``--rate``, ``--latency``), opens the dashboard in Debian's headless Chromium (driven by Playwright,
as the dashboard's browser test does), waits until the charts hold enough batches, and writes
the page to ``docs/results/dashboard.png``. It then checks that the picture is of a healthy
run: the recent batches' p95 latency within the bound and no backlog at the source; if not,
it says so and exits 1 (the PNG is written anyway, next to where it was asked for, with
``.unhealthy`` in its name, so that it can be looked at).

    .venv/bin/python scripts/screenshot_dashboard.py [--rate 1000] [--batches 40] [--out PNG]

It starts Spark: on a shared machine, run it through whatever limits concurrent Spark runs.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]

PIPELINE = """\
from sluice.demo import build_pipeline

pipeline = build_pipeline({out!r}, rate={rate})
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_server(url: str, job: subprocess.Popen, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if job.poll() is not None:
            raise SystemExit(f"sluice run ended (exit {job.returncode}) before the dashboard came up")
        try:
            urllib.request.urlopen(url + "api/state", timeout=2).read()
            return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"the dashboard did not answer at {url} within {timeout_s:.0f} s")


def health(state: dict, last: int, bound_ms: float) -> tuple[bool, str]:
    """Healthy: over the last ``last`` batches with rows, every sink's p95 within the bound
    and the backlog flat: at most two batches' worth of rows waiting at the sources after a
    batch (the rows that arrive while a batch runs wait for the next one)."""
    batches = [b for b in state["batches"] if not b["skipped"] and b["rows_in"] > 0][-last:]
    if len(batches) < last:
        return False, f"only {len(batches)} batches with rows"
    p95 = max(lat.get("p95", 0.0) for b in batches for lat in b["latency"].values())
    backlog = max((sum(b["backlog"].values()) for b in batches), default=0)
    rows = sum(b["rows_in"] for b in batches) / len(batches)
    ok = p95 <= bound_ms and backlog <= 2 * rows
    return ok, (
        f"last {last} batches: p95 at most {p95:.0f} ms (bound {bound_ms:.0f}), backlog at most {backlog} rows "
        f"({rows:.0f} rows a batch)"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=int, default=1000, help="readings a second (default 1000)")
    ap.add_argument("--latency", default="5s", help="the p95 goal the job runs under (default 5s)")
    ap.add_argument("--batches", type=int, default=30, help="batches on the charts before the screenshot (default 30)")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "results", "dashboard.png"))
    args = ap.parse_args()
    if not os.path.exists(CHROMIUM):
        raise SystemExit(f"{CHROMIUM} is missing: run scripts/check_browser.sh")
    from playwright.sync_api import sync_playwright

    from sluice.windows import parse_duration

    work = tempfile.mkdtemp(prefix="sluice-screenshot-")
    pipeline_file = os.path.join(work, "demo_pipeline.py")
    with open(pipeline_file, "w") as f:
        f.write(PIPELINE.format(out=os.path.join(work, "out"), rate=args.rate))
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    sluice = os.path.join(os.path.dirname(sys.executable), "sluice")
    command = [sluice, "run", pipeline_file, "--checkpoint", os.path.join(work, "ckpt"), "--ui", "--port", str(port)]
    command += ["--latency", args.latency, "--duration", "1800", "--quiet", "--no-spark-ui"]
    log_path = os.path.join(work, "run.log")
    with open(log_path, "w") as log:
        job = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=work)
    try:
        wait_for_server(url, job)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1250})
            page.goto(url)
            page.wait_for_function(
                f"() => +document.getElementById('t-batches').innerText.replace(/,/g, '') >= {args.batches}",
                timeout=1_500_000,
                polling=1000,
            )
            page.wait_for_timeout(1500)  # one more poll: the screenshot shows the latest batch
            state = json.loads(urllib.request.urlopen(url + "api/state").read())
            bound_ms = parse_duration(args.latency) / 1000  # microseconds
            ok, said = health(state, last=10, bound_ms=bound_ms)
            out = args.out if ok else args.out.replace(".png", ".unhealthy.png")
            page.screenshot(path=out, full_page=True)
            browser.close()
    finally:
        job.send_signal(signal.SIGINT)  # finishes the running batch and stops
        try:
            job.wait(timeout=120)
        except subprocess.TimeoutExpired:
            job.kill()
    print(f"{'healthy' if ok else 'NOT healthy'}: {said}; wrote {out} (run log: {log_path})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
