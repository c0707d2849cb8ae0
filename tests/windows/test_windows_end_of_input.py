"""End of input on local Spark: a finite source's last windows are emitted, exactly once.

When every row of a finite source has been admitted, the source plans one more offset, the
same one plus ``"end": true``; Spark logs it and runs one batch with no rows, in which the
executor reads the flag from the offset log and sets the watermark to the end of time. So
the windows still open close (event and processing time alike), their state goes, and a
restart on the same checkpoint neither runs nor emits anything again.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from sluice import Pipeline, agg, sinks, sources
from sluice import windows as W
from sluice.runtime.batch.executor import ended_in_offset_log
from sluice.runtime.kernels.panes import END_OF_TIME
from sluice.runtime.side_outputs import read_side_output
from sluice.runtime.sinks import clear_memory, memory_batches
from sluice.runtime.state import KeyGroupStore

pytestmark = pytest.mark.spark

START = 1_700_000_000.0
ROWS, PER_BATCH = 3_000, 1_000
WINDOWED = ("event", "proc", "sessions")


def _pipeline(tag: str) -> Pipeline:
    """A finite event-time source; per meter: an event-time tumbling window, a processing-time
    tumbling window and event-time sessions. Jitter makes some records late."""
    spec = sources.generator(
        fields={
            "meter": sources.Keys(5, prefix="m"),
            "kwh": sources.Uniform(0.0, 2.0),
            "ts": sources.EventTime(jitter=2.0, step=0.002),
        },
        total_rows=ROWS,
        seed=11,
        start_time=START,
        max_rows_per_batch=PER_BATCH,
        watermark_delay=0.1,
    )
    p = Pipeline(f"eoi_{tag}", partitions=2)
    meters = p.source(spec, name="readings").key_by("meter")
    meters.window(W.tumbling("1s")).aggregate(n=agg.count(), name="event").sink(sinks.memory(f"{tag}_event"))
    meters.window(W.tumbling("1s"), time="processing").aggregate(n=agg.count(), name="proc").sink(sinks.memory(f"{tag}_proc"))
    meters.window(W.session("0.05s")).aggregate(n=agg.count(), name="sessions").sink(sinks.memory(f"{tag}_sessions"))
    return p


def _emitted(tag: str) -> dict[str, dict[int, pa.Table]]:
    return {name: memory_batches(f"{tag}_{name}") for name in WINDOWED}


def _counted(batches: dict[int, pa.Table]) -> int:
    return sum(sum(t.column("n").to_pylist()) for t in batches.values())


def _late(checkpoint: str, op: str) -> int:
    return len(read_side_output(checkpoint, f"side/{op}/late"))


def _assert_every_record_in_one_window(p: Pipeline, checkpoint: str, tag: str) -> None:
    emitted = _emitted(tag)
    for name in WINDOWED:
        assert _counted(emitted[name]) == ROWS - _late(checkpoint, name), name
    assert _late(checkpoint, "event") > 0 and _late(checkpoint, "proc") == 0
    for name in WINDOWED:  # a window is emitted once: no (key, start) twice
        rows = [r for t in emitted[name].values() for r in t.to_pylist()]
        assert len({(r["meter"], r["window_start"]) for r in rows}) == len(rows), name
    for name in WINDOWED:  # every window closed: no state left
        op = p.graph[name]
        store = KeyGroupStore(checkpoint, op.id, ["meter"])
        after_end = ROWS // PER_BATCH + 1  # the data batches, then the end batch
        state = store.read(store.index(before_batch=after_end), range(p.graph.max_parallelism))
        assert state is None or state.num_rows == 0, name


def test_offset_log_entry_names_the_ended_sources():
    entry = b"\n".join(
        [
            b"v1",
            b'{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}',
            b'{"source": "a", "rows": 10, "start_us": 1, "at_us": 2, "end": true}',
            b'{"source": "b", "rows": 10, "start_us": 1, "at_us": 2}',
            b"-",
            b'{"logOffset": 4}',
            b"17",
        ]
    )
    assert ended_in_offset_log(entry) == {"a"}
    assert ended_in_offset_log(None) == set()


def _executor(sources_: list[tuple[str, str | None]], seen: dict[str, int]):
    """A BatchExecutor with just what ``_watermark`` reads (no Spark)."""
    from sluice.graph.operators import Operator
    from sluice.runtime.batch.compile import SourceInfo
    from sluice.runtime.batch.event_time import EventClock
    from sluice.runtime.batch.executor import BatchExecutor

    executor = object.__new__(BatchExecutor)
    executor.sources = [SourceInfo(Operator(name, "source", name), i, time, 100) for i, (name, time) in enumerate(sources_)]
    executor.clock = EventClock(max_event_us=dict(seen))
    return executor


def test_watermark_is_the_end_of_time_only_when_every_source_ended():
    two = _executor([("a", "ts"), ("b", "ts")], {"a": 1_000, "b": 5_000})
    assert two._watermark(set()) == 900
    assert two._watermark({"a"}) == 4_900  # an ended source no longer holds it back
    assert two._watermark({"a", "b"}) == END_OF_TIME
    mixed = _executor([("a", "ts"), ("p", None)], {"a": 1_000})
    assert mixed._watermark({"a"}) == END_OF_TIME - 1  # closes event-time windows, not processing-time
    assert mixed._watermark({"a", "p"}) == END_OF_TIME


def test_processing_time_windows_close_at_the_end_of_time():
    from sluice.graph.windows import ProcessingTime, WindowQuery
    from sluice.runtime.kernels.keyed import BatchContext
    from sluice.runtime.kernels.windows import batch_watermark

    query = WindowQuery(W.tumbling(1), (("n", agg.count()),), ProcessingTime())
    assert batch_watermark(query, BatchContext(0, 0, None, 123)) == 123
    assert batch_watermark(query, BatchContext(0, 0, END_OF_TIME - 1, 123)) == 123
    assert batch_watermark(query, BatchContext(0, 0, END_OF_TIME, 123)) == END_OF_TIME


@pytest.fixture
def memory():
    clear_memory()
    yield
    clear_memory()


def test_end_of_input_flushes_every_window_once(spark, tmp_path, memory):
    p = _pipeline("once")
    checkpoint = str(tmp_path / "ckpt")
    result = p.run(checkpoint, spark=spark)

    data_batches = ROWS // PER_BATCH
    assert [m.rows_in for m in result.metrics] == [PER_BATCH] * data_batches + [0]
    assert result.metrics[-1].watermark == END_OF_TIME
    assert all(m.watermark < END_OF_TIME for m in result.metrics[:-1] if m.watermark is not None)
    with open(f"{checkpoint}/spark/offsets/{data_batches}", "rb") as f:
        assert ended_in_offset_log(f.read()) == {"readings"}
    with open(f"{checkpoint}/spark/offsets/{data_batches - 1}", "rb") as f:
        assert ended_in_offset_log(f.read()) == set()
    assert all(memory_batches(f"once_{name}").get(data_batches) is not None for name in WINDOWED)
    _assert_every_record_in_one_window(p, checkpoint, "once")

    # restart on the finished checkpoint: no batch runs, nothing more is emitted
    before = {name: {b: t.to_pylist() for b, t in batches.items()} for name, batches in _emitted("once").items()}
    again = _pipeline("once").run(checkpoint, spark=spark)
    assert again.batches == 0 and again.rows_in == 0
    assert [m.batch_id for m in again.metrics] == list(range(data_batches + 1))
    after = {name: {b: t.to_pylist() for b, t in batches.items()} for name, batches in _emitted("once").items()}
    assert after == before
    _assert_every_record_in_one_window(p, checkpoint, "once")


def test_stopped_before_the_end_batch_a_restart_runs_it(spark, tmp_path, memory):
    """Stopped right after the last data batch (the end batch planned or not yet), the restart
    runs the end batch (logged: replayed with its offsets; else planned now), exactly once."""
    p = _pipeline("stop")
    checkpoint = str(tmp_path / "ckpt")
    last_data = ROWS // PER_BATCH - 1
    first = p.run(checkpoint, spark=spark, stop_when=lambda ex: ex.last_batch is not None and ex.last_batch.batch_id >= last_data)
    assert first.metrics and first.metrics[-1].batch_id >= last_data

    again = _pipeline("stop").run(checkpoint, spark=spark)
    ids = [m.batch_id for m in again.metrics]
    assert ids == list(range(last_data + 2))
    assert [m.rows_in for m in again.metrics][-1] == 0 and again.metrics[-1].watermark == END_OF_TIME
    _assert_every_record_in_one_window(p, checkpoint, "stop")
    records = [json.loads(line) for line in open(f"{checkpoint}/metrics.jsonl")]
    assert len(records) == last_data + 2  # no batch recorded twice
