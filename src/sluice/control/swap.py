"""Replacing a running job's policies, between batches, with no restart and no lost batch.

Two ways in, both picked up by the controller after a batch and before its policies propose:

- **the policies file**: a job run with ``policies="policies.yaml"`` (``sluice run --policies``)
  watches that file; when its modification time changes the file is loaded again;
- **a request**: ``sluice control CHECKPOINT --policies FILE`` (or
  :func:`request_policies`) checks the file and drops it into the checkpoint as
  ``control/policies.request.yaml``; the controller claims it (renames it to
  ``control/policies.<batch>.yaml``, which keeps what was applied) and loads it. The
  checkpoint may be any URI the job's checkpoint is.

The new policies take over at once: what they propose after batch ``b`` applies from batch
``b + 1``, like any decision. The swap is a ``decision`` line in ``decisions.jsonl`` (action
kind ``policies``, with the new and the previous policies' settings). A file that does not
load (bad YAML, an unknown policy, a bad guard) changes nothing: it is a ``rejected`` line
with the error, and the policies in force go on.

Pure of Spark (files through the checkpoint's ``pyarrow.fs``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from sluice.control.config import parse_policies
from sluice.control.policy import Policy
from sluice.core.checkpoint import Checkpoint
from sluice.errors import ConfigError

REQUEST = "control/policies.request.yaml"


@dataclass
class Swap:
    """Policies to put in force (or the error that kept a file from loading), and whence."""

    source: str
    policies: list[Policy] | None = None
    error: str | None = None


class PolicySwaps:
    """Where a running job's controller looks for new policies after every batch."""

    def __init__(self, checkpoint: str | Checkpoint | None = None, watch: str | None = None):
        self.checkpoint = None if checkpoint is None else Checkpoint.of(checkpoint)
        self.watch = watch
        self._mtime = _mtime(watch) if watch else None

    def poll(self, batch_id: int) -> list[Swap]:
        """The swaps asked for since the last poll, oldest first (a request after the file)."""
        out = []
        if self.watch is not None:
            mtime = _mtime(self.watch)
            if mtime is not None and mtime != self._mtime:
                self._mtime = mtime
                out.append(_load(self.watch, _read_local(self.watch)))
        if self.checkpoint is not None:
            claimed = f"control/policies.{batch_id:09d}.yaml"
            try:  # claim first, then read: a request dropped meanwhile waits for the next poll
                self.checkpoint.fs.move(self.checkpoint.path(REQUEST), self.checkpoint.path(claimed))
            except (FileNotFoundError, OSError):
                return out
            out.append(
                _load(
                    f"{self.checkpoint.location(claimed)} (sluice control)",
                    (self.checkpoint.read_bytes(claimed) or b"").decode("utf-8", errors="replace"),
                )
            )
        return out


def request_policies(checkpoint: str | Checkpoint, path: str) -> list[Policy]:
    """Check a policies file and ask the job running on ``checkpoint`` to put it in force
    after its current batch; returns the policies it will run. Raises ConfigError, having
    asked nothing, when the file does not load."""
    text = _read_local(path)
    if text is None:
        raise ConfigError(f"no such policies file: {path}")
    policies = parse_policies(text, path)
    checkpoint = Checkpoint.of(checkpoint)
    if checkpoint.read_bytes("metrics.jsonl") is None and not checkpoint.started_batches():
        raise ConfigError(f"{checkpoint} holds no job (no batch ever started there): nothing would pick the policies up")
    checkpoint.write_bytes(REQUEST, text.encode())
    return policies


def _load(source: str, text: str | None) -> Swap:
    if text is None:
        return Swap(source, error=f"{source} is gone")
    try:
        return Swap(source, policies=parse_policies(text, source))
    except ConfigError as e:
        return Swap(source, error=str(e))


def _mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _read_local(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None
