"""Windows for ``KeyedStream.window(...)``, ``KeyedStream.windows(...)`` and ``Stream.window(...)``.

- ``tumbling(size)``, ``sliding(size, slide)``, ``session(gap)``: durations in seconds or
  strings such as ``"15m"``, ``"1h30m"``, ``"500ms"``;
- ``query(window, name=..., allowed_lateness=..., mode=..., **aggregates)``: one of several
  queries sharing a stream's panes;
- ``EventTime(column)`` and ``ProcessingTime()``: time domains (C-MR's application and
  system time).
"""

from sluice.api.windows import query
from sluice.graph.windows import (
    EventTime,
    ProcessingTime,
    Session,
    Sliding,
    Tumbling,
    WindowQuery,
    parse_duration,
    session,
    sliding,
    tumbling,
)

__all__ = [
    "EventTime",
    "ProcessingTime",
    "Session",
    "Sliding",
    "Tumbling",
    "WindowQuery",
    "parse_duration",
    "query",
    "session",
    "sliding",
    "tumbling",
]
