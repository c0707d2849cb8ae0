"""Joins in the fluent API: ``KeyedStream.join`` (two streams, on event time) and
``KeyedStream.lookup`` (a stream enriched from a table given as a changelog).

    from sluice import windows as W

    clicks = pipeline.source(...).key_by("user")
    views = pipeline.source(...).key_by("user")
    clicks.join(views, window=W.tumbling("1m"), how="left")      # the same minute
    clicks.join(views, between=("-5m", "+1m"))                  # view.t - click.t in [-5m, +1m]

    orders.key_by("customer").lookup(customers.key_by("id"), version="seq")

Both add one keyed ``join`` operator with two inputs; its output schema is the spec's
(``graph.kinds``), and the runtime makes its kernel from both sides' schemas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.api.windows import resolve_time
from sluice.core.location import user_location
from sluice.errors import PipelineError
from sluice.graph.joins import JoinSides, StreamJoin, TableLookup
from sluice.graph.specs import JoinOp
from sluice.graph.ttl import StateTTL
from sluice.graph.windows import Duration, EventTime, Sliding, parse_duration

if TYPE_CHECKING:
    from sluice.api.stream import KeyedStream


def signed_duration(value: Duration, what: str) -> int:
    """A duration that may be negative: ``"-5m"``, ``"+1m"``, ``-300`` (seconds), in microseconds."""
    if isinstance(value, str):
        text = value.strip()
        if text[:1] in "+-" and text:
            micros = parse_duration(text[1:], what, allow_zero=True)
            return -micros if text[0] == "-" else micros
        return parse_duration(text, what, allow_zero=True)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
        return -parse_duration(-value, what, allow_zero=True)
    return parse_duration(value, what, allow_zero=True)


def _event_time(keyed: KeyedStream, time: str | None, side: str) -> str:
    domain = resolve_time(keyed, time)
    if not isinstance(domain, EventTime):
        raise PipelineError(
            f"join: the {side} side has no event time; declare event_time= on its sources "
            f"(a stream-stream join runs on event time, with the sources' watermark)"
        )
    return domain.column


def add_join(
    left: KeyedStream,
    right: KeyedStream,
    *,
    window: Sliding | None,
    between: tuple | None,
    how: str,
    time: str | None,
    right_time: str | None,
    allowed_lateness: Duration,
    suffixes: tuple[str, str],
    name: str | None,
    ttl: StateTTL | None = None,
) -> JoinOp:
    """The spec of a windowed or interval stream-stream join (``KeyedStream.join``), checked
    against both sides; the stream adds the operator."""
    location = user_location()
    try:
        if right.pipeline is not left.pipeline:
            raise PipelineError("join needs two streams of the same pipeline")
        bounds = None
        if between is not None:
            if not isinstance(between, (tuple, list)) or len(between) != 2:
                raise PipelineError(f"join: between must be (lower, upper), e.g. ('-5m', '+1m'); got {between!r}")
            bounds = (signed_duration(between[0], "between lower bound"), signed_duration(between[1], "between upper bound"))
        sides = JoinSides(
            tuple(left.keys),
            tuple(right.keys),
            _event_time(left, time, "left"),
            _event_time(right, right_time or time, "right"),
            (suffixes[0], suffixes[1]),
        )
        spec = StreamJoin(sides, how, window, bounds, parse_duration(allowed_lateness, "allowed_lateness", allow_zero=True))
    except PipelineError as exc:
        raise PipelineError(str(exc), name or "join", location) from None
    return _join_op(left, spec, ttl)


def add_lookup(
    stream: KeyedStream,
    table: KeyedStream,
    *,
    version: str,
    how: str,
    deleted: str | None,
    suffixes: tuple[str, str],
    name: str | None,
    ttl: StateTTL | None = None,
) -> JoinOp:
    """The spec of a table lookup (``KeyedStream.lookup``), checked against both sides; the
    stream adds the operator."""
    location = user_location()
    try:
        if table.pipeline is not stream.pipeline:
            raise PipelineError("lookup needs two streams of the same pipeline")
        spec = TableLookup(
            JoinSides(tuple(stream.keys), tuple(table.keys), suffixes=(suffixes[0], suffixes[1])), version, how, deleted
        )
    except PipelineError as exc:
        raise PipelineError(str(exc), name or "lookup", location) from None
    return _join_op(stream, spec, ttl)


def _join_op(left: KeyedStream, spec: StreamJoin | TableLookup, ttl: StateTTL | None) -> JoinOp:
    # its schema rule and kernel factory are the join kind's (graph.kinds); with a ttl the
    # buffers expire per key (runtime.kernels.ttl wraps the kernel)
    return JoinOp(keys=list(left.keys), join=spec, ttl=ttl)
