"""docs/walkthrough.md as a user would follow it, on its small input: its files written and
its commands run with the real `sluice` command (the first run killed with SIGKILL once it
has counted the first file, the restart stopped with Ctrl-C), its Python run, and the
results it describes checked."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "walkthrough.md"
STEP = re.compile(r"<!-- walkthrough: (?P<what>[^>]+?) -->\n```\w+\n(?P<body>.*?)```", re.S)


def wait_for(condition, proc: subprocess.Popen, what: str, timeout: float = 240) -> None:
    deadline = time.time() + timeout
    while not condition():
        if proc.poll() is not None:
            raise AssertionError(f"sluice run ended before {what}: {proc.communicate()[1]}")
        if time.time() > deadline:
            proc.kill()
            raise AssertionError(f"no {what} within {timeout} s: {proc.communicate()[1]}")
        time.sleep(0.2)


@pytest.mark.spark
@pytest.mark.slow
def test_the_walkthrough_runs_as_written(tmp_path):
    from sluice import sinks

    def per_page() -> dict:
        try:
            table = sinks.read_latest(str(tmp_path / "out" / "per_page"), keys="page")
        except Exception:  # nothing written yet
            return {}
        return {} if table is None else {r["page"]: (r["views"], r["users"]) for r in table.to_pylist()}

    def per_minute() -> dict:
        table = sinks.read_files(str(tmp_path / "out" / "per_minute"))
        return {} if table is None else {(r["page"], r["window_start"].minute): r["views"] for r in table.to_pylist()}

    steps = [(m["what"].strip(), m["body"]) for m in STEP.finditer(DOC.read_text())]
    env = dict(os.environ, SLUICE_MASTER="local[2]")
    runs = 0
    outputs = []
    for what, body in steps:
        if what == "python":
            proc = subprocess.run(
                [sys.executable, "-c", body], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
            )
            assert proc.returncode == 0, proc.stderr
        elif what != "command":  # a file to write
            (tmp_path / what).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / what).write_text(body)
        elif body.split()[:2] == ["sluice", "run"]:
            runs += 1
            proc = subprocess.Popen(
                [sys.executable, "-m", "sluice", *body.split()[1:], "--quiet"],
                cwd=tmp_path,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
            if runs == 1:  # step 4: it counts the first file; step 6 kills it
                wait_for(lambda: per_page().get("/home") == (3, 3), proc, "count of the first file")
                assert per_minute() == {}  # no window closed yet, as the page says
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=60)
            else:  # the restart: the new file counted on the old state, the minutes closed; then Ctrl-C
                wait_for(
                    lambda: per_page().get("/home") == (5, 4) and len(per_minute()) == 2,
                    proc,
                    "the new file's counts and the closed minute",
                )
                proc.send_signal(signal.SIGINT)
                out, err = proc.communicate(timeout=120)
                assert proc.returncode == 0, err
                assert "sluice: stopping after this batch" in err
        else:
            proc = subprocess.run(
                [sys.executable, "-m", "sluice", *body.split()[1:]],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert proc.returncode == 0, proc.stderr
            outputs.append(proc.stdout)
    assert runs == 2
    assert "pipeline 'clicks' is valid" in outputs[0]
    assert outputs[1].startswith("job 'clicks' at checkpoint ckpt")
    assert per_page() == {"/home": (5, 4), "/cart": (2, 2)}  # what step 6 says
    assert per_minute() == {("/home", 0): 2, ("/cart", 0): 1}  # the minute from 00:01 is still open
