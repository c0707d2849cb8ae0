"""Messages a connector source could not read as its schema, on their way to dead letters.

A source's reader runs in a Spark task and does not know the micro-batch id, but Spark's
offset log does: the reader writes the rejects of a batch's messages into a directory that the
batch's end offset names (``"rejects": <dir>``), one file per partition, replaced whole on a
replay (the same messages give the same rejects). After the batch's sinks ran, the executor
finds that directory through the offset log and forwards its records to the dead-letter sink
with the batch id, like records an operator failed on.
"""

from __future__ import annotations

import json

from sluice.runtime.files import filesystem, list_files, read_bytes, write_atomic


def rejects_dir(control_dir: str, name: str, end_rows: int) -> str:
    return f"{control_dir.rstrip('/')}/{name}.rejects/{end_rows:012d}"


def write_rejects(directory: str, part: int, records: list[dict]) -> None:
    """The rejects of one partition (``records``: operator, location, error, record)."""
    if not records:
        return
    fs, base = filesystem(directory)
    data = "\n".join(json.dumps(r) for r in records).encode() + b"\n"
    write_atomic(fs, f"{base}/part-{part:05d}.jsonl", data)


def rejected_in_offset_log(entry: bytes | None, batch_id: int) -> list[dict]:
    """Dead-letter records of the messages that the sources of one batch rejected.

    ``entry`` is the batch's file of Spark's offset log: ``v1``, a metadata line, then one
    line per source with its end offset (JSON for Sluice's sources)."""
    records: list[dict] = []
    for line in (entry or b"").decode("utf-8", errors="replace").splitlines()[2:]:
        try:
            offset = json.loads(line)
        except json.JSONDecodeError:
            continue
        directory = offset.get("rejects") if isinstance(offset, dict) else None
        if not isinstance(directory, str):
            continue
        fs, base = filesystem(directory)
        for path in list_files(fs, base):
            for text in (read_bytes(fs, path) or b"").decode().splitlines():
                if text:
                    records.append({"batch_id": batch_id, **json.loads(text)})
    return records
