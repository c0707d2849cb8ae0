"""Sinks for ``Stream.sink(...)``: ``files``, ``console``, ``memory``, ``callback``; and readers
of what a file sink wrote: ``read_files`` (every batch's records) and ``read_latest`` (the
current row per key)."""

from sluice.graph.sinks import CallbackSink, ConsoleSink, FileSink, MemorySink, SinkSpec, callback, console, files, memory
from sluice.runtime.changelog import read_latest
from sluice.runtime.sinks import memory_table, read_files

__all__ = ["CallbackSink", "ConsoleSink", "FileSink", "MemorySink", "SinkSpec", "callback", "console", "files",
           "memory", "memory_table", "read_files", "read_latest"]
