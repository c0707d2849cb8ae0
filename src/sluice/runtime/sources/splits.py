"""A source read inside the Python chain after it: Spark plans the batches, the chain reads them.

A Python data source's rows travel from the Python worker that reads them into the JVM,
become Spark rows, and go back out to the Python worker of the ``mapInArrow`` that runs the
chain: two Arrow conversions and two process hops for every record, before the first user
function sees it. Flink chains a source with the operators after it for the same reason.

Opened *by splits*, a source keeps everything Spark does for it (offsets, the offset log,
admission, backlog reports, replays after a crash), but its Spark rows are its input
partitions, one row each: ``__split``, the pickled partition (a few dozen bytes). The chain
reads the records of each split itself, with the reader's own ``read``
(:func:`read_splits`), so they reach the user's function straight from the source.

A source can be read so when its reader's ``read`` needs nothing but the partition and the
reader's settings (``reads_anywhere``): today the row-numbered sources (generator, replay).
Whatever else needs the records (a Spark operator after the source, a chain the plan
spreads over more tasks) gets them from :func:`records_of_splits`.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow

SPLIT = "__split"
SPLIT_SCHEMA = pa.schema([pa.field(SPLIT, pa.binary())])


def reads_anywhere(reader_class: type | None) -> bool:
    """Whether a reader's records can be read by the chain after it (see the module's doc)."""
    return bool(getattr(reader_class, "reads_anywhere", False))


class SplitStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans as ``reader`` plans; reads each partition as one row, the pickled partition."""

    def __init__(self, reader: DataSourceStreamReader):
        self.reader = reader

    def initialOffset(self) -> dict:
        return self.reader.initialOffset()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        return self.reader.latestOffset(start, limit)

    def getDefaultReadLimit(self) -> ReadLimit:
        return self.reader.getDefaultReadLimit()

    def reportLatestOffset(self) -> dict | None:
        return self.reader.reportLatestOffset()

    def prepareForTriggerAvailableNow(self) -> None:
        self.reader.prepareForTriggerAvailableNow()  # type: ignore[attr-defined]

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return list(self.reader.partitions(start, end))

    def commit(self, end: dict) -> None:
        self.reader.commit(end)

    def stop(self) -> None:
        self.reader.stop()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield pa.RecordBatch.from_arrays([pa.array([pickle.dumps(partition)], pa.binary())], schema=SPLIT_SCHEMA)


def read_splits(reader: Any, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The records of the splits in ``batches`` (rows of ``SPLIT_SCHEMA``), read by ``reader``
    (the source's own stream reader) in the order Spark delivered the splits."""
    for batch in batches:
        for split in batch.column(SPLIT).to_pylist():
            yield from reader.read(pickle.loads(split))


def records_of_splits(frame, reader: Any, schema: pa.Schema):
    """The DataFrame of the records of ``frame``'s splits (``schema``: the source's stream
    schema), for consumers that need them as Spark rows."""
    from sluice.runtime.schemas import to_spark

    return frame.mapInArrow(lambda batches: read_splits(reader, batches), to_spark(schema))
