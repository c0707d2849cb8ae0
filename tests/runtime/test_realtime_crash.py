"""A SIGKILL in Spark's real-time mode loses no state: the count per key after a restart is
the count of every record sent, none lost and none counted twice (the Kafka sink itself is at
least once there: an update may be written again, with the same running count)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from tests.connector_services import kafka_delete, kafka_produce, kafka_records, kafka_topic, require, unique

from sluice.control.decisions import read_decisions

PIPELINE = os.path.join(os.path.dirname(__file__), "..", "pipelines", "realtime_crash.py")
KEYS = 10

pytestmark = [pytest.mark.slow]


def launch(checkpoint: str, env: dict[str, str]) -> subprocess.Popen:
    """``sluice run`` the pipeline in its own process group (a kill takes its JVM too)."""
    return subprocess.Popen(
        [sys.executable, "-m", "sluice", "run", PIPELINE, "--checkpoint", checkpoint, "--quiet"],
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def latest_counts(topic: str) -> dict[str, int]:
    """The highest count written per key (the "warm" key left out)."""
    best: dict[str, int] = {}
    for _, _, _, value, _ in kafka_records(topic, committed=True, timeout=10):
        row = json.loads(value)
        if row["k"] != "warm":
            best[row["k"]] = max(best.get(row["k"], 0), row["n"])
    return best


def wait_until_reading(src: str, out: str, timeout: float = 120) -> None:
    """The query reads from the latest offsets at its first start: send a record of the key
    "warm" each second until one comes out."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        kafka_produce(src, [json.dumps({"id": -1, "k": "warm"}).encode()])
        if any(json.loads(r[3])["k"] == "warm" for r in kafka_records(out, committed=True, timeout=10)):
            return
        time.sleep(1.0)
    pytest.fail("the real-time query never produced output")


def send(topic: str, first: int, n: int) -> None:
    kafka_produce(topic, [json.dumps({"id": i, "k": f"k{i % KEYS}"}).encode() for i in range(first, first + n)])


def wait_for(topic: str, sent: int, timeout: float) -> dict[str, int]:
    deadline = time.time() + timeout
    counts: dict[str, int] = {}
    while time.time() < deadline:
        counts = latest_counts(topic)
        if sum(counts.values()) >= sent:
            return counts
        time.sleep(1.0)
    return counts


def test_sigkill_in_real_time_mode_loses_no_state(tmp_path):
    require("Kafka")
    src, out = unique("rt_in"), unique("rt_out")
    kafka_topic(src, partitions=2)
    kafka_topic(out, partitions=1)
    checkpoint = str(tmp_path / "checkpoint")
    # real-time mode holds a task slot per source and shuffle partition: 2 + 4 threads
    env = {"SLUICE_TEST_TOPIC": src, "SLUICE_TEST_OUT": out, "SLUICE_MASTER": "local[6]", "SLUICE_SPARK_UI": "0"}
    procs = []
    try:
        first = launch(checkpoint, env)
        procs.append(first)
        wait_until_reading(src, out)
        send(src, 0, 2000)
        counts = wait_for(out, 2000, 120)
        assert sum(counts.values()) == 2000, counts
        time.sleep(6)  # a real-time batch (5 s) ends: offsets and state checkpointed
        send(src, 2000, 1000)
        time.sleep(1.0)  # some of these are being counted as the driver dies
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        decisions = read_decisions(checkpoint)
        assert decisions[0]["type"] == "mode" and decisions[0]["mode"] == "real-time"

        second = launch(checkpoint, env)
        procs.append(second)
        send(src, 3000, 1000)
        counts = wait_for(out, 4000, 120)
        # every record counted once: a restart without the state (from the latest offsets)
        # would have counted only those sent after it
        assert counts == {f"k{k}": 400 for k in range(KEYS)}
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        kafka_delete(src, out)
