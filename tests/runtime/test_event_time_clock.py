"""Event time between batches, without Spark: the watermark with idle sources (never going
back), when a batch without input is due, and how a source plans such a batch (ticks)."""

from __future__ import annotations

import pyarrow as pa

from sluice import agg, sources
from sluice import windows as W
from sluice.graph.windows import EventTime, ProcessingTime, WindowQuery
from sluice.runtime.batch.event_time import EventClock, SourceTime, processing_time_due
from sluice.runtime.kernels.panes import END_OF_TIME
from sluice.runtime.sources.generator import GeneratorStreamReader
from sluice.runtime.sources.ticks import TickingReader, TickRequest, next_offset, read_tick_request, request_tick

S = 1_000_000
A = SourceTime("a", "ts", 100, idle_timeout_us=10 * S)
B = SourceTime("b", "ts", 100, idle_timeout_us=10 * S)


def test_an_idle_source_stops_holding_the_watermark_back():
    clock = EventClock(max_event_us={"a": 50 * S, "b": 20 * S}, last_data_us={"a": 100 * S, "b": 100 * S}, first_us=0)
    assert clock.watermark_at([A, B], set(), 105 * S) == 20 * S - 100  # b is the slower: it holds
    assert clock.watermark_at([A, B], set(), 110 * S - 1) == 20 * S - 100  # one microsecond short of idle
    clock.last_data_us["a"] = 108 * S
    assert clock.watermark_at([A, B], set(), 110 * S) == 50 * S - 100  # b idle from exactly 10 s on
    # the watermark never goes back: b sends again with old times
    clock.watermark = 50 * S - 100
    clock.saw("b", 21 * S, 5, 111 * S)
    assert clock.watermark_at([A, B], set(), 111 * S) == 50 * S - 100
    # every event-time source idle: the watermark stays where it was
    assert clock.watermark_at([A, B], set(), 200 * S) == 50 * S - 100


def test_a_source_that_never_sent_is_idle_from_the_first_batch():
    clock = EventClock(max_event_us={"a": 50 * S}, last_data_us={"a": 100 * S}, first_us=95 * S)
    assert clock.watermark_at([A, B], set(), 104 * S) is None  # b has not been seen, not yet idle
    assert clock.watermark_at([A, B], set(), 105 * S) == 50 * S - 100
    # without an idle timeout a silent source holds the watermark for ever
    plain = SourceTime("b", "ts", 100)
    assert clock.watermark_at([A, plain], set(), 10_000 * S) is None


def test_ended_sources_as_before():
    clock = EventClock(max_event_us={"a": 1_000, "b": 5_000})
    a, b = SourceTime("a", "ts", 100), SourceTime("b", "ts", 100)
    assert clock.watermark_at([a, b], set(), None) == 900
    assert clock.watermark_at([a, b], {"a"}, None) == 4_900
    assert clock.watermark_at([a, b], {"a", "b"}, None) == END_OF_TIME
    assert clock.watermark_at([a, SourceTime("p", None, 0)], {"a"}, None) == END_OF_TIME - 1


def test_next_idle_time_is_when_the_watermark_would_move():
    clock = EventClock(max_event_us={"a": 50 * S, "b": 20 * S}, last_data_us={"a": 100 * S, "b": 90 * S}, first_us=0)
    assert clock.next_idle_us([A, B], set(), 95 * S) == 100 * S  # b idle at 90 + 10: a's watermark then rules
    # a going idle would not move it (b is the minimum), and once both are idle it stays
    clock.last_data_us = {"a": 80 * S, "b": 95 * S}
    assert clock.next_idle_us([A, B], set(), 85 * S) is None
    assert clock.next_idle_us([SourceTime("a", "ts", 100)], set(), 85 * S) is None  # no timeout: never


def test_record_round_trip():
    clock = EventClock({"a": 5}, {"a": 7}, 3, 1)
    assert EventClock.from_record(clock.to_record()) == clock


def test_processing_time_windows_are_due_at_their_next_end():
    count = (("n", agg.count()),)
    tumbling = WindowQuery(W.tumbling(10), count, ProcessingTime())
    late = WindowQuery(W.tumbling(10), count, ProcessingTime(), allowed_lateness=3 * S)
    session = WindowQuery(W.session(4), count, ProcessingTime())
    event = WindowQuery(W.tumbling(1), count, EventTime("ts"))
    assert processing_time_due([tumbling], 25 * S) == 30 * S
    assert processing_time_due([tumbling], 30 * S) == 40 * S  # strictly after now
    assert processing_time_due([late], 25 * S) == 33 * S
    assert processing_time_due([session], 25 * S) == 29 * S
    assert processing_time_due([event], 25 * S) is None
    assert processing_time_due([tumbling, session], 25 * S) == 29 * S


def test_a_due_tick_makes_a_new_offset_once():
    start = {"source": "s", "rows": 10}
    due = TickRequest(3, 500)
    assert next_offset(start, start, due, 499) == start  # not yet due
    ticked = next_offset(start, start, due, 500)
    assert ticked == {"source": "s", "rows": 10, "tick": 3}
    assert next_offset(ticked, start, due, 600) == ticked  # served: no second batch
    assert next_offset(start, start, TickRequest(3, None), 600) == start  # cancelled
    assert next_offset(start, start, None, 600) == start


def test_a_batch_with_data_absorbs_a_pending_tick():
    start = {"source": "s", "rows": 10, "tick": 2}
    more = {"source": "s", "rows": 20}
    assert next_offset(start, more, TickRequest(3, 10_000), 600) == {"source": "s", "rows": 20, "tick": 3}
    assert next_offset(start, more, None, 600) == {"source": "s", "rows": 20, "tick": 2}  # carried on
    assert next_offset({"source": "s", "rows": 10}, more, None, 600) == more


def test_ticking_reader_over_a_real_generator_reader(tmp_path):
    spec = sources.generator(fields={"k": sources.Keys(3)}, total_rows=5, start_time=1_700_000_000.0)
    schema = pa.schema([*spec.schema(), pa.field("__ingest_ts", pa.timestamp("us", tz="UTC"))])
    from pyspark.sql.pandas.types import from_arrow_schema

    inner = GeneratorStreamReader(spec, "gen", str(tmp_path), from_arrow_schema(schema), 1)
    reader = TickingReader(inner, str(tmp_path), "gen")
    limit = reader.getDefaultReadLimit()
    first = reader.initialOffset()
    data = reader.latestOffset(first, limit)
    assert data["rows"] == 5 and "tick" not in data
    assert sum(b.num_rows for p in reader.partitions(first, data) for b in reader.read(p)) == 5
    end = reader.latestOffset(data, limit)  # the finite source's end-of-input punctuation
    assert end.get("end") is True
    assert reader.latestOffset(end, limit) == end  # nothing more, nothing asked
    request_tick(str(tmp_path), "gen", TickRequest(7, 0))
    assert read_tick_request(str(tmp_path), "gen") == TickRequest(7, 0)
    ticked = reader.latestOffset(end, limit)
    assert ticked == {**end, "tick": 7}
    assert reader.partitions(end, ticked) == []  # a batch with no rows
    assert reader.latestOffset(ticked, limit) == ticked
