"""The stream reader of a GeneratorSource: synthetic rows, deterministic by (seed, row)."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from sluice.runtime.sources.row_reader import RowStreamReader


class GeneratorStreamReader(RowStreamReader):
    def total_rows(self) -> int | None:
        return self.spec.total_rows

    def user_batches(self, first: int, stop: int, start_us: int) -> Iterator[pa.RecordBatch]:
        # GeneratorSource.generate draws whole fixed blocks, so these rows are the same
        # whatever range a (replayed) batch asks for.
        yield from self.spec.generate(first, stop, start_us)
