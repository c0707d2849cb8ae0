"""The admission files through which the controller sets a running source's limit (rows per
micro-batch), and the name and JSON helpers every source control file uses
(``runtime.sources.control`` describes the files; the source readers re-read these every
time they plan a batch)."""

from __future__ import annotations

import json
import re
import time

from sluice.core import files
from sluice.errors import ConfigError

_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")


def check_source_name(name: str) -> str:
    """Source names become file names: letters, digits, '_', '.', '-' only."""
    if not isinstance(name, str) or not _SAFE_NAME.match(name) or name in (".", ".."):
        raise ConfigError(f"source name {name!r} must be letters, digits, '_', '.' or '-' (it names files)")
    return name


def control_path(control_dir: str, name: str, what: str) -> str:
    """Location (path or URI) of source ``name``'s ``what`` file."""
    return files.join(files.normalize(control_dir), f"{check_source_name(name)}.{what}.json")


def write_json_atomic(location: str, payload: dict) -> None:
    """Replace ``location`` with ``payload`` as JSON so that readers see the old or the new
    file, never a partial one."""
    fs, path = files.filesystem(location)
    files.write_atomic(fs, path, json.dumps(payload).encode())


def read_json(location: str) -> dict | None:
    """The JSON object in ``location``, or None if there is none (yet)."""
    fs, path = files.filesystem(location)
    try:
        return json.loads(files.read_bytes(fs, path) or b"null")
    except json.JSONDecodeError:
        return None


def set_max_rows(control_dir: str, name: str, max_rows: int | None) -> None:
    """Set source ``name``'s admission limit (rows per micro-batch) while it runs.

    Takes effect the next time the source plans a batch. ``None`` goes back to the source's
    default (its spec's ``max_rows_per_batch``).
    """
    if max_rows is not None and (isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1):
        raise ConfigError(f"max_rows for source {name!r} must be a positive integer or None, got {max_rows!r}")
    write_json_atomic(control_path(control_dir, name, "admission"), {"max_rows": max_rows, "time": time.time()})


def get_max_rows(control_dir: str, name: str) -> int | None:
    """The admission limit last set with ``set_max_rows`` (None: not set)."""
    found = read_json(control_path(control_dir, name, "admission"))
    value = (found or {}).get("max_rows")
    return int(value) if isinstance(value, int) and value > 0 else None
