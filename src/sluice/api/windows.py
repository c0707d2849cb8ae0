"""Windows in the fluent API: ``KeyedStream.window(...).aggregate(...)``, shared window queries
``KeyedStream.windows(...)``, and ``Stream.window(...)`` over the whole stream.

    from sluice import agg, windows as W

    meters = readings.key_by("meter")
    meters.window(W.sliding("15m", "1m")).aggregate(avg=agg.mean("kwh"))

    # several queries over one stream share one set of panes (processed once)
    meters.windows(
        W.query(W.sliding("15m", "1m"), name="15m", avg=agg.mean("kwh")),
        W.query(W.tumbling("1h"), name="hourly", total=agg.sum("kwh")),
    )

Time: ``time=None`` windows on the sources' event-time column when they declare one (the
column the runtime's watermark is computed from), else on processing time;
``time="processing"`` forces processing time; ``time="<column>"`` names the column, which
must be the sources' event-time column (otherwise no watermark would ever close a window).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sluice.core.location import user_location
from sluice.errors import PipelineError
from sluice.graph import aggregates as agg_mod
from sluice.graph.specs import SourceOp, WindowOp
from sluice.graph.windows import (
    Duration,
    EventTime,
    ProcessingTime,
    TimeDomain,
    WindowQuery,
    WindowShape,
    check_shared,
    parse_duration,
)

if TYPE_CHECKING:
    from sluice.api.stream import KeyedStream, Stream

GLOBAL_KEY = "_sluice_all"  # constant key column of a window over a whole (non-keyed) stream
PROCESSING = "processing"


def query(
    window: WindowShape,
    *,
    name: str | None = None,
    allowed_lateness: Duration = 0,
    mode: str = "append",
    **aggregates: Any,
) -> WindowQuery:
    """One window query for :meth:`KeyedStream.windows` (its time is set by ``windows``).

    >>> from sluice import agg, windows as W
    >>> q = W.query(W.sliding("1h", "5m"), name="hourly", avg=agg.mean("kwh"))
    >>> q.display_name, q.window.label
    ('hourly', 'sliding(1h,5m)')
    """
    if not aggregates:
        raise PipelineError("window query needs at least one aggregate, e.g. n=sluice.agg.count()")
    parsed = tuple((out, agg_mod.parse(spec, out)) for out, spec in aggregates.items())
    lateness = parse_duration(allowed_lateness, "allowed_lateness", allow_zero=True)
    return WindowQuery(window, parsed, ProcessingTime(), lateness, mode, name or "")


class WindowedStream:
    """A keyed stream cut into windows; ``aggregate(...)`` says what each window computes."""

    def __init__(
        self,
        keyed: KeyedStream,
        window: WindowShape,
        time: str | TimeDomain | None,
        allowed_lateness: Duration,
        mode: str,
        emit_keys: bool = True,
        ttl=None,
    ):
        self.keyed = keyed
        self.ttl = ttl  # a graph.ttl.StateTTL, or None
        self.window = window
        self.time = time
        self.allowed_lateness = parse_duration(allowed_lateness, "allowed_lateness", allow_zero=True)
        self.mode = mode
        self.emit_keys = emit_keys

    def aggregate(self, name: str | None = None, **aggregates: Any) -> Stream:
        """Aggregates per key and window: ``aggregate(n=agg.count(), avg=agg.mean("kwh"))``.

        Emits rows ``key columns, window_start, window_end, aggregates``; records too late
        for every window they belong to go to the operator's ``late`` side output.
        """
        if not aggregates:
            raise PipelineError(
                "window aggregate needs at least one aggregate, e.g. n=sluice.agg.count()", name or "window", user_location()
            )
        parsed = tuple((out, agg_mod.parse(spec, out)) for out, spec in aggregates.items())
        try:
            q = WindowQuery(self.window, parsed, ProcessingTime(), self.allowed_lateness, self.mode, name or "")
        except PipelineError as exc:
            raise PipelineError(str(exc), name or "window", user_location()) from None
        return add_window_operator(self.keyed, [q], self.time, name, self.emit_keys, ttl=self.ttl)


def add_window_operator(
    keyed: KeyedStream,
    queries: list[WindowQuery],
    time: str | TimeDomain | None,
    name: str | None,
    emit_keys: bool = True,
    ttl=None,
) -> Stream:
    """Add one ``window`` operator computing ``queries`` (sharing panes) after ``keyed``."""
    location = user_location()
    try:
        domain = resolve_time(keyed, time)
        queries = [replace(q, time=domain) for q in queries]
        check_shared(queries)
    except PipelineError as exc:
        raise PipelineError(str(exc), name or "window", location) from None
    # a spec: the runtime makes the kernel (graph.kinds names its factory)
    return keyed._then(WindowOp(keys=keyed.keys, queries=queries, emit_keys=emit_keys, ttl=ttl), name)


def resolve_time(keyed: KeyedStream, time: str | TimeDomain | None) -> TimeDomain:
    """The time domain of a window, checked against the sources' event-time column."""
    if isinstance(time, ProcessingTime) or time == PROCESSING:
        return ProcessingTime()
    columns = _source_event_times(keyed)
    declared = {c for c in columns if c is not None}
    if time is None:
        if len(declared) == 1 and None not in columns:
            return EventTime(declared.pop())
        return ProcessingTime()
    column = time.column if isinstance(time, EventTime) else time
    if not isinstance(column, str):
        raise PipelineError(f"window time must be a column name, 'processing' or None, got {time!r}")
    if declared != {column} or None in columns:
        raise PipelineError(
            f"window on event time {column!r}: the watermark comes from the sources' event-time column, "
            f"and the sources declare {sorted(declared) or 'none'}; set event_time={column!r} on the source"
        )
    return EventTime(column)


def _source_event_times(keyed: KeyedStream) -> list[str | None]:
    graph = keyed.pipeline.graph
    seen, todo, found = set(), [keyed.op.id], []
    while todo:
        op = graph[todo.pop()]
        if op.id in seen:
            continue
        seen.add(op.id)
        if isinstance(op.spec, SourceOp):
            found.append(getattr(op.spec.connector, "event_time", None))
        todo.extend(op.inputs)
    return found


def window_of_stream(
    stream: Stream, window: WindowShape, time: str | TimeDomain | None, allowed_lateness: Duration, mode: str
) -> WindowedStream:
    """Windows over a whole stream: one global key (all records meet in one key group)."""
    if stream.schema is not None:
        # a select keeps the runtime's hidden columns after the user's (with_columns would
        # append the key after them, an order the keyed stage does not expect)
        names = [f"`{n}`" for n in stream.schema.names if not n.startswith("__")]
        keyed = stream.select(*names, f"0 AS {GLOBAL_KEY}").key_by(GLOBAL_KEY)
    else:
        keyed = stream.with_columns(**{GLOBAL_KEY: "0"}).key_by(GLOBAL_KEY)
    return WindowedStream(keyed, window, time, allowed_lateness, mode, emit_keys=False)
