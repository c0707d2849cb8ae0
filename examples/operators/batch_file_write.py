"""Batch File Write (Sec. 5.2): buffer a 100-byte string per tuple; every 10,000 tuples, write the
buffer to a new file on local disk. An accumulator and disk-I/O task; the number of files per
second is proportional to the input rate. Thread-safe: the buffer is swapped under a lock and
the file is written outside it.
"""

from __future__ import annotations

import os
import tempfile
import threading
import uuid

RECORD = b"x" * 99 + b"\n"  # 100 bytes
WINDOW = 10_000


class BatchFileWrite:
    name = "batch_file_write"

    def __init__(self, directory: str | None = None, window: int = WINDOW, keep_files: bool = False):
        self.directory = directory
        self.window = window
        self.keep_files = keep_files
        self._lock = threading.Lock()
        self._buffer: list[bytes] = []
        self.files_written = 0

    def setup(self) -> None:
        if self.directory is None:
            self.directory = tempfile.mkdtemp(prefix="sluice-batch-write-")
        os.makedirs(self.directory, exist_ok=True)

    def process(self, key: int) -> int:
        with self._lock:
            self._buffer.append(RECORD)
            if len(self._buffer) < self.window:
                return 0
            full, self._buffer = self._buffer, []
        path = os.path.join(self.directory, f"batch-{uuid.uuid4().hex}.txt")
        with open(path, "wb") as f:
            f.write(b"".join(full))
            f.flush()
            os.fsync(f.fileno())
        if not self.keep_files:
            os.remove(path)
        self.files_written += 1
        return 1

    def close(self) -> None:
        pass
