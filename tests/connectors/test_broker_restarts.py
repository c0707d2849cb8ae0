"""A broker or database restarted under a running job (``sluice run``, in its own process):
a Kafka source whose broker goes away mid-run, a PostgreSQL sink whose server does. Each
test starts a private server on a free port (never the shared one), stops it for a few
seconds between batches and starts it again with its data kept. The job says it is waiting
(a ``sluice: waiting for ...`` line), resumes by itself, and its output holds every input
record exactly once."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time

import pyarrow.dataset as ds
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tests import crash_harness as harness
from tests.connector_services import PrivateKafka, PrivatePostgres, unique
from tests.pipelines import broker_restart

pytestmark = pytest.mark.spark

DOWN_S = 6.0  # the server stays away this long: two waiting lines, well within the patience


def run(checkpoint: str, env: dict[str, str], log: str) -> subprocess.Popen:
    """``sluice run`` the restart pipeline, its stderr (where waiting lines go) into ``log``."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "sluice", "run", broker_restart.__file__, "--checkpoint", checkpoint, "--quiet"],
            env=dict(os.environ, SLUICE_MASTER="local[2]", **env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def wait_for(proc: subprocess.Popen, condition, what: str, log: str, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while not condition():
        if proc.poll() is not None:
            pytest.fail(f"the job exited ({proc.returncode}) while waiting for {what}; its log ends:\n{open(log).read()[-3000:]}")
        if time.time() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"timed out waiting for {what}; the job's log ends:\n{open(log).read()[-3000:]}")
        time.sleep(0.1)


def produce(bootstrap: str, topic: str, ids: range) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in ids:
        producer.produce(topic, json.dumps({"id": i, "key": f"k{i % 13}", "v": i % 100}).encode())
    assert producer.flush(30) == 0


def file_ids(out: str) -> list[int]:
    files = [f for f in glob.glob(os.path.join(out, "batch=*", "*.parquet")) if os.path.getsize(f) > 0]
    return sorted(ds.dataset(files).to_table(columns=["id"])["id"].to_pylist()) if files else []


def test_a_kafka_broker_restarted_mid_run_the_source_waits_and_reads_each_record_once(tmp_path):
    broker = PrivateKafka(str(tmp_path / "kafka"))
    broker.start()
    topic, n = unique("restart_in"), 6000
    checkpoint, out, log = str(tmp_path / "ckpt"), str(tmp_path / "out"), str(tmp_path / "job.log")
    env = {
        "SLUICE_TEST_KIND": "kafka",
        "SLUICE_TEST_KAFKA": broker.bootstrap,
        "SLUICE_TEST_TOPIC": topic,
        "SLUICE_TEST_OUT": out,
        "SLUICE_TEST_PER_BATCH": "500",
    }
    proc = None
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # alive until the future resolves
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
        produce(broker.bootstrap, topic, range(n // 2))
        proc = run(checkpoint, env, log)
        wait_for(proc, lambda: len(harness.done_batches(checkpoint)) >= 2, "two batches", log)
        broker.stop()
        stopped = time.time()
        wait_for(proc, lambda: "sluice: waiting for Kafka" in open(log).read(), "the waiting line", log, timeout=30)
        time.sleep(max(0.0, DOWN_S - (time.time() - stopped)))
        broker.start()
        produce(broker.bootstrap, topic, range(n // 2, n))  # more arrives once it is back
        wait_for(proc, lambda: len(file_ids(out)) >= n, "every record in the output", log, timeout=120)
        text = open(log).read()
        assert f"sluice: waiting for Kafka at {broker.bootstrap}" in text
        assert "sluice: source 'records' reached its broker again" in text
        assert proc.poll() is None  # the job waited: it did not fail
        time.sleep(2)  # a batch that would write a record twice would have come by now
        assert file_ids(out) == list(range(n))  # no duplicate, no gap
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        broker.stop()


def test_a_postgresql_server_restarted_mid_run_the_sink_waits_and_writes_each_row_once(tmp_path):
    import psycopg

    server = PrivatePostgres()
    server.start()
    table, n = unique("restart_out"), 16_000
    checkpoint, log = str(tmp_path / "ckpt"), str(tmp_path / "job.log")
    env = {
        "SLUICE_TEST_KIND": "postgres",
        "SLUICE_TEST_PG": server.dsn,
        "SLUICE_TEST_TABLE": table,
        "SLUICE_TEST_ROWS": str(n),
        "SLUICE_TEST_RATE": "800",
        "SLUICE_TEST_PER_BATCH": "800",
    }
    proc = None
    try:
        proc = run(checkpoint, env, log)
        wait_for(proc, lambda: len(harness.done_batches(checkpoint)) >= 3, "three batches", log)
        server.stop()
        stopped = time.time()
        wait_for(proc, lambda: "sluice: waiting for PostgreSQL" in open(log).read(), "the waiting line", log, timeout=30)
        time.sleep(max(0.0, DOWN_S - (time.time() - stopped)))
        server.start()
        assert proc.wait(timeout=120) == 0, open(log).read()[-3000:]  # the finite input ends the job
        text = open(log).read()
        assert f"sluice: waiting for PostgreSQL at '{server.dsn}' (table '{table}')" in text
        assert f"sluice: sink PostgreSQL at '{server.dsn}' (table '{table}') reached its server again" in text
        with psycopg.connect(server.dsn) as conn:
            ids = [r[0] for r in conn.execute(f"SELECT id FROM {table} ORDER BY id")]
        assert ids == list(range(n))  # no duplicate, no gap
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        server.remove()
