"""Reading a file sink's output as a table of current values.

A file sink writes one directory per micro-batch, and a keyed operator's output in a batch
holds the keys that batch changed, with their values then: the files are a changelog. The
current value of a key is its row in the latest batch that wrote it.
"""

from __future__ import annotations

import pyarrow as pa

from sluice.errors import SinkError
from sluice.runtime.kernels.grouping import last_rows
from sluice.runtime.sinks import read_files


def latest_per_key(changelog: pa.Table, keys: list[str]) -> pa.Table:
    """The last row of each key in ``changelog`` (rows in batch order), ordered by when each
    key last changed."""
    missing = [k for k in keys if k not in changelog.column_names]
    if missing:
        raise SinkError(f"key column(s) {missing} not in the output; its columns: {changelog.column_names}")
    return changelog.take(last_rows(changelog, keys))


def read_latest(path: str, keys: list[str] | str, format: str = "parquet") -> pa.Table | None:
    """The latest row per key that a file sink at ``path`` wrote (None if it wrote nothing).

        sluice.sinks.read_latest("out/per_meter", keys="meter").to_pandas()

    >>> from sluice import sinks
    >>> sinks.read_latest("/tmp/no-such-sluice-output", keys="meter") is None
    True
    """
    keys = [keys] if isinstance(keys, str) else list(keys)
    changelog = read_files(path, format)
    if changelog is None:
        return None
    return latest_per_key(changelog, keys)
