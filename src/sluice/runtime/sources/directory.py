"""The stream reader of a DirectorySource: new files in a directory, each read once, whole.

Offsets count admitted files (and, for backlog, their rows): ``{"source": name, "files": k,
"rows": r}`` means the first k files of the source's file log, r rows in all. The file log
(``<control_dir>/<name>.files.json``) records every file in the order it was found: files
found at one look are sorted by name (or mtime, then name) and appended. It is written
before the offset that admits them is returned, so a batch replayed after a crash reads the
same files. ``__ingest_ts`` of a file's rows is when the source found the file.

A finite source (``available_now``) looks once, at its first planning (or takes the file log
a restarted query left), and once every file is admitted plans the end-of-input punctuation
(``row_reader.end_of_input``): the same offset with ``"end": True``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from sluice.errors import SourceError
from sluice.graph.sources import TIMESTAMP, data_files
from sluice.runtime.sources.admission import admission_cap, default_read_limit
from sluice.runtime.sources.control import (
    BacklogReporter,
    control_path,
    read_json,
    write_json_atomic,
)
from sluice.runtime.sources.files import Reject, count_rows, read_records
from sluice.runtime.sources.row_reader import end_of_input, now_us

FILE_CHUNK_ROWS = 65536
BATCH_ID_PROPERTY = "streaming.sql.batchId"
"""The local property through which Spark's micro-batch execution tells tasks their batch."""


class FileSlice(InputPartition):
    """One whole file of a batch, its place in the file log, and the time the source found
    it (picklable)."""

    def __init__(self, path: str, found_us: int, index: int = 0):
        self.path, self.found_us, self.index = path, found_us, index

    def __repr__(self) -> str:
        return f"FileSlice({self.path!r})"


class DirectoryStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    dead_letters: str | None = None  # set by SluiceDataSource: where records it cannot read go

    def __init__(self, spec, name: str, control_dir: str, schema: StructType, parallelism: int):
        self.spec = spec
        self.name = name
        self.control_dir = control_dir
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        self._log_path = control_path(control_dir, name, "files")
        self.files: list[dict] = (read_json(self._log_path) or {}).get("files", [])
        self._available_now = False
        self._target: int | None = None
        self._last_start: dict | None = None
        self._backlog = BacklogReporter(control_dir, name)

    def _discover(self) -> None:
        """Append files not seen before to the file log, in the spec's order."""
        known = {f["path"] for f in self.files}
        new = [p for p in data_files(self.spec.path) if p not in known]
        if not new:
            return
        if self.spec.order == "mtime":
            new.sort(key=lambda p: (os.stat(p).st_mtime_ns, os.path.basename(p)))
        found_us = time.time_ns() // 1000
        for path in new:
            self.files.append({"path": path, "rows": count_rows(path, self.spec.format), "found_us": found_us})
        write_json_atomic(self._log_path, {"source": self.name, "files": self.files})

    def _rows_through(self, k: int) -> int:
        return sum(f["rows"] for f in self.files[:k])

    def initialOffset(self) -> dict:
        return {"source": self.name, "files": 0, "rows": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return default_read_limit()

    def prepareForTriggerAvailableNow(self) -> None:
        self._discover()
        self._available_now = True
        self._target = len(self.files)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        self._last_start = start
        if self.spec.available_now:
            if self._target is None:  # one look, the first time (a restart keeps its file log)
                if not self.files:
                    self._discover()
                self._target = len(self.files)
        elif not self._available_now:
            self._discover()
        available = len(self.files) if self._target is None else self._target
        if self.spec.available_now and start["files"] >= available:
            self._report_end(start)
            return start if start.get("end") else end_of_input(start, now_us())
        cap = admission_cap(limit, self.control_dir, self.name, self.spec.max_rows_per_batch)
        first = start["files"]
        end, rows = first, start["rows"]
        # Whole files only; at least one file per batch so a file bigger than the cap
        # still gets in.
        while end < available:
            size = self.files[end]["rows"]
            if cap is not None and end > first and rows + size - start["rows"] > cap:
                break
            end, rows = end + 1, rows + size
        all_rows = rows + self._rows_through(available) - self._rows_through(end)
        self._backlog.report(
            {
                "source": self.name,
                "kind": "DirectorySource",
                "planned_rows": rows,
                "available_rows": all_rows,
                "backlog": all_rows - rows,
                "batch_rows": rows - start["rows"],
                "planned_files": end,
                "available_files": available,
                "max_rows": cap,
                "total_rows": None,
                "exhausted": self.spec.available_now and end >= available,
                "time": time.time(),
            },
            planned_batch=end > first,
        )
        if end == first:
            return start
        return {"source": self.name, "files": end, "rows": rows}

    def _report_end(self, start: dict) -> None:
        """The backlog of a finite source whose files are all admitted: none, exhausted."""
        self._backlog.report(
            {
                "source": self.name,
                "kind": "DirectorySource",
                "planned_rows": start["rows"],
                "available_rows": start["rows"],
                "backlog": 0,
                "batch_rows": 0,
                "planned_files": start["files"],
                "available_files": start["files"],
                "max_rows": None,
                "total_rows": start["rows"],
                "exhausted": True,
                "time": time.time(),
            },
            planned_batch=False,
        )

    def reportLatestOffset(self) -> dict | None:
        if self._last_start is None:
            return None
        n = len(self.files)
        return {"source": self.name, "files": n, "rows": self._rows_through(n)}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        if end.get("end"):  # the end-of-input punctuation reads nothing
            return []
        first = start["files"]
        return [FileSlice(f["path"], f["found_us"], first + i) for i, f in enumerate(self.files[first : end["files"]])]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, FileSlice)  # what partitions() made
        table, rejects = read_records(partition.path, self.spec.format, self.spec.schema())
        if rejects:
            self._dead_letter(partition, rejects)
        for batch in table.to_batches(FILE_CHUNK_ROWS):
            ingest = pa.array(np.full(batch.num_rows, partition.found_us, dtype=np.int64), type=TIMESTAMP)
            yield pa.RecordBatch.from_arrays([*list(batch.columns), ingest], schema=self.arrow_schema)

    def _dead_letter(self, partition: FileSlice, rejects: list[Reject]) -> None:
        """Send the records of a file that cannot be read to the dead-letter channel of the
        batch reading it, in one file named by the file's place in the file log: a batch
        that reads the file again (a retried task, a replay) replaces it, never adds to it.

        The batch id is the one Spark's micro-batch execution gives its jobs (a local
        property that reaches every task); the driver forwards the batch's dead letters to
        the dead-letter sink once the batch's jobs are done."""
        from pyspark import TaskContext

        from sluice.runtime.side_outputs import DEAD_LETTER, SideOutputWriter

        context = TaskContext.get()
        batch_id = context.getLocalProperty(BATCH_ID_PROPERTY) if context is not None else None
        if not self.dead_letters or batch_id is None:
            raise SourceError(
                f"source {self.name!r}: cannot read {rejects[0].location}: {rejects[0].error}"
                f" (and no dead-letter channel outside a Sluice job)"
            )
        writer = SideOutputWriter(self.dead_letters, DEAD_LETTER, int(batch_id), f"source-{self.name}", partition.index)
        for reject in rejects:
            writer.dead(self.name, reject.text, reject.error, reject.location)
        writer.flush()
