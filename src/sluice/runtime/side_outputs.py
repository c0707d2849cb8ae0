"""Records that leave the main flow: dead letters (an operator raised) and side outputs
(e.g. late records of a window). Nothing is silently dropped: each goes to a file of its
channel, per batch and partition, with why it left.

Files are named by (channel, batch, stage, partition) and written atomically, so a retried
or replayed task replaces its own file instead of adding duplicates.
"""

from __future__ import annotations

import json
import traceback
from typing import Any

import pyarrow as pa

from sluice.runtime.checkpoint import Checkpoint

DEAD_LETTER = "dead_letter"


def _jsonable(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    return str(value)


def combine_stage_name(op_id: str) -> str:
    """The stage name an operator's map-side combine writes its side-output files under
    (one file per batch, stage and partition, so a replayed task replaces its own)."""
    return f"{op_id}.combine"


class SideOutputWriter:
    """Collects a task's side records and writes them as one JSON-lines file."""

    def __init__(self, root: str | Checkpoint, channel: str, batch_id: int, stage: str, partition: int):
        self.root, self.channel, self.batch_id = Checkpoint.of(root), channel, batch_id
        self.stage, self.partition = stage, partition
        self.records: list[dict] = []

    def dead(
        self, operator: str, record: object, error: BaseException | str, location: str | None = None, key: tuple | None = None
    ) -> None:
        """One dead letter; ``key``: the record's key values, for a keyed operator's."""
        if isinstance(error, BaseException):
            reason = "".join(traceback.format_exception_only(type(error), error)).strip()
        else:
            reason = error
        self.records.append(
            {
                "batch_id": self.batch_id,
                "operator": operator,
                "location": location,
                "error": reason,
                "record": json.dumps(record, default=_jsonable) if record is not None else None,
                # every dead letter has the field, so a table of mixed ones keeps it
                "key": json.dumps(list(key), default=_jsonable) if key is not None else None,
            }
        )

    def add_table(self, operator: str, table: pa.Table, reason: str) -> None:
        for row in table.to_pylist():
            self.dead(operator, row, reason)

    def flush(self) -> int:
        if not self.records:
            return 0
        path = f"{_batch_dir(self.channel, self.batch_id)}/{self.stage}-p{self.partition:05d}.jsonl"
        self.root.write_bytes(path, "\n".join(json.dumps(r) for r in self.records).encode() + b"\n")
        n = len(self.records)
        self.records = []
        return n


def clear_side_output(root: str | Checkpoint, channel: str, batch_id: int) -> None:
    """Remove one batch's side records before the batch runs (again): a replay writes its own,
    and a file left by an earlier execution whose task now has nothing to write (say, after
    the operator that raised was fixed) would otherwise be read as this execution's."""
    checkpoint = Checkpoint.of(root)
    checkpoint.fs.delete_dir_contents(checkpoint.path(_batch_dir(channel, batch_id)), missing_dir_ok=True)


def read_side_output(root: str | Checkpoint, channel: str = DEAD_LETTER, batch_id: int | None = None) -> list[dict]:
    """Side records of one batch, or of all batches, in a stable order."""
    checkpoint = Checkpoint.of(root)
    batch_dirs = (
        [_batch_dir(channel, batch_id)] if batch_id is not None else [f"{channel}/{name}" for name in checkpoint.dirs(channel)]
    )
    out: list[dict] = []
    for directory in batch_dirs:
        for name in checkpoint.files(directory):
            data = checkpoint.read_bytes(f"{directory}/{name}") or b""
            out.extend(json.loads(line) for line in data.decode().splitlines() if line)
    return out


def _batch_dir(channel: str, batch_id: int) -> str:
    return f"{channel}/batch={batch_id:09d}"
