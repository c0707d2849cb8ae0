"""A directory source with ``available_now=True`` on local Spark: it reads the files there,
then ends with the end-of-input batch, so the run returns by itself and every window still
open is emitted, with the counts the files hold."""

from __future__ import annotations

import collections

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice import Pipeline, agg, sinks, sources
from sluice import windows as W
from sluice.runtime.kernels.panes import END_OF_TIME
from sluice.runtime.sinks import clear_memory, memory_batches

pytestmark = pytest.mark.spark

START_US = 1_700_000_000_000_000
FILES, PER_FILE = 3, 400


def test_an_available_now_directory_ends_and_flushes_its_windows(spark, tmp_path):
    inbox = tmp_path / "in"
    inbox.mkdir()
    expected: collections.Counter = collections.Counter()
    for f in range(FILES):
        i = list(range(f * PER_FILE, (f + 1) * PER_FILE))
        ts = [START_US + k * 2_500 for k in i]  # 2.5 ms apart: 3 s of event time in all
        keys = [f"k{k % 3}" for k in i]
        expected.update((key, (t - START_US) // 1_000_000) for key, t in zip(keys, ts))
        pq.write_table(pa.table({"k": keys, "ts": pa.array(ts, type=pa.timestamp("us", tz="UTC"))}), inbox / f"part-{f}.parquet")
    clear_memory()
    p = Pipeline("dir_available_now", partitions=2)
    spec = sources.directory(str(inbox), format="parquet", event_time="ts", max_rows_per_batch=PER_FILE, available_now=True)
    p.source(spec, name="files").key_by("k").window(W.tumbling("1s")).aggregate(n=agg.count(), name="per_second").sink(
        sinks.memory("dir_available_now")
    )

    result = p.run(str(tmp_path / "ckpt"), spark=spark)  # no duration: it ends by itself

    assert [m.rows_in for m in result.metrics] == [PER_FILE] * FILES + [0]
    assert result.metrics[-1].watermark == END_OF_TIME
    rows = [r for t in memory_batches("dir_available_now").values() for r in t.to_pylist()]
    got = {(r["k"], (int(r["window_start"].timestamp() * 1e6) - START_US) // 1_000_000): r["n"] for r in rows}
    assert len(rows) == len(got)  # each window once
    assert got == dict(expected)
    clear_memory()
