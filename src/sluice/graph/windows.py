"""Window specifications: what a windowed aggregation computes, and when it emits.

C-MR (Continuous MapReduce, section 2.1) "divides a stream into sets of temporally
contiguous data items called windows. Windows are defined by a size and a slide. The size
defines the boundaries of the temporally contiguous set included in the window and the slide
determines the interval at which windows are defined and evaluated", on a *system* timestamp
or an *application* timestamp. Sluice follows that definition, aligned like Spark's and
Flink's windows so users get the windows they already know:

* ``Sliding(size, slide)``: windows ``[j*slide, j*slide + size)`` for every integer j
  (start inclusive, end exclusive, aligned to the epoch);
* ``Tumbling(size)``: ``Sliding(size, size)``;
* ``Session(gap)``: per key, records closer than ``gap`` to each other form one window
  ``[first, last + gap)``.

The time domain is *event time* (a timestamp column of the record: C-MR's application time)
or *processing time* (the batch's processing time: C-MR's system time).

When results are emitted (see ``sluice.runtime.kernels.windows`` for the exact rules):

* ``mode="append"``: a window is emitted when the watermark passes its end; with an
  ``allowed_lateness`` L > 0 it stays open until the watermark passes ``end + L`` and is
  emitted again, updated, in every batch in which late records change it (Flink's late
  firings). With L = 0 (the default) every window is emitted exactly once.
* ``mode="update"``: every batch emits the current result of each open window its records
  changed (early results), as Spark's update mode does.

Records that arrive after every window they belong to has closed go to the ``late`` side
output and are counted: they are never silently dropped.

All durations are stored as integer microseconds, the unit of Sluice's watermarks.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import timedelta

import pyarrow as pa

from sluice.errors import PipelineError, SchemaError
from sluice.graph import aggregates as agg_mod
from sluice.graph.aggregates import NUMERIC_AGGREGATES, Aggregate, UserAggregate

MICROS_PER_SECOND = 1_000_000

_UNIT_MICROS = {
    "us": 1,
    "µs": 1,
    "micro": 1,
    "micros": 1,
    "microsecond": 1,
    "microseconds": 1,
    "ms": 1_000,
    "milli": 1_000,
    "millis": 1_000,
    "millisecond": 1_000,
    "milliseconds": 1_000,
    "s": MICROS_PER_SECOND,
    "sec": MICROS_PER_SECOND,
    "secs": MICROS_PER_SECOND,
    "second": MICROS_PER_SECOND,
    "seconds": MICROS_PER_SECOND,
    "m": 60 * MICROS_PER_SECOND,
    "min": 60 * MICROS_PER_SECOND,
    "mins": 60 * MICROS_PER_SECOND,
    "minute": 60 * MICROS_PER_SECOND,
    "minutes": 60 * MICROS_PER_SECOND,
    "h": 3600 * MICROS_PER_SECOND,
    "hour": 3600 * MICROS_PER_SECOND,
    "hours": 3600 * MICROS_PER_SECOND,
    "d": 86400 * MICROS_PER_SECOND,
    "day": 86400 * MICROS_PER_SECOND,
    "days": 86400 * MICROS_PER_SECOND,
}
_DURATION_PART = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zµ]+)\s*", re.IGNORECASE)

Duration = int | float | str | timedelta


def parse_duration(value: Duration, what: str = "duration", allow_zero: bool = False) -> int:
    """A duration in integer microseconds.

    Accepts seconds as a number (``90``, ``0.5``), a ``timedelta``, or a string with units:
    ``"15m"``, ``"1h30m"``, ``"500ms"``, ``"10 seconds"``. ``what`` names the parameter in the
    error message.

    >>> from sluice import windows as W
    >>> W.parse_duration("1m"), W.parse_duration(1.5), W.parse_duration("500ms")
    (60000000, 1500000, 500000)
    """
    if isinstance(value, bool):
        raise PipelineError(f"{what}: expected a duration (seconds or e.g. '15m'), got {value!r}")
    if isinstance(value, timedelta):
        micros = value // timedelta(microseconds=1)
    elif isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise PipelineError(f"{what}: duration must be finite, got {value!r}")
        micros = round(value * MICROS_PER_SECOND)
        if abs(micros - value * MICROS_PER_SECOND) > 1e-3:  # tolerate float noise only
            raise PipelineError(f"{what}: {value!r} seconds is not a whole number of microseconds")
    elif isinstance(value, str):
        micros = _parse_duration_string(value, what)
    else:
        raise PipelineError(f"{what}: expected a duration (seconds or e.g. '15m'), got {value!r}")
    if micros < 0 or (micros == 0 and not allow_zero):
        raise PipelineError(f"{what}: duration must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return int(micros)


def _parse_duration_string(text: str, what: str) -> int:
    stripped = text.strip()
    if not stripped:
        raise PipelineError(f"{what}: empty duration string")
    try:  # a bare number in a string means seconds, like a bare number
        return parse_duration(float(stripped), what, allow_zero=True)
    except ValueError:
        pass
    total = 0.0
    pos = 0
    for match in _DURATION_PART.finditer(stripped):
        if match.start() != pos:
            break
        number, unit = match.group(1), match.group(2).lower()
        if unit not in _UNIT_MICROS:
            raise PipelineError(f"{what}: unknown time unit {unit!r} in {text!r}; use us, ms, s, m, h or d (e.g. '15m', '1h30m')")
        total += float(number) * _UNIT_MICROS[unit]
        pos = match.end()
    if pos != len(stripped):
        raise PipelineError(f"{what}: cannot read duration {text!r}; use e.g. '15m', '90s', '1h30m' or seconds")
    if abs(total - round(total)) > 1e-6:
        raise PipelineError(f"{what}: {text!r} is not a whole number of microseconds")
    return round(total)


def format_duration(micros: int) -> str:
    """The shortest exact rendering of a duration, e.g. ``15m``, ``90s``, ``1h30m``, ``250ms``."""
    if micros == 0:
        return "0s"
    parts = []
    rest = micros
    for unit, size in (
        ("d", 86400 * MICROS_PER_SECOND),
        ("h", 3600 * MICROS_PER_SECOND),
        ("m", 60 * MICROS_PER_SECOND),
        ("s", MICROS_PER_SECOND),
        ("ms", 1000),
        ("us", 1),
    ):
        if rest >= size:
            count, rest = divmod(rest, size)
            parts.append(f"{count}{unit}")
    return "".join(parts)


# ---------------------------------------------------------------------------------------
# Window shapes


@dataclass(frozen=True)
class Sliding:
    """Windows ``[j*slide, j*slide + size)``, j integer (C-MR's size and slide), in microseconds."""

    size: int
    slide: int

    def __post_init__(self) -> None:
        if not isinstance(self.size, int) or not isinstance(self.slide, int):
            raise PipelineError(f"sliding window: size and slide must be integer microseconds, got {self!r}")
        if self.size <= 0 or self.slide <= 0:
            raise PipelineError(f"sliding window: size and slide must be > 0, got size={self.size}us slide={self.slide}us")
        if self.slide > self.size:
            # C-MR does not say what a slide larger than the size means. Such windows leave
            # records between them that belong to no window, which a user would rather be
            # told about than find silently missing; Spark refuses them too.
            raise PipelineError(
                f"sliding window: slide ({format_duration(self.slide)}) must not exceed size "
                f"({format_duration(self.size)}): records between windows would belong to no window"
            )

    @property
    def label(self) -> str:
        return f"sliding({format_duration(self.size)},{format_duration(self.slide)})"


@dataclass(frozen=True)
class Tumbling(Sliding):
    """Non-overlapping windows ``[j*size, (j+1)*size)``: a sliding window whose slide is its size."""

    def __init__(self, size: int):
        object.__setattr__(self, "size", size)
        object.__setattr__(self, "slide", size)
        self.__post_init__()

    @property
    def label(self) -> str:
        return f"tumbling({format_duration(self.size)})"


@dataclass(frozen=True)
class Session:
    """Per key, records less than ``gap`` apart form one window ``[first, last + gap)``."""

    gap: int

    def __post_init__(self) -> None:
        if not isinstance(self.gap, int) or self.gap <= 0:
            raise PipelineError(f"session window: gap must be integer microseconds > 0, got {self.gap!r}")

    @property
    def label(self) -> str:
        return f"session({format_duration(self.gap)})"


WindowShape = Sliding | Session  # Tumbling is a Sliding


def tumbling(size: Duration) -> Tumbling:
    """Tumbling windows of ``size`` (seconds or a string like ``"15m"``): a sliding window
    whose slide is its size.

    >>> from sluice import windows as W
    >>> W.tumbling("15m")
    Tumbling(size=900000000, slide=900000000)
    """
    return Tumbling(parse_duration(size, "tumbling window size"))


def sliding(size: Duration, slide: Duration) -> Sliding:
    """Sliding windows of ``size`` every ``slide`` (seconds or strings like ``"15m"``, ``"1m"``).

    >>> from sluice import windows as W
    >>> W.sliding("15m", "1m")
    Sliding(size=900000000, slide=60000000)
    """
    return Sliding(parse_duration(size, "sliding window size"), parse_duration(slide, "sliding window slide"))


def session(gap: Duration) -> Session:
    """Session windows closed by ``gap`` of inactivity (seconds or a string like ``"30s"``).

    >>> from sluice import windows as W
    >>> W.session("30s")
    Session(gap=30000000)
    """
    return Session(parse_duration(gap, "session window gap"))


# ---------------------------------------------------------------------------------------
# Time domains


@dataclass(frozen=True)
class EventTime:
    """Time read from a timestamp column of each record (C-MR's application time).

    The column is a pyarrow timestamp (any unit) or an integer of microseconds since the epoch.
    """

    column: str

    def __post_init__(self) -> None:
        if not isinstance(self.column, str) or not self.column:
            raise PipelineError(f"event time: the timestamp column must be a column name, got {self.column!r}")


@dataclass(frozen=True)
class ProcessingTime:
    """Time at which the batch is processed (C-MR's system time)."""


TimeDomain = EventTime | ProcessingTime

OUTPUT_MODES = ("append", "update")
WINDOW_START = "window_start"
WINDOW_END = "window_end"
QUERY_COLUMN = "query"  # names the window query of an output row when several share a kernel


@dataclass(frozen=True)
class WindowQuery:
    """One windowed aggregation: window shape, time domain, aggregates, lateness, output mode."""

    window: WindowShape
    aggregates: tuple[tuple[str, Aggregate], ...]
    time: TimeDomain = field(default_factory=ProcessingTime)
    allowed_lateness: int = 0  # microseconds a window stays open after the watermark passes its end
    mode: str = "append"
    name: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.window, (Sliding, Session)):
            raise PipelineError(f"window query: unknown window {self.window!r}; use tumbling(), sliding() or session()")
        if not isinstance(self.time, (EventTime, ProcessingTime)):
            raise PipelineError(f"window query: time must be EventTime(column) or ProcessingTime(), got {self.time!r}")
        if self.mode not in OUTPUT_MODES:
            raise PipelineError(
                f"window query {self.display_name!r}: output mode must be one of {OUTPUT_MODES}, got {self.mode!r}"
            )
        if not isinstance(self.allowed_lateness, int) or self.allowed_lateness < 0:
            raise PipelineError(
                f"window query {self.display_name!r}: allowed_lateness must be >= 0 microseconds, got {self.allowed_lateness!r}"
            )
        if not self.aggregates:
            raise PipelineError(f"window query {self.display_name!r}: give at least one aggregate, e.g. n=sluice.agg.count()")
        names = [name for name, _ in self.aggregates]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise PipelineError(f"window query {self.display_name!r}: aggregate names repeated: {duplicates}")
        reserved = {WINDOW_START, WINDOW_END} & set(names)
        if reserved:
            raise PipelineError(f"window query {self.display_name!r}: {sorted(reserved)} are reserved output columns")

    @property
    def display_name(self) -> str:
        return self.name or self.window.label

    @property
    def is_session(self) -> bool:
        return isinstance(self.window, Session)

    @property
    def sliding(self) -> Sliding:
        """The window as a fixed-size one (size, slide); raises for a session window."""
        if not isinstance(self.window, Sliding):
            raise PipelineError(f"window query {self.display_name!r}: a session window has no size and slide")
        return self.window

    @property
    def session(self) -> Session:
        """The window as a session window (gap); raises for a fixed-size one."""
        if not isinstance(self.window, Session):
            raise PipelineError(f"window query {self.display_name!r}: not a session window")
        return self.window

    @property
    def event_time_column(self) -> str | None:
        return self.time.column if isinstance(self.time, EventTime) else None


def window_query(
    window: WindowShape,
    aggregates: dict[str, Aggregate | tuple | str],
    *,
    time: TimeDomain | str | None = None,
    allowed_lateness: Duration = 0,
    mode: str = "append",
    name: str | None = None,
) -> WindowQuery:
    """Build a validated :class:`WindowQuery` the way the API hands it over.

    ``time`` is an ``EventTime``, a ``ProcessingTime``, a column name (event time on that
    column) or None (processing time). ``aggregates`` maps output names to aggregates
    (``sluice.graph.aggregates`` objects, ``("sum", "col")`` tuples or ``"count"``).
    """
    if isinstance(time, str):
        time = EventTime(time)
    elif time is None:
        time = ProcessingTime()
    if not isinstance(aggregates, dict):
        raise PipelineError(f"window aggregate: give aggregates as name=aggregate pairs, got {aggregates!r}")
    parsed = tuple((str(out), agg_mod.parse(spec, str(out))) for out, spec in aggregates.items())
    lateness = parse_duration(allowed_lateness, "allowed_lateness", allow_zero=True)
    return WindowQuery(window, parsed, time, lateness, mode, name or "")


def pane_length(queries: list[WindowQuery] | tuple[WindowQuery, ...]) -> int:
    """Length of the panes shared by fixed-size window queries: gcd of all sizes and slides.

    A window of size z and slide s starts at multiples of s and ends at multiples of s plus
    z, so cutting time at multiples of gcd(z, s) makes every window an exact union of whole
    panes (C-MR's sub-windows); taking the gcd over every query lets several queries share
    one set of panes (C-MR's shared input streams).
    """
    lengths = []
    for query in queries:
        if query.is_session:
            raise PipelineError(f"window query {query.display_name!r}: session windows have no fixed panes")
        lengths += [query.sliding.size, query.sliding.slide]
    if not lengths:
        raise PipelineError("pane length: no window queries given")
    return math.gcd(*lengths)


def check_shared(queries: list[WindowQuery] | tuple[WindowQuery, ...]) -> None:
    """Validate that several window queries can share one window operator (one set of panes)."""
    if not queries:
        raise PipelineError("window: no window queries given")
    names = [q.display_name for q in queries]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise PipelineError(f"window queries sharing a stream need distinct names; repeated: {duplicates}")
    domains = {q.time for q in queries}
    if len(domains) > 1:
        raise PipelineError(f"window queries sharing a stream must use one time domain, got {sorted(map(repr, domains))}")
    sessions = [q for q in queries if q.is_session]
    if sessions and len(queries) > 1:
        raise PipelineError(
            f"session window {sessions[0].display_name!r} cannot share panes with other window queries: "
            "sessions have no fixed panes; use a separate window() for it"
        )


# ---------------------------------------------------------------------------------------
# Output schema (pure: the job graph validates windows with it before anything runs)


def value_kind(column: str, dtype: pa.DataType, what: str) -> str:
    """'int' or 'float': how values of an aggregated column are held in partial aggregates."""
    if pa.types.is_integer(dtype) or pa.types.is_boolean(dtype):
        return "int"
    if pa.types.is_floating(dtype):
        return "float"
    if what in ("min", "max") and (pa.types.is_timestamp(dtype) or pa.types.is_duration(dtype)):
        return "int"
    if pa.types.is_decimal(dtype):
        if dtype.precision <= 18:  # held exactly as unscaled int64 (cents for a decimal(12, 2))
            return "int"
        raise SchemaError(
            f"window aggregate {what}({column!r}): {dtype} has more than 18 digits, which a window "
            f"does not hold exactly; cast it to decimal(18, {dtype.scale}) or to double before"
        )
    raise SchemaError(
        f"window aggregate {what}({column!r}): column type {dtype} is not supported (numeric columns, and timestamps for min/max)"
    )


def aggregate_output_type(agg: Aggregate, input_schema: pa.Schema) -> pa.DataType:
    """Arrow type of a windowed aggregate's output column."""
    if agg.column is not None and agg.column not in input_schema.names:
        raise SchemaError(f"window aggregate {agg.kind}({agg.column!r}): no such column; input has {input_schema.names}")
    if agg.kind == "count":
        return pa.int64()
    if isinstance(agg, UserAggregate):
        if agg.by is not None and agg.by not in input_schema.names:
            raise SchemaError(
                f"window aggregate {agg.kind}({agg.column!r}, by={agg.by!r}): no such column "
                f"{agg.by!r}; input has {input_schema.names}"
            )
        if agg.kind in NUMERIC_AGGREGATES:
            value_kind(agg.column, input_schema.field(agg.column).type, "mean")  # a numeric column
        return agg.output_type(input_schema.field(agg.column).type if agg.column else None)
    assert agg.column is not None  # only count(*) has none
    if agg.kind == "mean":
        value_kind(agg.column, input_schema.field(agg.column).type, "mean")
        return pa.float64()
    dtype = input_schema.field(agg.column).type
    kind = value_kind(agg.column, dtype, agg.kind)
    if agg.kind == "sum":
        if pa.types.is_decimal(dtype):
            return pa.decimal128(38, dtype.scale)
        return pa.int64() if kind == "int" else pa.float64()
    return dtype


def window_time_type(query: WindowQuery, input_schema: pa.Schema) -> pa.DataType:
    """Type of window_start/window_end: the event-time column's timestamp type (in us)."""
    if isinstance(query.time, EventTime):
        column = query.time.column
        if column not in input_schema.names:
            raise SchemaError(f"window {query.display_name!r}: no event-time column {column!r}; input has {input_schema.names}")
        dtype = input_schema.field(column).type
        if pa.types.is_timestamp(dtype):
            return pa.timestamp("us", tz=dtype.tz)
        if pa.types.is_integer(dtype):
            return pa.int64()
        raise SchemaError(
            f"window {query.display_name!r}: event-time column {column!r} has type {dtype}; "
            "use a timestamp or an integer of microseconds since the epoch"
        )
    return pa.timestamp("us", tz="UTC")


def window_output_schema(
    key_columns: list[str],
    queries: list[WindowQuery] | tuple[WindowQuery, ...],
    input_schema: pa.Schema,
    emit_keys: bool = True,
) -> pa.Schema:
    """Output schema: [query,] [keys,] window_start, window_end, then every aggregate column.

    With several queries the ``query`` column names each row's query, and the aggregate
    columns are the union of theirs (null for a query that does not compute one); a name
    used by two queries must have one type.
    """
    fields = []
    if len(queries) > 1:
        fields.append(pa.field(QUERY_COLUMN, pa.string()))
    for c in key_columns:
        if c not in input_schema.names:
            raise SchemaError(f"window: key column {c!r} not in input {input_schema.names}")
        if emit_keys:
            fields.append(input_schema.field(c))
    wtype = window_time_type(queries[0], input_schema)
    fields += [pa.field(WINDOW_START, wtype), pa.field(WINDOW_END, wtype)]
    taken = {f.name for f in fields}
    agg_types: dict[str, pa.DataType] = {}
    for q in queries:
        for name, agg in q.aggregates:
            dtype = aggregate_output_type(agg, input_schema)
            if name in taken and name not in agg_types:
                raise PipelineError(f"window {q.display_name!r}: aggregate name {name!r} clashes with an output column")
            if name in agg_types and agg_types[name] != dtype:
                raise PipelineError(
                    f"window {q.display_name!r}: aggregate {name!r} has type {dtype} here and {agg_types[name]} in another query"
                )
            agg_types[name] = dtype
            taken.add(name)
    return pa.schema(fields + [pa.field(n, t) for n, t in agg_types.items()])
