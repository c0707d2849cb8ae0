"""Where a stream's records end up: pure descriptions the runtime turns into writers.

Every sink is written idempotently per micro-batch id, so a batch replayed after a crash
replaces what it wrote before instead of adding to it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sluice.errors import PipelineError


@dataclass(frozen=True)
class SinkSpec:
    kind: str = ""


@dataclass(frozen=True)
class FileSink(SinkSpec):
    """Files under ``path/batch=<id>/``; a replayed batch overwrites its own directory."""

    path: str = ""
    format: str = "parquet"  # "parquet" or "json" (JSON lines)
    kind: str = "files"

    def __post_init__(self) -> None:
        if not self.path:
            raise PipelineError("files sink: a path is required")
        if self.format not in ("parquet", "json"):
            raise PipelineError(f"files sink {self.path!r}: format must be 'parquet' or 'json', not {self.format!r}")


@dataclass(frozen=True)
class ConsoleSink(SinkSpec):
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


def files(path: str, format: str = "parquet") -> FileSink:  # noqa: A002
    return FileSink(path=str(path), format=format)


def console(rows: int = 20) -> ConsoleSink:
    return ConsoleSink(rows=rows)


def memory(name: str) -> MemorySink:
    return MemorySink(name=name)


def callback(fn: Callable, format: str = "arrow") -> CallbackSink:  # noqa: A002
    return CallbackSink(fn=fn, format=format)
