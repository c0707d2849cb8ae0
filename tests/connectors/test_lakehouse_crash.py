"""Exactly once into and out of lakehouse tables across driver SIGKILLs (``sluice run`` in a
subprocess, killed with its JVM, restarted on the same checkpoint):

- sinks: killed the moment a batch's Delta commit is visible (after the Delta commit, most
  likely before the Iceberg commit, the upsert and Spark's batch commit: the replay must
  skip what was committed and write the rest), then the moment a later batch's Iceberg
  snapshot is visible before Spark's commit; the Delta and Iceberg
  tables end with every id exactly once and the per-key upserts equal DuckDB's aggregate.
- source: a Delta source killed mid-batch reads, after the restart, every row of its table
  into the output table exactly once.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from tests import crash_harness as harness
from tests.pipelines import lakehouse_crash

from sluice.runtime.connectors import job_id

pytestmark = pytest.mark.slow


def delta_rows(uri: str) -> pa.Table:
    try:
        return DeltaTable(uri).to_pyarrow_table()
    except Exception:  # the table appears with the first batch
        return pa.table({})


def committed_batch(uri: str, checkpoint: str) -> int:
    try:
        return DeltaTable(uri).transaction_version(job_id(checkpoint)) or -1
    except Exception:  # no table (or no Spark metadata) yet
        return -1


def test_sigkills_between_a_delta_commit_and_sparks_leave_delta_and_iceberg_exact(tmp_path):
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.exceptions import NoSuchTableError

    from sluice.runtime.connectors.iceberg import last_batch

    out, checkpoint, n = str(tmp_path / "out"), str(tmp_path / "ckpt"), 6000
    env = {"SLUICE_TEST_OUT": out, "SLUICE_TEST_MODE": "sinks", "SLUICE_TEST_ROWS": str(n), "SLUICE_TEST_PER_BATCH": "500"}
    proc = harness.launch(lakehouse_crash.__file__, checkpoint, env)
    killed_in: list[int] = []

    def between_commits() -> bool:  # a batch (from 2 on) is in the Delta table, Spark has not committed it
        batch = committed_batch(f"{out}/raw", checkpoint)
        if batch >= 2 and batch not in harness.done_batches(checkpoint):
            killed_in.append(batch)
            return True
        return False

    harness.kill_when(proc, between_commits)
    assert killed_in[-1] not in harness.done_batches(checkpoint)
    catalog = SqlCatalog("sluice", uri=f"sqlite:///{out}/catalog.db", warehouse=f"file://{out}/warehouse")

    def iceberg_between_commits() -> bool:  # the same for the Iceberg table's snapshots
        try:
            batch = last_batch(catalog.load_table("crash.raw"), job_id(checkpoint))
        except NoSuchTableError:
            return False
        if batch > killed_in[0] and batch not in harness.done_batches(checkpoint):
            killed_in.append(batch)
            return True
        return False

    proc = harness.launch(lakehouse_crash.__file__, checkpoint, env)
    harness.kill_when(proc, iceberg_between_commits)
    proc = harness.launch(lakehouse_crash.__file__, checkpoint, env)
    assert proc.wait(timeout=300) == 0

    raw = delta_rows(f"{out}/raw")
    assert sorted(raw["id"].to_pylist()) == list(range(n))  # every id once
    iceberg = catalog.load_table("crash.raw").scan().to_arrow()
    assert sorted(iceberg["id"].to_pylist()) == list(range(n))
    per_key = delta_rows(f"{out}/per_key")  # noqa: F841 - DuckDB reads it by name
    want = duckdb.sql("SELECT key, count(*) AS n, sum(id) AS total FROM raw GROUP BY key ORDER BY key").fetchall()
    got = duckdb.sql("SELECT key, n, total FROM per_key ORDER BY key").fetchall()
    assert got == want and sum(r[1] for r in got) == n


def test_a_delta_source_killed_mid_batch_reads_every_row_once(tmp_path):
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "ckpt")
    versions, per_version = 16, 300
    for v in range(versions):
        write_deltalake(
            f"{out}/bronze",
            pa.table({"id": pa.array(range(v * per_version, (v + 1) * per_version), pa.int64()), "v": [v] * per_version}),
            mode="append",
        )
    n = versions * per_version
    env = {"SLUICE_TEST_OUT": out, "SLUICE_TEST_MODE": "source", "SLUICE_TEST_PER_BATCH": "700"}
    proc = harness.launch(lakehouse_crash.__file__, checkpoint, env)
    harness.kill_when(proc, lambda: 2 in harness.started_batches(checkpoint) and 2 not in harness.done_batches(checkpoint))
    proc = harness.launch(lakehouse_crash.__file__, checkpoint, env)
    harness.kill_when(
        proc,
        lambda: (
            delta_rows(f"{out}/copy").num_rows >= n and harness.started_batches(checkpoint) == harness.done_batches(checkpoint)
        ),
    )
    copy = delta_rows(f"{out}/copy")
    assert sorted(copy["id"].to_pylist()) == list(range(n))
    # admission by whole files: 700 rows per batch is two 300-row versions
    history = DeltaTable(f"{out}/copy").history()
    added = [h["operationMetrics"].get("num_added_rows") for h in history if h["operation"] == "WRITE"]
    assert max(added) <= 700
