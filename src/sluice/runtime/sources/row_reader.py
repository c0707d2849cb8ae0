"""The stream reader shared by row-numbered sources (generator, replay).

Rows are numbered 0, 1, 2, ...; an offset is the count of rows admitted so far plus the
source's clock, e.g. ``{"source": "meters", "rows": 40000, "start_us": ..., "at_us": ...}``:

- ``start_us``: when row 0 was due (the spec's ``start_time`` or the query's first start).
  It travels in every offset, so Spark's offset log keeps it and a restarted query replays
  rows with identical values and timestamps.
- ``at_us``: when the batch ending at this offset was planned. A source without a rate makes
  its rows available when they are admitted, so this is their ingest time; it is logged too,
  so a replayed batch gets the same ingest times.
- ``end``: present (True) only on a finite source's end-of-input punctuation, the offset
  planned once every row has been admitted (``end_of_input``).

With a rate, row i arrives at ``start_us + i / rate`` (or at its time in the rate's
schedule of steps: ``sluice.graph.rates``), and a batch admits only rows that
have arrived. The hidden ``__ingest_ts`` column is that arrival time, so measured latency
includes the wait at the source (Nephele's output-buffer latency).

This reader object lives in a Python worker Spark keeps for the query (driver side); Spark
pickles it to executors to call ``read``, which therefore uses only the partition given.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from sluice.graph.rates import Rate, arrival_us, rate_to_json, rows_arrived
from sluice.graph.sources import GENERATOR_BLOCK_ROWS, TIMESTAMP
from sluice.runtime.sources.admission import (
    DEFAULT_MAX_ROWS_PER_BATCH,
    admission_cap,
    default_read_limit,
)
from sluice.runtime.sources.control import BacklogReporter

MIN_PARTITION_ROWS = 2 * GENERATOR_BLOCK_ROWS
"""A batch is split into parallel partitions only if each gets at least this many rows."""


def now_us() -> int:
    return time.time_ns() // 1000


def end_of_input(offset: dict, now: int) -> dict:
    """The end-of-input punctuation after ``offset``, the offset of a finite source's last row.

    It is the same offset plus ``"end": True``: Spark sees a new offset, logs it in its offset
    log and runs one more micro-batch, with no rows, in which the executor reads the flag
    from the log and closes every window (Flink's final MAX watermark). Carried in the
    offsets, the punctuation is replayed or skipped on restart like any other batch.
    """
    return {**offset, "at_us": now, "end": True}


class RowRange(InputPartition):
    """Rows [first, stop) of a batch, with the clock needed to make them (picklable)."""

    def __init__(self, first: int, stop: int, start_us: int, at_us: int):
        self.first, self.stop, self.start_us, self.at_us = first, stop, start_us, at_us

    def __repr__(self) -> str:
        return f"RowRange({self.first}, {self.stop})"


def split_rows(first: int, stop: int, parts: int, align: int) -> list[tuple[int, int]]:
    """Cut [first, stop) into at most ``parts`` ranges with inner cuts on multiples of
    ``align`` (so a generator block is never made by two partitions)."""
    n = stop - first
    if n <= 0:
        return []
    parts = max(1, min(parts, n // MIN_PARTITION_ROWS))
    cuts = {first, stop}
    for k in range(1, parts):
        cut = (first + n * k // parts) // align * align
        if first < cut < stop:
            cuts.add(cut)
    edges = sorted(cuts)
    return list(itertools.pairwise(edges))


class RowStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Base of the generator and replay readers; subclasses say how many rows there are and
    how to make a range of them (``total_rows``, ``user_batches``)."""

    # ``read`` needs only the partition and the spec: the chain after the source may read
    # the records itself (``sources.splits``)
    reads_anywhere = True

    def __init__(self, spec, name: str, control_dir: str, schema: StructType, parallelism: int):
        self.spec = spec
        self.name = name
        self.control_dir = control_dir
        self.parallelism = max(1, parallelism)
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        self.rate: Rate | None = spec.rate
        self._initial: dict | None = None
        self._available_now = False
        self._target: int | None = None
        self._last_start: dict | None = None
        self._backlog = BacklogReporter(control_dir, name)

    # --- what subclasses provide -------------------------------------------------------------

    def total_rows(self) -> int | None:
        """Rows the source will ever have (None: endless)."""
        raise NotImplementedError

    def user_batches(self, first: int, stop: int, start_us: int) -> Iterator[pa.RecordBatch]:
        """Rows [first, stop), user columns, in order."""
        raise NotImplementedError

    # --- offsets --------------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        # Cached: Spark may ask more than once before the first batch is logged.
        if self._initial is None:
            fixed = self.spec.start_time
            start_us = round(fixed * 1e6) if fixed is not None else now_us()
            self._initial = {"source": self.name, "rows": 0, "start_us": start_us, "at_us": start_us}
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        return default_read_limit()

    def prepareForTriggerAvailableNow(self) -> None:
        # Trigger.AvailableNow: read what has arrived by now, then end (target set lazily at
        # the next planning, when the start offset is known).
        self._available_now = True
        self._target = None

    def _arrived(self, start: dict, now: int) -> int | None:
        """Rows available by ``now`` (None: any number, i.e. no rate and no end)."""
        total = self.total_rows()
        if self.rate is None:
            return total
        arrived = rows_arrived(start["start_us"], self.rate, now)
        return arrived if total is None else min(arrived, total)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        self._last_start = start
        first = start["rows"]
        now = now_us()
        available = self._arrived(start, now)
        cap = admission_cap(limit, self.control_dir, self.name, self.spec.max_rows_per_batch)
        total = self.total_rows()
        if total is not None and first >= total:
            self._report(start, first, available, cap, now)
            return start if start.get("end") else end_of_input(start, now)
        if self._available_now:
            if self._target is None:
                self._target = available if available is not None else (first + (cap or DEFAULT_MAX_ROWS_PER_BATCH))
            available = self._target if available is None else min(available, self._target)
        if available is None:  # endless and rate-less: one batch's worth at a time
            end = first + (cap or DEFAULT_MAX_ROWS_PER_BATCH)
        else:
            end = available if cap is None else min(available, first + cap)
        end = max(end, first)
        self._report(start, end, available, cap, now)
        if end == first:
            return start
        return {"source": self.name, "rows": end, "start_us": start["start_us"], "at_us": now}

    def reportLatestOffset(self) -> dict | None:
        """The latest offset available (for Spark's progress: backlog = this - endOffset)."""
        if self._last_start is None:
            return None
        available = self._arrived(self._last_start, now_us())
        if available is None:
            return {"source": self.name, "rows": self._last_start["rows"], "unbounded": True}
        return {"source": self.name, "rows": available, "start_us": self._last_start["start_us"]}

    def _report(self, start: dict, end: int, available: int | None, cap: int | None, now: int) -> None:
        """Write the backlog file. With a rate, rows keep arriving while the batch runs:
        ``start_us`` and ``rate`` let ``read_backlog`` count them when it is read."""
        first = start["rows"]
        total = self.total_rows()
        self._backlog.report(
            {
                "source": self.name,
                "kind": type(self.spec).__name__,
                "planned_rows": end,
                "available_rows": available,
                "backlog": None if available is None else max(available - end, 0),
                "batch_rows": end - first,
                "max_rows": cap,
                "total_rows": total,
                "start_us": start["start_us"],
                "rate": rate_to_json(self.rate),
                "exhausted": total is not None and end >= total,
                "time": now / 1e6,
            },
            planned_batch=end > first,
        )

    # --- reading --------------------------------------------------------------------------------

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        # The clock comes from the end offset: it is the one Spark logged for this batch.
        ranges = split_rows(start["rows"], end["rows"], self.parallelism, GENERATOR_BLOCK_ROWS)
        return [RowRange(a, b, end["start_us"], end.get("at_us", end["start_us"])) for a, b in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RowRange)  # what partitions() made
        row = partition.first
        for batch in self.user_batches(partition.first, partition.stop, partition.start_us):
            rows = np.arange(row, row + batch.num_rows, dtype=np.int64)
            row += batch.num_rows
            if self.rate is None:
                ingest = np.full(batch.num_rows, partition.at_us, dtype=np.int64)
            else:
                ingest = arrival_us(partition.start_us, self.rate, rows)
            columns = [*list(batch.columns), pa.array(ingest, type=TIMESTAMP)]
            yield pa.RecordBatch.from_arrays(columns, schema=self.arrow_schema)
