"""Where a stream's records end up: pure descriptions the runtime turns into writers.

Every sink is written idempotently per micro-batch id, so a batch replayed after a crash
replaces what it wrote before instead of adding to it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from sluice.errors import PipelineError


@dataclass(frozen=True)
class SinkSpec:
    """What every sink specification is: give one to ``Stream.sink`` (made by the functions of
    ``sluice.sinks``)."""

    kind: str = ""


@dataclass(frozen=True)
class FileSink(SinkSpec):
    """Files under ``path/batch=<id>/``; a replayed batch overwrites its own directory."""

    path: str = ""
    format: str = "parquet"  # "parquet" or "json" (JSON lines)
    kind: str = "files"
    target_file_bytes: int | None = None  # roll small batches' files together to about this size

    def __post_init__(self) -> None:
        if not self.path:
            raise PipelineError("files sink: a path is required")
        if self.format not in ("parquet", "json"):
            raise PipelineError(f"files sink {self.path!r}: format must be 'parquet' or 'json', not {self.format!r}")
        if self.target_file_bytes is not None and self.format != "parquet":
            raise PipelineError(
                f"files sink {self.path!r}: target_file_size rolls Parquet files; format={self.format!r} has none"
            )


@dataclass(frozen=True)
class ConsoleSink(SinkSpec):
    """Prints each batch on the driver's console, at most ``rows`` rows of it (for trying things
    out: not exactly once, a replayed batch prints again)."""

    rows: int = 20
    kind: str = "console"


@dataclass(frozen=True)
class MemorySink(SinkSpec):
    """Keeps each batch's rows in the driver's memory, by batch id (for tests and notebooks)."""

    name: str = ""
    kind: str = "memory"

    def __post_init__(self) -> None:
        if not self.name:
            raise PipelineError("memory sink: a name is required")


@dataclass(frozen=True)
class CallbackSink(SinkSpec):
    """Calls ``fn(batch_id, table)`` on the driver. A replayed batch calls it again with the
    same batch id: the function should be idempotent per batch id."""

    fn: Callable | None = None
    format: str = "arrow"  # "arrow" (pyarrow.Table) or "pandas"
    kind: str = "callback"

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise PipelineError(f"callback sink: fn must be callable, got {self.fn!r}")
        if self.format not in ("arrow", "pandas"):
            raise PipelineError(f"callback sink: format must be 'arrow' or 'pandas', not {self.format!r}")


def files(path: str, format: str = "parquet", target_file_size: int | str | None = None) -> FileSink:
    """Write each micro-batch's records to ``path/batch=<id>/`` as Parquet (default) or JSON
    lines (``format="json"``), through Spark's file commit protocol: a batch's directory is
    complete (it has ``_SUCCESS``) or absent, and a batch replayed after a crash replaces its
    own directory, so the files hold every batch exactly once. A batch that wrote no rows
    leaves no directory.

    ``target_file_size`` (Parquet, e.g. ``"64MB"``): small batches are rolled together
    behind the job, between batches: once consecutive committed batches' files reach the
    size together they become one file in ``path/batches=<first>-<last>/``, still exactly
    once (``runtime.file_rolling``). Readers here handle both; another reader should read
    ``batch=`` and ``batches=`` directories that have ``_SUCCESS``, and skip a ``batch=<id>``
    a ``batches=`` range covers (it exists only for a moment, until the roll removes it).

    The output is a changelog, one directory per batch: a keyed aggregate writes each key
    again in every batch that changed it (its running value then). For the latest value per
    key read it with ``sluice.sinks.read_latest(path, keys=[...])``; for every record in batch
    order, ``sluice.sinks.read_files(path)``; from Spark or pandas, read the Parquet files
    of ``path`` and keep, per key, the row of the highest ``batch=`` directory.

    >>> from sluice import sinks
    >>> sinks.files("out/per_meter", format="json").format
    'json'
    """
    return FileSink(path=str(path), format=format, target_file_bytes=parse_size(target_file_size, f"files sink {str(path)!r}"))


def console(rows: int = 20) -> ConsoleSink:
    """Print up to ``rows`` records of each micro-batch on the driver's console.

    >>> from sluice import sinks
    >>> sinks.console(rows=5).rows
    5
    """
    return ConsoleSink(rows=rows)


def memory(name: str) -> MemorySink:
    """Keep each micro-batch's records in the driver's memory under ``name`` (read them with
    ``sluice.sinks.memory_table(name)``): for tests and notebooks.

    >>> from sluice import sinks
    >>> sinks.memory("alerts").name
    'alerts'
    """
    return MemorySink(name=name)


def callback(fn: Callable, format: str = "arrow") -> CallbackSink:
    """Call ``fn(batch_id, table)`` on the driver once per micro-batch with the batch's
    records: a ``pyarrow.Table`` (or a pandas DataFrame with ``format="pandas"``) without
    the runtime's hidden columns.

    Replays: after a crash, a batch that had not committed runs again and calls ``fn`` again
    with the same ``batch_id`` and the same records. For exactly-once output ``fn`` must be
    idempotent per batch id: overwrite what that batch id wrote (upsert keyed by batch id,
    or write to a place named by it), or record the last batch id it applied in the same
    transaction as the data and skip a batch id it has already applied. ``fn`` runs between
    the batch's start and its commit: if it raises, the job stops with the error, and the
    restarted job runs that batch again.

    >>> from sluice import sinks
    >>> seen = {}
    >>> sink = sinks.callback(lambda batch_id, table: seen.__setitem__(batch_id, table.num_rows))
    >>> sink.format
    'arrow'
    """
    return CallbackSink(fn=fn, format=format)


def parse_size(value: int | str | None, where: str) -> int | None:
    """``"64MB"``, ``"1GiB"``, ``"500KB"`` or bytes, as bytes."""
    if value is None:
        return None
    if isinstance(value, int) and value > 0:
        return value
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmg]i?b?|b)?\s*", str(value).lower())
    if not m:
        raise PipelineError(f"{where}: target_file_size must be bytes or a size such as '64MB', got {value!r}")
    unit = (m.group(2) or "b")[0]
    size = int(float(m.group(1)) * {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[unit])
    if size <= 0:
        raise PipelineError(f"{where}: target_file_size must be positive, got {value!r}")
    return size
