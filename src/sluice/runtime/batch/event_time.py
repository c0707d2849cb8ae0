"""Event time between batches: the watermark, idle sources, and when a batch without new
input is due (pure: no Spark).

The watermark of a batch is the minimum over event-time sources of (latest event time seen
in earlier batches - the source's delay), computed once when the batch first runs and
recorded, so a replay sees the same one. Three things move it, or the windows it closes,
without new data, and each needs a batch to act on it (``sources.ticks`` plans one):

- the last batch of a burst: its records moved the watermark, which the next batch applies;
- an idle source: one that has sent nothing for its ``idle_timeout`` stops holding the
  watermark back (Flink's ``withIdleness``), at a time known in advance;
- processing time: a processing-time window closes when the clock passes its end.

The watermark never goes back: a source that was idle and sends records again rejoins the
minimum only once its own watermark has caught up; until then its records are late by the
windows' rules, as they would be in Flink.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from sluice.graph.windows import ProcessingTime, Session, WindowQuery
from sluice.runtime.kernels.panes import END_OF_TIME


@dataclass(frozen=True)
class SourceTime:
    """What the watermark needs of one source."""

    name: str
    event_time: str | None  # its event-time column (None: no event time)
    delay_us: int  # the watermark's delay behind the latest event time
    idle_timeout_us: int | None = None  # without records this long, it stops holding the watermark


@dataclass
class EventClock:
    """The running facts the watermark is computed from, as of the last batch done."""

    max_event_us: dict[str, int] = field(default_factory=dict)  # latest event time seen per source
    last_data_us: dict[str, int] = field(default_factory=dict)  # processing time of its last batch with records
    watermark: int | None = None  # the last batch's watermark
    first_us: int | None = None  # processing time of the first batch (a silent source is idle from it)

    def to_record(self) -> dict:
        return {
            "max_event_us_so_far": dict(self.max_event_us),
            "last_data_us": dict(self.last_data_us),
            "watermark": self.watermark,
            "first_us": self.first_us,
        }

    @classmethod
    def from_record(cls, record: dict) -> EventClock:
        def ints(values) -> dict[str, int]:
            return {str(k): int(v) for k, v in (values or {}).items()}

        wm, first = record.get("watermark"), record.get("first_us")
        return cls(
            ints(record.get("max_event_us_so_far")),
            ints(record.get("last_data_us")),
            None if wm is None else int(wm),
            None if first is None else int(first),
        )

    def saw(self, name: str, max_event_us: int | None, rows: int, processing_time: int) -> None:
        """A batch processed at ``processing_time`` read ``rows`` records of source ``name``
        whose latest event time is ``max_event_us``."""
        if max_event_us is not None:
            self.max_event_us[name] = max(self.max_event_us.get(name, max_event_us), max_event_us)
        if rows > 0:
            self.last_data_us[name] = max(self.last_data_us.get(name, processing_time), processing_time)

    def idle(self, source: SourceTime, now_us: int) -> bool:
        if source.idle_timeout_us is None:
            return False
        since = self.last_data_us.get(source.name, self.first_us)
        return since is not None and now_us - since >= source.idle_timeout_us

    def watermark_at(self, sources: Iterable[SourceTime], ended: set[str], now_us: int | None) -> int | None:
        """The watermark of a batch processed at ``now_us`` (None: no source is idle).

        END_OF_TIME itself means that every source has ended: it then closes processing-time
        windows too (``kernels.windows.batch_watermark``). While another source still feeds
        them that must not happen, so ended event-time sources count as one microsecond
        before it, which closes every event-time window all the same. An idle source counts
        for nothing, unless every event-time source is idle: then the watermark stays."""
        sources = list(sources)
        if sources and all(src.name in ended for src in sources):
            return END_OF_TIME
        marks: list[int] = []
        holding = idle = False  # an event-time source that has not ended; one that is idle
        for src in sources:
            if src.event_time is None:
                continue
            if src.name in ended:
                marks.append(END_OF_TIME - 1)
                continue
            if now_us is not None and self.idle(src, now_us):
                idle = True
                continue
            holding = True
            seen = self.max_event_us.get(src.name)
            if seen is None:
                return self.watermark
            marks.append(seen - src.delay_us)
        if not marks or (idle and not holding):
            return self.watermark
        mark = min(marks)
        return mark if self.watermark is None else max(mark, self.watermark)

    def next_idle_us(self, sources: Iterable[SourceTime], ended: set[str], now_us: int) -> int | None:
        """The earliest time after ``now_us`` at which a source becomes idle and the watermark
        then moves (None: none will)."""
        current = self.watermark_at(sources, ended, now_us)
        due = None
        for src in sources:
            if src.idle_timeout_us is None or src.event_time is None or src.name in ended or self.idle(src, now_us):
                continue
            since = self.last_data_us.get(src.name, self.first_us)
            if since is None:
                continue
            at = since + src.idle_timeout_us
            moved = self.watermark_at(sources, ended, at)
            if moved is not None and (current is None or moved > current):
                due = at if due is None else min(due, at)
        return due


def processing_time_due(queries: Iterable[WindowQuery], now_us: int) -> int | None:
    """When the next processing-time window of ``queries`` may close after ``now_us``: the
    next end of a window (a multiple of its slide, plus its allowed lateness), or one gap
    from now for sessions (a session closes a gap after its last record). None: no
    processing-time query."""
    due = None
    for query in queries:
        if not isinstance(query.time, ProcessingTime):
            continue
        if isinstance(query.window, Session):
            at = now_us + query.window.gap
        else:
            slide, lateness = query.window.slide, query.allowed_lateness
            at = ((now_us - lateness) // slide + 1) * slide + lateness
        due = at if due is None else min(due, at)
    return due


def kernel_queries(kernel) -> list[WindowQuery]:
    """The window queries of a window or session kernel, also one whose state expires
    (``kernels.ttl``); [] for other kernels."""
    kernel = getattr(kernel, "inner", kernel)
    if hasattr(kernel, "queries"):
        return list(kernel.queries)
    query = getattr(kernel, "query", None)
    return [query] if isinstance(query, WindowQuery) else []
