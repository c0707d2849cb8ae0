"""Reading the checkpoint's append-only JSON-lines logs (``metrics.jsonl``,
``decisions.jsonl``) without trusting them to be whole.

A crash or a full disk in the middle of an append leaves the last line cut short; such a
line is skipped (``files.append`` starts the next line on a line of its own). A line that
is not JSON elsewhere in the file (the file was edited or damaged) is skipped with a
warning naming the file and the line: these logs describe the job (its metrics and the
controller's decisions), they hold nothing exactly-once depends on.
"""

from __future__ import annotations

import json
import warnings


class DamagedLineWarning(UserWarning):
    """A line of a checkpoint's log was not JSON and was skipped."""


def parse(data: bytes, where: str, first_line: int = 1) -> list[dict]:
    """The JSON objects of ``data``'s lines; torn and damaged lines are left out."""
    lines = data.split(b"\n")
    torn_last = not data.endswith(b"\n")
    out: list[dict] = []
    for number, raw in enumerate(lines, first_line):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            record = None
        if isinstance(record, dict):
            out.append(record)
        elif not (torn_last and number == first_line + len(lines) - 1):  # a torn last line is expected
            warnings.warn(f"{where}, line {number}: not a JSON object, skipped", DamagedLineWarning, stacklevel=2)
    return out
