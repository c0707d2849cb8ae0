"""Windows close on a quiet stream: after the last batch of data moves the watermark past
every open session and window, no more data comes, and still every one is emitted, exactly
once (a batch without new input follows, ``runtime.batch.event_time``, ``sources.ticks``); also
across a stop and a SIGKILL right after that last batch; processing-time windows close by
the clock alone; and a quiet source with ``idle_timeout`` stops holding the others back."""

from __future__ import annotations

import glob
import os

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from tests import crash_harness as harness
from tests.crash_harness import done_batches, kill_when
from tests.pipelines import quiet_sessions as quiet

from sluice import agg, sinks, sources
from sluice import windows as W
from sluice.runtime.state import KeyGroupStore

pytestmark = pytest.mark.spark

ROWS = sum(t.num_rows for t in quiet.inputs())


def emitted(out: str, sink: str) -> list[tuple]:
    """(meter, start_us, end_us, n) of every row a file sink committed, over all batches."""
    rows = []
    for d in sorted(glob.glob(os.path.join(out, sink, "batch=*"))):
        files = [f for f in glob.glob(os.path.join(d, "part-*")) if os.path.getsize(f) > 0]
        if not os.path.exists(os.path.join(d, "_SUCCESS")) or not files:
            continue
        t = ds.dataset(files, format="parquet").to_table()
        start, end = (
            t[c].cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_pylist() for c in ("window_start", "window_end")
        )
        rows += list(zip(t["meter"].to_pylist(), start, end, t["n"].to_pylist()))
    return rows


def complete(out: str) -> bool:
    want = quiet.expected()
    return all(len(emitted(out, sink)) >= len(want[sink]) for sink in want) and sum(r[3] for r in emitted(out, "proc")) >= ROWS


def check(out: str, checkpoint: str, pipeline) -> None:
    want = quiet.expected()
    for sink in ("sessions", "tumbling"):
        got = emitted(out, sink)
        assert len(got) == len(set(got)), f"{sink}: a window emitted twice"
        assert set(got) == want[sink], sink
    proc = emitted(out, "proc")
    assert len({(r[0], r[1]) for r in proc}) == len(proc) and sum(r[3] for r in proc) == ROWS
    # the processing-time windows are closed and gone; far's session and window stay open
    done = max(done_batches(checkpoint))
    for name, left in (("proc", 0), ("sessions", 1), ("tumbling", 1)):
        store = KeyGroupStore(checkpoint, pipeline.graph[name].id, ["meter"])
        state = store.read(store.index(before_batch=done + 1), range(pipeline.graph.max_parallelism))
        assert (0 if state is None else state.num_rows) == left, name


def test_the_last_batch_closes_every_window_without_more_data(spark, tmp_path):
    inbox, out, checkpoint = str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "ckpt")
    quiet.write_inputs(inbox)
    p = quiet.build(inbox, out)
    result = p.run(checkpoint, spark=spark, duration=120, stop_when=lambda ex: complete(out))
    rows = [m.rows_in for m in result.metrics]
    assert rows[:3] == [240, 240, 1] and set(rows[3:]) == {0}, rows
    # the batch after the last file applies the watermark it moved, an hour ahead
    assert result.metrics[3].watermark == quiet.T0 + (3600 - quiet.DELAY_S) * quiet.S
    check(out, checkpoint, p)

    # a restart with nothing new: nothing is due, no batch runs, nothing is emitted again
    before = {sink: emitted(out, sink) for sink in ("sessions", "tumbling", "proc")}
    again = quiet.build(inbox, out).run(checkpoint, spark=spark, duration=6)
    assert again.batches == 0
    assert {sink: emitted(out, sink) for sink in before} == before


def test_a_restart_after_the_last_batch_emits_what_it_closed(spark, tmp_path):
    inbox, out, checkpoint = str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "ckpt")
    quiet.write_inputs(inbox)
    p = quiet.build(inbox, out)
    running = {}

    def seen(executor) -> bool:
        running["executor"] = executor
        return False

    def after(m) -> None:  # no batch starts after the one of the last file
        if m.batch_id == 2:
            running["executor"].stop_after_this_batch()

    first = p.run(checkpoint, spark=spark, duration=120, stop_when=seen, on_batch=after)
    assert [m.rows_in for m in first.metrics] == [240, 240, 1]
    # as if the driver had died before it asked for the next batch (and so before Spark
    # could log that batch's offsets)
    for request in glob.glob(os.path.join(checkpoint, "sources", "*.tick.json")):
        os.remove(request)
    if os.path.exists(os.path.join(checkpoint, "spark", "offsets", "3")):
        os.remove(os.path.join(checkpoint, "spark", "offsets", "3"))
    quiet.build(inbox, out).run(checkpoint, spark=spark, duration=120, stop_when=lambda ex: complete(out))
    check(out, checkpoint, p)


@pytest.mark.slow
def test_sigkill_after_the_last_batch(tmp_path):
    inbox, out, checkpoint = str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "ckpt")
    quiet.write_inputs(inbox)
    env = {"SLUICE_TEST_IN": inbox, "SLUICE_TEST_OUT": out}
    proc = harness.launch(quiet.__file__, checkpoint, env, "--duration", "120")
    kill_when(proc, lambda: 2 in done_batches(checkpoint))  # the batch of the last file is committed
    proc = harness.launch(quiet.__file__, checkpoint, env, "--duration", "25")
    assert proc.wait(timeout=300) == 0
    check(out, checkpoint, quiet.build(inbox, out))


def test_an_idle_source_stops_holding_the_watermark(spark, tmp_path):
    """Two sources: ``quiet`` sends one early record, then nothing. Without an idle timeout it
    holds the watermark at that record for ever; with one it stops doing so 2 s after its last
    batch, and the busy source's sessions close."""
    inbox, other, out, checkpoint = (str(tmp_path / d) for d in ("in", "other", "out", "ckpt"))
    quiet.write_inputs(inbox)
    os.makedirs(other)
    pq.write_table(
        pa.table({"meter": ["q"], "ts": pa.array([quiet.T0], pa.timestamp("us", tz="UTC")), "watts": [5]}, schema=quiet.SCHEMA),
        os.path.join(other, "part-0.parquet"),
    )
    p = quiet.build(inbox, out)
    # one more source, idle after 2 s without records, into the same sessions
    silent = p.source(
        sources.directory(other, format="parquet", event_time="ts", watermark_delay=quiet.DELAY_S),
        name="silent",
        idle_timeout="2s",
    )
    silent.key_by("meter").window(W.session(quiet.GAP_S)).aggregate(n=agg.count(), name="silent_sessions").sink(
        sinks.files(os.path.join(out, "silent_sessions")), name="silent_out"
    )
    want = quiet.expected()["sessions"]
    result = p.run(
        checkpoint,
        spark=spark,
        duration=120,
        stop_when=lambda ex: len(emitted(out, "sessions")) >= len(want) and emitted(out, "silent_sessions"),
    )
    assert set(emitted(out, "sessions")) == want and len(emitted(out, "sessions")) == len(want)
    assert emitted(out, "silent_sessions") == [("q", quiet.T0, quiet.T0 + quiet.GAP_S * quiet.S, 1)]
    # the watermark followed the busy source once the silent one was idle
    assert max(m.watermark or 0 for m in result.metrics) == quiet.T0 + (3600 - quiet.DELAY_S) * quiet.S
