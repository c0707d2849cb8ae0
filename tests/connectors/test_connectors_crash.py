"""Exactly once end to end through real brokers: NATS JetStream in, PostgreSQL out.

- SIGKILL of ``sluice run`` (driver and JVM) in the middle of a batch, then a restart on the
  same checkpoint: PostgreSQL ends with exactly the rows of an uninterrupted run, no duplicate and
  no gap, and the per-key upserts equal the counts of the input.
- The broker restarted while a pipeline runs (a private nats-server, never the shared one):
  the source waits for it and goes on, the sink retries, and nothing is lost or doubled.
"""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pytest
from tests import crash_harness as harness
from tests.connector_services import (
    PrivateNats,
    nats_delete,
    nats_messages,
    nats_publish,
    nats_stream,
    pg,
    require,
    unique,
)
from tests.pipelines import connectors_crash

import sluice
from sluice import sinks, sources
from sluice.runtime.sinks import clear_memory, memory_table

pytestmark = pytest.mark.slow
KEYS = 13


def message(i: int) -> bytes:
    return json.dumps({"id": i, "key": f"k{i % KEYS}", "v": i % 100}).encode()


def expected_per_key(n: int) -> list[tuple]:
    totals: dict[str, list[int]] = {}
    for i in range(n):
        t = totals.setdefault(f"k{i % KEYS}", [0, 0])
        t[0] += 1
        t[1] += i % 100
    return sorted((k, c, s) for k, (c, s) in totals.items())


def test_sigkill_and_restart_leave_postgres_equal_to_an_uninterrupted_run(tmp_path):
    require("NATS")
    require("PostgreSQL")
    stream, table = unique("crash"), unique("crash")
    nats_stream(stream)
    checkpoint = str(tmp_path / "ckpt")
    env = {"SLUICE_TEST_STREAM": stream, "SLUICE_TEST_TABLE": table, "SLUICE_TEST_PER_BATCH": "500"}
    n = 4000

    def raw_rows() -> int:
        try:
            return pg(f"SELECT count(*) FROM {table}_raw")[0][0]
        except Exception:
            return 0

    def written(sink: str, batch: int) -> bool:
        try:
            return bool(pg("SELECT 1 FROM sluice_batches WHERE sink = %s AND batch_id = %s", (sink, batch)))
        except Exception:
            return False

    try:
        nats_publish(stream, [message(i) for i in range(n // 2)])
        proc = harness.launch(connectors_crash.__file__, checkpoint, env)
        # killed as soon as batch 2's appended rows are committed in PostgreSQL: most likely
        # before its upserts and its done record, so the restart replays a half-written batch
        harness.kill_when(proc, lambda: written(f"{table}_raw", 2))
        nats_publish(stream, [message(i) for i in range(n // 2, n)])  # more arrives while it is down
        proc = harness.launch(connectors_crash.__file__, checkpoint, env)
        harness.kill_when(
            proc, lambda: raw_rows() >= n and len(harness.started_batches(checkpoint)) == len(harness.done_batches(checkpoint))
        )

        ids = [r[0] for r in pg(f"SELECT id FROM {table}_raw ORDER BY id")]
        assert ids == list(range(n))  # no duplicate, no gap
        assert pg(f"SELECT key, n, total FROM {table}_per_key ORDER BY key") == expected_per_key(n)
    finally:
        nats_delete(stream)
        for suffix in ("raw", "per_key"):
            pg(f"DROP TABLE IF EXISTS {table}_{suffix}")


def test_a_broker_restarted_mid_run_loses_and_doubles_nothing(spark, tmp_path):
    require("PostgreSQL")
    broker = PrivateNats(str(tmp_path / "nats-store"))
    broker.start()
    stream, out = unique("restart"), unique("echo")
    try:
        nats_stream(stream, broker.url)
        nats_stream(out, broker.url)
        n = 1200
        nats_publish(stream, [message(i) for i in range(n // 2)], broker.url)
        schema = pa.schema([("id", pa.int64()), ("key", pa.string()), ("v", pa.int64())])
        clear_memory()
        p = sluice.Pipeline("broker_restart")
        records = p.source(sources.nats(stream, schema, url=broker.url, max_rows_per_batch=100))
        records.sink(sinks.memory("restart_out"))
        records.sink(sinks.nats(f"{out}.rows", url=broker.url))
        restarted = []

        def restart_then_wait(executor):
            if not restarted and executor.batches_done >= 2:
                broker.stop()
                time.sleep(2.0)  # the source plans batches against a broker that is away
                broker.start()
                nats_publish(stream, [message(i) for i in range(n // 2, n)], broker.url)
                restarted.append(time.time())
            table = memory_table("restart_out")
            return bool(restarted) and table is not None and table.num_rows >= n

        p.run(str(tmp_path / "ckpt"), spark=spark, duration=240, stop_when=restart_then_wait)
        assert restarted
        assert sorted(memory_table("restart_out")["id"].to_pylist()) == list(range(n))
        assert sorted(json.loads(m.data)["id"] for m in nats_messages(out, broker.url)) == list(range(n))
    finally:
        broker.stop()
