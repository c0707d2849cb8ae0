"""A per-process LRU cache of decoded state files.

Spark reuses its Python workers across tasks, so a module-level cache lets the task that owns a
key group in batch b+1 find the files it (or a neighbour) read or wrote in batch b without
going to storage. Correctness never depends on a hit: entries are keyed by the file's path
*and* its checksum, so a rewritten file (a replayed task) is a different entry, and a miss just
reads and verifies the file again.

The budget is in bytes of decoded Arrow data, ``SLUICE_STATE_CACHE_BYTES`` (default 256 MiB;
0 disables the cache).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

import pyarrow as pa

DEFAULT_BUDGET = 256 * 1024 * 1024


def _budget_from_env() -> int:
    raw = os.environ.get("SLUICE_STATE_CACHE_BYTES")
    if raw is None:
        return DEFAULT_BUDGET
    try:
        return max(0, int(raw))
    except ValueError:
        return DEFAULT_BUDGET


class TableCache:
    """Least-recently-used map (key -> pa.Table) bounded by the tables' ``nbytes``."""

    def __init__(self, budget_bytes: int):
        self.budget_bytes = budget_bytes
        self._entries: OrderedDict[tuple, pa.Table] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: tuple) -> pa.Table | None:
        with self._lock:
            table = self._entries.get(key)
            if table is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return table

    def put(self, key: tuple, table: pa.Table) -> None:
        size = table.nbytes
        if size > self.budget_bytes:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old.nbytes
            self._entries[key] = table
            self._bytes += size
            while self._bytes > self.budget_bytes and self._entries:
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= evicted.nbytes

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0
            self.hits = 0
            self.misses = 0

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)


#: The process-wide cache every KeyGroupStore of this process shares.
FILE_CACHE = TableCache(_budget_from_env())
