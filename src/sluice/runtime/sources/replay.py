"""The stream reader of a ReplaySource: a recorded file replayed at a rate."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from sluice.runtime.sources.files import read_files_cached
from sluice.runtime.sources.row_reader import RowStreamReader

REPLAY_CHUNK_ROWS = 65536


class ReplayStreamReader(RowStreamReader):
    def _table(self) -> pa.Table:
        # Cached per process and keyed by the files' mtimes and sizes: a replay source is a
        # file (or a small directory) that fits in memory.
        return read_files_cached(self.spec.files(), self.spec.format, self.spec.schema())

    def total_rows(self) -> int | None:
        return self._table().num_rows

    def user_batches(self, first: int, stop: int, start_us: int) -> Iterator[pa.RecordBatch]:
        yield from self._table().slice(first, stop - first).to_batches(REPLAY_CHUNK_ROWS)
