"""Backlog of Sluice sources read from Spark's StreamingQueryProgress.

Sluice's stream readers report, through ``reportLatestOffset``, the latest offset that has
arrived; the progress of a batch carries it as ``latestOffset`` beside the batch's
``endOffset``. Both have a ``rows`` count, so the backlog (rows arrived but not yet admitted)
is their difference.
"""

from __future__ import annotations

import json
import math
from typing import Any


def _as_dict(value: Any) -> dict | None:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    return value if isinstance(value, dict) else None


def backlog_from_progress(progress: str | dict) -> dict[str, float]:
    """``{source name: backlog rows}`` for every Sluice source in a progress report.

    ``progress`` is ``query.lastProgress`` (a dict) or ``StreamingQueryProgress.json``.
    An endless source without a rate is always saturated: its backlog is ``math.inf``.
    Sources that are not Sluice's (or report no latest offset) are left out.
    """
    report = _as_dict(progress) or {}
    backlog: dict[str, float] = {}
    for source in report.get("sources", []):
        latest = _as_dict(source.get("latestOffset"))
        end = _as_dict(source.get("endOffset")) or {}
        if not latest or "source" not in latest:
            continue
        if latest.get("unbounded"):
            backlog[latest["source"]] = math.inf
        else:
            backlog[latest["source"]] = max(latest.get("rows", 0) - end.get("rows", 0), 0)
    return backlog
