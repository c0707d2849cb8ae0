"""``<checkpoint>/decisions.jsonl``: every decision of the controller, one JSON object a line.

Three record types (key ``type``), all with ``batch_id`` (the batch after which it was
made; it applies from ``batch_id + 1``) and ``time`` (epoch s):

- ``decision``: ``id`` (a sequence number), ``policy``, ``action`` (``kind``, ``target``,
  ``value``, ``reason``, ``expected``), ``constraints`` (each constraint's window status
  when it was made);
- ``measured``: ``decision`` (the id it measures), ``measured`` (the same keys as the
  decision's ``expected``, as measured on the first batch that ran with it), ``batch_id``;
- ``escalation``: ``constraint``, ``state`` (``started`` / ``ended``), ``details``
  (``bottleneck``, ``max_rate``, ``offered_rate``, ...), ``reason``.

Written through ``pyarrow.fs`` (``runtime.files``), so the checkpoint may be any URI.
A restart appends to the same file; the dashboard reads it as it grows.
"""

from __future__ import annotations

import json

from sluice.runtime.files import filesystem, read_bytes, write_atomic

FILE = "decisions.jsonl"


class DecisionLog:
    def __init__(self, checkpoint: str | None):
        self.path = None
        if checkpoint is not None:
            self.fs, base = filesystem(checkpoint)
            self.path = f"{base}/{FILE}"
        self.records: list[dict] = []  # this run's records, also when there is no checkpoint

    def next_id(self) -> int:
        """Decision ids continue across restarts."""
        if not hasattr(self, "_next"):
            self._next = 1 + max((r.get("id", 0) for r in read_decisions_from(self)), default=0)
        value = self._next
        self._next += 1
        return value

    def append(self, record: dict) -> None:
        self.records.append(record)
        if self.path is None:
            return
        line = (json.dumps(record, default=str) + "\n").encode()
        try:
            with self.fs.open_append_stream(self.path) as out:
                out.write(line)
        except (NotImplementedError, OSError):  # object stores cannot append: rewrite whole
            write_atomic(self.fs, self.path, (read_bytes(self.fs, self.path) or b"") + line)


def read_decisions_from(log: DecisionLog) -> list[dict]:
    if log.path is None:
        return list(log.records)
    data = read_bytes(log.fs, log.path) or b""
    return [json.loads(line) for line in data.decode().splitlines() if line.strip()]


def read_decisions(checkpoint: str) -> list[dict]:
    """Every record of ``<checkpoint>/decisions.jsonl``, in order."""
    return read_decisions_from(DecisionLog(checkpoint))
