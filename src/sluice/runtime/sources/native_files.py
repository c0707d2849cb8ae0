"""A directory of Parquet files read by Spark's own vectorized reader.

Sluice's directory source reads each file in a Python worker and hands its rows to the JVM
as Arrow: every column of the file crosses a process boundary before the first operator
drops what it does not need. When the operators after the source run in Spark (SQL
filters and projections, keyed stages reading through Spark's exchange), the source is
opened by splits instead (``sources.splits``): Spark still plans its batches through the
directory reader (the file log, offsets, admission, backlog, the end-of-input batch, and
the same files again when a batch is replayed after a crash), but the batch's files are
read by ``spark.read.parquet``, which reads only the columns the batch's plan uses.

A file goes to Spark's reader only when its footer reads and each of its columns that the
source's schema names has exactly the schema's type; any other file (not Parquet, cut
short, another type that Sluice casts) is read by the directory reader as before, so its
rows are cast or it becomes a dead letter the same way.

``SLUICE_NATIVE_FILES=0`` in the driver's environment keeps every file on the directory
reader (to compare the two, or to rule this path out).
"""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sluice.graph.sources import INGEST_TS, DirectorySource, SourceSpec
from sluice.runtime.sources.control import read_json
from sluice.runtime.sources.splits import SPLIT, records_of_splits

NATIVE_FILES_ENV = "SLUICE_NATIVE_FILES"


def reads_natively(spec: SourceSpec) -> bool:
    """Whether Spark's file reader can read the source's files (Parquet directories, unless
    ``SLUICE_NATIVE_FILES=0``)."""
    off = os.environ.get(NATIVE_FILES_ENV, "1").strip().lower() in ("0", "false", "no", "off")
    return not off and isinstance(spec, DirectorySource) and spec.format == "parquet"


def spark_readable(path: str, schema: pa.Schema) -> bool:
    """Whether Spark's reader gives the same rows as Sluice's for this file: its footer reads,
    and every column it shares with ``schema`` has the schema's type (Spark would refuse or
    convert differently what Sluice's reader casts)."""
    import pyarrow.parquet as pq

    try:
        found = pq.read_schema(path)
    except (pa.ArrowException, OSError):
        return False
    for field in schema:
        i = found.get_field_index(field.name)
        if i >= 0 and not found.field(i).type.equals(field.type):
            return False
    return True


@dataclass
class BatchFiles:
    """The files of a batch, found on the driver without running a Spark job: the source's
    offsets for the batch and the one before it in Spark's offset log (written before the
    batch runs, the same for a replay), and the directory reader's file log."""

    reader: Any  # the driver's DirectoryStreamReader of the source
    offsets_of: Callable[[int], bytes | None]  # batch id -> its entry of Spark's offset log

    def slices(self, batch_id: int) -> list | None:
        """The batch's ``FileSlice``s, or None when the offset log does not say."""
        end = self._offset(batch_id)
        start = self.reader.initialOffset() if batch_id == 0 else self._offset(batch_id - 1)
        if end is None or start is None:
            return None
        self.reader.files = (read_json(self.reader._log_path) or {}).get("files", [])
        if len(self.reader.files) < end["files"]:
            return None
        return list(self.reader.partitions(start, end))

    def _offset(self, batch_id: int) -> dict | None:
        entry = self.offsets_of(batch_id)
        for line in (entry or b"").decode("utf-8", errors="replace").splitlines()[2:]:
            try:
                offset = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(offset, dict) and offset.get("source") == self.reader.name and "files" in offset:
                return offset
        return None


def records_of_files(splits, reader: Any, schema: pa.Schema, slices: list | None = None):
    """The records of a batch whose rows are a directory source's splits (one pickled
    ``FileSlice`` each), as a DataFrame of ``schema`` (the source's columns and INGEST_TS).

    ``slices``: the batch's files as ``BatchFiles`` found them; without them, reading the
    splits is one small job (a row per file). The files Spark can read are read by
    ``spark.read.parquet``; their ingest time is the oldest time the source found one of
    them (the files of a batch are found at one look, unless files keep arriving). The others
    go through the directory reader (``records_of_splits``)."""
    from pyspark.sql import functions as F

    from sluice.runtime.schemas import to_spark

    spark = splits.sparkSession
    if slices is None:
        rows = splits.collect()
        blobs = [row[SPLIT] for row in rows]
        slices = [pickle.loads(b) for b in blobs]
    else:
        blobs = [pickle.dumps(s) for s in slices]
    data_schema = pa.schema([f for f in schema if f.name != INGEST_TS])
    readable = [spark_readable(s.path, data_schema) for s in slices]
    native = [s for s, ok in zip(slices, readable, strict=True) if ok]
    others = [b for b, ok in zip(blobs, readable, strict=True) if not ok]
    frames = []
    if native:
        found_us = min(s.found_us for s in native)
        frame = spark.read.schema(to_spark(data_schema)).parquet(*[s.path for s in native])
        frames.append(frame.withColumn(INGEST_TS, F.timestamp_micros(F.lit(found_us))))
    if others:
        rest = spark.createDataFrame([(b,) for b in others], splits.schema)
        frames.append(records_of_splits(rest, reader, schema))
    if not frames:
        return spark.createDataFrame([], to_spark(schema))
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out
