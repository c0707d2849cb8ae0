"""Sinks for ``Stream.sink(...)``: ``files``, ``console``, ``memory``, ``callback``."""

from sluice.graph.sinks import CallbackSink, ConsoleSink, FileSink, MemorySink, SinkSpec, callback, console, files, memory
from sluice.runtime.sinks import memory_table, read_files

__all__ = ["CallbackSink", "ConsoleSink", "FileSink", "MemorySink", "SinkSpec", "callback", "console", "files",
           "memory", "memory_table", "read_files"]
