"""Small JSON files through which a running source and the Sluice runtime talk.

One running query holds its source readers in a Python worker process that Spark starts
(not in the driver's interpreter), so the two sides talk through files in ``control_dir``:

- ``<name>.admission.json``: ``{"max_rows": n}``, the admission limit (rows per micro-batch),
  written by ``set_max_rows`` and re-read by the reader every time it plans a batch, so a
  change takes effect at the next batch (docs/architecture.md, section 3, adaptive output buffer sizing).
- ``<name>.backlog.json``: written by the reader every time it plans a batch: how many rows
  it admitted, how many are waiting, and whether a finite source has admitted its last row.
- ``<name>.files.json`` (directory sources): the log of files found, in admission order.

Files are replaced atomically (write a temporary file, then rename), so a reader never sees
half a file. ``control_dir`` should live beside the checkpoint (``Checkpoint.sources``): the
directory source's file log must survive a restart together with Spark's offsets. It is a
path or any ``pyarrow.fs`` URI, opened the same way by the driver and by Spark's Python
workers wherever they run.
"""

from __future__ import annotations

import time

from sluice.core.admission import check_source_name, control_path, get_max_rows, read_json, set_max_rows, write_json_atomic

__all__ = [
    "BACKLOG_REFRESH_S",
    "BacklogReporter",
    "check_source_name",
    "control_path",
    "get_max_rows",
    "is_exhausted",
    "read_backlog",
    "read_json",
    "set_max_rows",
    "write_json_atomic",
]

BACKLOG_REFRESH_S = 0.25
"""With nothing to admit Spark polls a source every few milliseconds; the backlog file is
then refreshed at most this often (it is always written when a batch is planned)."""


class BacklogReporter:
    """Writes a source's ``<name>.backlog.json``, throttled while idle."""

    def __init__(self, control_dir: str, name: str):
        self.path = control_path(control_dir, name, "backlog")
        self._last_write = 0.0

    def report(self, status: dict, planned_batch: bool) -> None:
        now = time.monotonic()
        if planned_batch or now - self._last_write >= BACKLOG_REFRESH_S:
            write_json_atomic(self.path, status)
            self._last_write = now


def read_backlog(control_dir: str, name: str, now_us: int | None = None) -> dict | None:
    """What source ``name`` reported when it last planned a batch, or None before that.

    Keys: ``source``, ``kind``, ``planned_rows`` (rows admitted so far, through the batch
    being planned), ``available_rows`` (rows that have arrived; None if unbounded),
    ``backlog`` (arrived but not admitted; None if unbounded), ``max_rows`` (the limit
    in force), ``exhausted`` (a finite source admitted its last row), ``time`` (epoch s).

    A source with a rate keeps receiving rows while a batch runs, so its ``available_rows``
    and ``backlog`` are counted now, when read, from its clock (``start_us``, ``rate``): the
    rows due by now (``now_us``, default the clock) and not admitted, not those waiting
    when the batch was planned.
    """
    status = read_json(control_path(control_dir, name, "backlog"))
    if status and status.get("rate") and status.get("start_us") is not None:
        status = {**status, **_due_now(status, time.time_ns() // 1000 if now_us is None else now_us)}
    return status


def _due_now(status: dict, now_us: int) -> dict:
    """``available_rows`` and ``backlog`` of a source with a rate, as of ``now_us``."""
    from sluice.graph.rates import rate_from_json, rows_arrived

    rate = rate_from_json(status["rate"])
    assert rate is not None  # only a source with a rate is due by the clock
    due = rows_arrived(status["start_us"], rate, now_us)
    if status.get("total_rows") is not None:
        due = min(due, status["total_rows"])
    due = max(due, status.get("available_rows") or 0)
    return {"available_rows": due, "backlog": max(due - status["planned_rows"], 0)}


def is_exhausted(control_dir: str, name: str) -> bool:
    """True once a finite source (``total_rows``, a replayed file) has put its last row into
    a planned micro-batch. The runtime stops the query after that batch completes, e.g. when
    ``query.lastProgress`` shows no more input, or after ``query.processAllAvailable()``.
    Endless sources (and directory sources) are never exhausted."""
    status = read_backlog(control_dir, name)
    return bool(status and status.get("exhausted"))
