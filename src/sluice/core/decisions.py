"""``<checkpoint>/decisions.jsonl``: every decision of the controller, one JSON object a line.

Four record types (key ``type``), all with ``batch_id`` (the batch after which it was
made; it applies from ``batch_id + 1``) and ``time`` (epoch s):

- ``decision``: ``id`` (a sequence number), ``policy``, ``action`` (``kind``, ``target``,
  ``value``, ``reason``, ``expected``), ``constraints`` (each constraint's window status
  when it was made);
- ``measured``: ``decision`` (the id it measures), ``measured`` (the same keys as the
  decision's ``expected``, as measured on the first batch that ran with it), ``batch_id``;
- ``escalation``: ``constraint``, ``state`` (``started`` / ``ended``), ``details``
  (``bottleneck``, ``max_rate``, ``offered_rate``, ...), ``reason``.
- ``rejected``: an accepted action that cannot apply (``action``), or new policies that did
  not load, with the ``reason``; nothing changed.

A swap of the policies while the job runs is a ``decision`` whose action kind is
``policies``, with ``policies`` and ``previous`` (each policy's settings; ``control.swap``).

Written through the job's ``Checkpoint`` (``pyarrow.fs``), so the checkpoint may be any URI.
A restart appends to the same file; the dashboard reads it as it grows.
"""

from __future__ import annotations

import json

from sluice.core import jsonlines
from sluice.core.checkpoint import Checkpoint

FILE = "decisions.jsonl"


class DecisionLog:
    def __init__(self, checkpoint: str | Checkpoint | None):
        self.checkpoint = None if checkpoint is None else Checkpoint.of(checkpoint)
        self.records: list[dict] = []  # this run's records, also when there is no checkpoint
        self._next: int | None = None

    def next_id(self) -> int:
        """Decision ids continue across restarts."""
        if self._next is None:
            self._next = 1 + max((r.get("id", 0) for r in self.read()), default=0)
        value = self._next
        self._next += 1
        return value

    def append(self, record: dict) -> None:
        self.records.append(record)
        if self.checkpoint is not None:
            self.checkpoint.append_line(FILE, json.dumps(record, default=str))

    def read(self) -> list[dict]:
        if self.checkpoint is None:
            return list(self.records)
        data = self.checkpoint.read_bytes(FILE) or b""
        return jsonlines.parse(data, self.checkpoint.location(FILE))  # a torn last line is skipped


def read_decisions(checkpoint: str | Checkpoint) -> list[dict]:
    """Every record of ``<checkpoint>/decisions.jsonl``, in order."""
    return DecisionLog(checkpoint).read()
