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
import pyarrow.fs as pafs

from sluice.runtime.files import filesystem, list_files, read_bytes, write_atomic

DEAD_LETTER = "dead_letter"


def _jsonable(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    return str(value)


class SideOutputWriter:
    """Collects a task's side records and writes them as one JSON-lines file."""

    def __init__(self, root: str, channel: str, batch_id: int, stage: str, partition: int):
        self.root, self.channel, self.batch_id = root, channel, batch_id
        self.stage, self.partition = stage, partition
        self.records: list[dict] = []

    def dead(self, operator: str, record: dict | None, error: BaseException | str, location: str | None = None) -> None:
        if isinstance(error, BaseException):
            reason = "".join(traceback.format_exception_only(type(error), error)).strip()
        else:
            reason = error
        self.records.append({
            "batch_id": self.batch_id, "operator": operator, "location": location,
            "error": reason, "record": json.dumps(record, default=_jsonable) if record is not None else None,
        })

    def add_table(self, operator: str, table: pa.Table, reason: str) -> None:
        for row in table.to_pylist():
            self.dead(operator, row, reason)

    def flush(self) -> int:
        if not self.records:
            return 0
        fs, base = filesystem(self.root)
        path = f"{base}/{self.channel}/batch={self.batch_id:09d}/{self.stage}-p{self.partition:05d}.jsonl"
        write_atomic(fs, path, "\n".join(json.dumps(r) for r in self.records).encode() + b"\n")
        n = len(self.records)
        self.records = []
        return n


def read_side_output(root: str, channel: str = DEAD_LETTER, batch_id: int | None = None) -> list[dict]:
    """Side records of one batch, or of all batches, in a stable order."""
    fs, base = filesystem(root)
    out: list[dict] = []
    batch_dirs = [f"{base}/{channel}/batch={batch_id:09d}"] if batch_id is not None else [
        i.path for i in fs.get_file_info(pafs.FileSelector(f"{base}/{channel}", allow_not_found=True))
        if i.type == pafs.FileType.Directory
    ]
    for directory in sorted(batch_dirs):
        for path in list_files(fs, directory):
            data = read_bytes(fs, path) or b""
            out.extend(json.loads(line) for line in data.decode().splitlines() if line)
    return out
