"""State time-to-live: how long a key's state is kept after its last update (pure).

``ttl="1d"`` on ``aggregate``, ``reduce``, ``process`` or a window's ``aggregate`` bounds
the state of an unbounded key space: a key whose state no record has written for the TTL is
gone, and its next record starts it fresh.

Time is **event time by default**: the TTL is measured on the watermark (a key written in a
batch whose watermark was W expires in the first batch whose watermark is at least
W + ttl). Event time makes expiry a function of the data alone, so a replay, a catch-up
after downtime or a backfill expires exactly what a live run would have; processing time
(``ttl_time="processing"``) measures wall-clock time between batches instead, which is what a
job without event time needs, and what Spark's ``transformWithState`` and Flink offer.
"""

from __future__ import annotations

from dataclasses import dataclass

from sluice.errors import PipelineError
from sluice.graph.windows import format_duration, parse_duration

TTL_TIMES = ("event", "processing")


@dataclass(frozen=True)
class StateTTL:
    """Keep a key's state for ``ttl_us`` microseconds after its last write, measured in
    ``time`` ("event": the watermark; "processing": the batch's processing time)."""

    ttl_us: int
    time: str = "event"
    # the side output each expired key's last state goes to (None: none), read with
    # ``read_side_output(checkpoint, "side/<operator>/<on_expiry>")``
    on_expiry: str | None = None

    def __post_init__(self) -> None:
        if self.time not in TTL_TIMES:
            raise PipelineError(f"ttl_time must be one of {TTL_TIMES}, got {self.time!r}")
        if not isinstance(self.ttl_us, int) or self.ttl_us <= 0:
            raise PipelineError(f"ttl must be a positive duration, got {self.ttl_us!r} microseconds")
        if self.on_expiry is not None and (not isinstance(self.on_expiry, str) or not self.on_expiry.isidentifier()):
            raise PipelineError(f"on_expiry must name a side output (a word like 'expired'), got {self.on_expiry!r}")

    def describe(self) -> str:
        return f"{format_duration(self.ttl_us)} of {self.time} time"


def parse_ttl(ttl, ttl_time: str = "event", where: str = "ttl") -> StateTTL | None:
    """``ttl`` (seconds, a string like ``"1d"``, a :func:`ttl`, or None) as a StateTTL."""
    if ttl is None:
        return None
    if isinstance(ttl, StateTTL):
        return ttl

    if ttl_time not in TTL_TIMES:
        raise PipelineError(f"{where}: ttl_time must be one of {TTL_TIMES}, got {ttl_time!r}")
    return StateTTL(parse_duration(ttl, f"{where}: ttl"), ttl_time)


def ttl(duration, time: str = "event", on_expiry: str | None = None) -> StateTTL:
    """A state TTL with options, for ``ttl=`` of a keyed operator: ``duration`` (seconds or a
    string like ``"1d"``), ``time`` ("event" or "processing"), and ``on_expiry``: the name of
    a side output that gets one record per expired key, its key, its last state (as
    ``sluice.state.read`` shows it), ``last_write`` and ``expired_at``.

    >>> ttl("1d", on_expiry="expired").on_expiry
    'expired'
    """
    parsed = parse_ttl(duration, time, "ttl")
    assert parsed is not None
    return StateTTL(parsed.ttl_us, parsed.time, on_expiry)
