"""State TTL over an unbounded key space: a running count per user where 95 % of the records
bring a new user and 5 % recur, with and without a TTL, against Spark's
``transformWithStateInPandas`` with a TTL'd value state on the same input.

    .venv/bin/python benchmarks/state_ttl.py [--quick] [--ttl SECONDS]

- **Input**: Parquet files, one per batch, written once and read by both systems through
  their file sources (Sluice: a ``directory`` source admitting one file a batch; Spark:
  ``readStream.parquet`` with ``maxFilesPerTrigger`` 1 and ``trigger(availableNow=True)``).
  Row i's user is ``u<i>`` (new), or for every 20th row ``r<i mod 50,000>`` (recurring).
  Full mode: 20 million rows in 100 batches; quick mode: 120,000 in 8, with a 1 s TTL
  (Spark's anchor calls Python once per key and batch, nearly once per record here: it is
  the slow part).
- **Sluice**: ``key_by("user").aggregate(n=agg.count())`` without a TTL, and with
  ``ttl=TTL, ttl_time="processing"`` (processing time, as Spark's TTL is).
- **Spark (the anchor)**: ``groupBy("user").transformWithStateInPandas`` with a
  ``getValueState(..., ttlDurationMs=TTL)`` count per user, update mode, on RocksDB (the
  only store ``transformWithState`` supports), shuffle partitions = cores.
- **Measured**: rows/s as the median over batches after two warm-up batches of rows /
  batch period (``measure.sustained``); state bytes at the end: Sluice's live state read
  from its key-group store (Arrow bytes of the rows kept), and the on-disk bytes a load of
  every key group reads (deltas and snapshots, ``state_disk_bytes``); Spark's state rows and
  RocksDB's memory and bytes written from the query's last progress. The per-batch state
  series of Sluice's runs shows whether the state levels off (TTL) or grows (none).

Writes docs/results/state_ttl.json; the last line printed is a JSON object with ``ratio``
(Sluice's rows/s with the TTL over the anchor's), ``state_bytes_ttl``, ``state_bytes_no_ttl``,
``rows_per_s_ttl``, ``rows_per_s_no_ttl`` and the anchor's figures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sluice import Pipeline, agg, sinks, sources
from sluice.errors import StateError
from sluice.runtime.session import spark_session

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import Anchor, Record, anchor_conf, cores, no_outputs, spark_batches, spark_conf, sustained

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"
RECURRING_EVERY, RECURRING_USERS = 20, 50_000


def write_input(directory: str, batches: int, per_batch: int) -> None:
    """One Parquet file per batch: users new (``u<i>``) but every 20th row (``r<i % 50,000>``)."""
    os.makedirs(directory, exist_ok=True)
    start = 1_700_000_000_000_000
    for b in range(batches):
        i = np.arange(b * per_batch, (b + 1) * per_batch, dtype=np.int64)
        recurring = i % RECURRING_EVERY == 0
        users = np.where(recurring, np.char.add("r", (i % RECURRING_USERS).astype(str)), np.char.add("u", i.astype(str)))
        table = pa.table(
            {"user": pa.array(users.astype(object), pa.string()), "ts": pa.array(start + i * 10, pa.timestamp("us", tz="UTC"))}
        )
        pq.write_table(table, os.path.join(directory, f"part-{b:05d}.parquet"))


def run_sluice(spark, files: str, workdir: str, batches: int, per_batch: int, ttl_s: float | None) -> dict:
    from sluice.runtime.state import KeyGroupStore

    checkpoint = os.path.join(workdir, "sluice-ttl" if ttl_s else "sluice-no-ttl")
    shutil.rmtree(checkpoint, ignore_errors=True)
    p = Pipeline("state_ttl", partitions=cores(spark))
    users = p.source(sources.directory(files, format="parquet", max_rows_per_batch=per_batch), name="events")
    ttl = {"ttl": ttl_s, "ttl_time": "processing"} if ttl_s else {}
    users.key_by("user").aggregate(n=agg.count(), name="counts", **ttl).sink(sinks.callback(lambda b, t: None), name="out")
    result = p.run(checkpoint, spark=spark, stop_when=lambda ex: ex.batches_done >= batches)
    data = [m for m in result.metrics if m.rows_in]
    rate = sustained([(m.started_at, m.started_at + m.duration_s, m.rows_in) for m in data], warmup=2)
    series = [m.key_groups["counts"].total_state_bytes if "counts" in m.key_groups else 0 for m in data]
    store = KeyGroupStore(checkpoint, "counts", ["user"])
    index = store.index(before_batch=max(m.batch_id for m in result.metrics) + 1)
    live = store.read(index, range(p.graph.max_parallelism))
    return {
        # the live state after each batch, read back from the store: whether it levels off
        "state_rows_per_batch": [_live_rows(store, m.batch_id, p.graph.max_parallelism) for m in data],
        "rows_per_s": round(rate, 1),
        "state_bytes": int(live.nbytes) if live is not None else 0,
        "state_rows": live.num_rows if live is not None else 0,
        "state_disk_bytes": int(sum(store.key_group_sizes(index).values())),
        "disk_bytes_per_batch": series,
        "batches": len(data),
        "expired": int(sum(m.operators.get("counts", {}).get("ttl_expired", 0) for m in data)),
    }


def _live_rows(store, batch_id: int, key_groups: int) -> int | None:
    """Keys held after ``batch_id`` (None: the store no longer keeps that batch's history)."""
    try:
        table = store.read(store.index(before_batch=batch_id + 1), range(key_groups))
    except StateError:
        return None
    return table.num_rows if table is not None else 0


class _Count:
    """Spark's side: a count per user in a value state that expires ``ttl_ms`` after its
    last update (processing time, Spark's only TTL clock)."""

    def __new__(cls, ttl_ms: int):
        import pandas as pd
        from pyspark.sql.streaming import StatefulProcessor
        from pyspark.sql.types import LongType, StructField, StructType

        class Count(StatefulProcessor):
            def init(self, handle) -> None:
                self.count = handle.getValueState("count", StructType([StructField("n", LongType())]), ttl_ms)

            def handleInputRows(self, key, rows, timerValues):
                n = sum(len(frame) for frame in rows)
                if self.count.exists():
                    n += int(self.count.get()[0])
                self.count.update((n,))
                yield pd.DataFrame({"user": [key[0]], "n": [n]})

            def close(self) -> None:
                pass

        return Count()


def run_spark(spark, files: str, workdir: str, ttl_s: float) -> dict:
    checkpoint = os.path.join(workdir, "spark-checkpoint")
    shutil.rmtree(checkpoint, ignore_errors=True)
    schema = spark.read.parquet(files).schema
    frame = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(files)
    counts = frame.groupBy("user").transformWithStateInPandas(
        statefulProcessor=_Count(int(ttl_s * 1000)),
        outputStructType="user string, n long",
        outputMode="Update",
        timeMode="ProcessingTime",
    )
    with spark_conf(spark, anchor_conf("rocksdb", cores(spark))):
        query = (
            counts.writeStream.outputMode("update")
            .foreachBatch(lambda df, b: df.write.format("noop").mode("overwrite").save())
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
    try:
        query.awaitTermination()
    finally:
        query.stop()
    if query.exception() is not None:
        raise RuntimeError(f"Spark's query failed: {query.exception()}")
    batches = spark_batches(query)
    rate = sustained([(s, e, n) for s, e, n, _ in batches], warmup=2)
    last = [p for p in query.recentProgress if p["stateOperators"]][-1]["stateOperators"][0]
    custom = last.get("customMetrics", {})
    return {
        "rows_per_s": round(rate, 1),
        "state_rows": last.get("numRowsTotal"),
        "memory_used_bytes": last.get("memoryUsedBytes"),
        "rocksdb_bytes_written": custom.get("rocksdbTotalBytesWritten"),
        "custom_metrics": {k: v for k, v in custom.items() if "Bytes" in k or "bytes" in k},
        "batches": len(batches),
        "store": "rocksdb",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="120,000 rows in 8 batches (about 2 minutes)")
    parser.add_argument("--ttl", type=float, default=None, help="TTL in seconds (default: 1 quick, 10 full)")
    parser.add_argument("--no-spark", action="store_true", help="skip the anchor")
    args = parser.parse_args()
    record = Record("state_ttl", args.quick)
    batches, per_batch = (8, 15_000) if args.quick else (100, 200_000)
    ttl_s = args.ttl or (1.0 if args.quick else 10.0)
    workdir = tempfile.mkdtemp(prefix="sluice-state-ttl-")
    try:
        files = os.path.join(workdir, "input")
        write_input(files, batches, per_batch)
        spark = spark_session()
        started = time.time()
        no_ttl = run_sluice(spark, files, workdir, batches, per_batch, None)
        with_ttl = run_sluice(spark, files, workdir, batches, per_batch, ttl_s)
        anchor = None if args.no_spark else run_spark(spark, files, workdir, ttl_s)
        result = {
            "benchmark": "state_ttl",
            "quick": args.quick,
            "rows": batches * per_batch,
            "batches": batches,
            "ttl_s": ttl_s,
            "new_key_share": 1 - 1 / RECURRING_EVERY,
            "state_bytes_ttl": with_ttl["state_bytes"],
            "state_bytes_no_ttl": no_ttl["state_bytes"],
            "rows_per_s_ttl": with_ttl["rows_per_s"],
            "rows_per_s_no_ttl": no_ttl["rows_per_s"],
            "anchor_rows_per_s_ttl": None if anchor is None else anchor["rows_per_s"],
            "anchor_state_rows_ttl": None if anchor is None else anchor["state_rows"],
            "anchor_memory_used_bytes_ttl": None if anchor is None else anchor["memory_used_bytes"],
            "sluice_ttl": with_ttl,
            "sluice_no_ttl": no_ttl,
            "ratio": None if anchor is None else round(with_ttl["rows_per_s"] / anchor["rows_per_s"], 3),
            "ratio_is": "Sluice's rows/s with the TTL over the anchor's",
            "anchor_run": anchor,
            "elapsed_s": round(time.time() - started, 1),
        }
        summary = {
            k: result[k]
            for k in (
                "benchmark",
                "ratio",
                "state_bytes_ttl",
                "state_bytes_no_ttl",
                "rows_per_s_ttl",
                "rows_per_s_no_ttl",
                "anchor_rows_per_s_ttl",
                "anchor_state_rows_ttl",
                "anchor_memory_used_bytes_ttl",
            )
        }
        record.publish(
            RESULTS / "state_ttl.json",
            result,
            summary,
            anchor=Anchor(
                ran="none (--no-spark)"
                if anchor is None
                else "Spark's groupBy(user).transformWithStateInPandas with a TTL'd value state counting per user",
                formulation="update mode; the same Parquet files through readStream.parquet, maxFilesPerTrigger 1, availableNow",
                state_store="rocksdb (the only store transformWithState supports)",
                shuffle_partitions=cores(spark),
            ),
            **no_outputs(
                "a processing-time TTL expires keys at moments that depend on each run's speed, so the outputs "
                "of two runs differ by design"
            ),
            spark=spark,
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
