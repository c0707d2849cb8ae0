"""A job's checkpoint: the one directory that holds everything a run keeps, so that a restart
(on this machine or another) resumes exactly where the last run committed.

``Checkpoint`` owns every path under it and reads and writes through ``pyarrow.fs``, so the
checkpoint can be a plain path (relative or absolute), a ``file://`` URI, or any URI pyarrow
supports (``s3://bucket/x``, ``hdfs://namenode/x``). It is small and picklable (only the
location travels): Spark's tasks and Python workers open the same files from it.

Layout::

    plans/<version>.json                    the plan log (runtime.planlog)
    batches/<batch>.start.json              a batch's processing time and watermark, fixed
    batches/<batch>.done.json               a batch committed (runtime.batch.executor)
    metrics.jsonl                           one line of BatchMetrics per batch
    sources/<source>.<what>.json            control files of the running sources
    dead_letter/batch=<batch>/...           records an operator raised on (side_outputs)
    side/<operator>/<channel>/batch=<batch> side outputs, e.g. late records of a window
    state/<operator>/...                    the key-group store of a keyed operator (runtime.state)
    pipeline.json                           its stateful operators and what their state depends on
                                            (runtime.pipeline_record)
    spark/                                  Spark's own checkpoint: offset and commit logs
"""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

import pyarrow.fs as pafs

from sluice.core import files
from sluice.credentials import redact
from sluice.errors import CheckpointError, storage_problem

_BATCH_RECORD = re.compile(r"(\d+)\.(start|done)\.json")

PLANS = "plans"
BATCHES = "batches"
METRICS = "metrics.jsonl"
SOURCES = "sources"
STATE = "state"
SPARK = "spark"
# a file Spark's checkpoint writes as ``.<name>.<uuid>.tmp`` (with its checksum
# ``..<name>.<uuid>.tmp.crc``) and renames into place once whole
_SPARK_TEMPORARY = re.compile(r"\.\.?[\w-]+\.[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}\.tmp(\.crc)?")


class Checkpoint:
    """Every file of one job's checkpoint, by name, through ``pyarrow.fs``."""

    def __init__(self, location: str | Checkpoint):
        self.uri: str = location.uri if isinstance(location, Checkpoint) else files.normalize(location)
        self._fs: pafs.FileSystem | None = None
        self._base = ""

    @classmethod
    def of(cls, location: str | Checkpoint) -> Checkpoint:
        """``location`` as a Checkpoint (itself if it is one)."""
        return location if isinstance(location, Checkpoint) else cls(location)

    # only the location travels to Spark's tasks; each process opens the file system itself
    def __getstate__(self) -> dict[str, Any]:
        return {"uri": self.uri}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.uri = state["uri"]
        self._fs = None
        self._base = ""

    def __repr__(self) -> str:
        return redact(f"Checkpoint({self.uri!r})")

    def __str__(self) -> str:
        return self.uri

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Checkpoint) and other.uri == self.uri

    def __hash__(self) -> int:
        return hash(self.uri)

    # ---- where things are ------------------------------------------------------------------
    @property
    def fs(self) -> pafs.FileSystem:
        if self._fs is None:
            self._fs, self._base = files.filesystem(self.uri)
        return self._fs

    def path(self, *parts: str) -> str:
        """The path of ``parts`` inside ``self.fs``."""
        _ = self.fs
        return files.join(self._base, *parts)

    def location(self, *parts: str) -> str:
        """The location (URI or absolute path) of ``parts``, for whoever opens it elsewhere:
        Spark's checkpointLocation, the source readers in Spark's Python workers."""
        return files.join(self.uri, *parts)

    @property
    def sources(self) -> str:
        """Location of the control files through which sources and the runtime talk."""
        return self.location(SOURCES)

    @property
    def spark(self) -> str:
        """Location of Spark's own checkpoint (its offset and commit logs)."""
        return self.location(SPARK)

    @staticmethod
    def batch_record(batch_id: int, what: str) -> str:
        """Relative path of a batch's ``start`` or ``done`` record."""
        return f"{BATCHES}/{batch_id:09d}.{what}.json"

    @staticmethod
    def spark_offsets(batch_id: int) -> str:
        """Relative path of Spark's offset-log entry of a batch."""
        return f"{SPARK}/offsets/{batch_id}"

    # ---- reading and writing ---------------------------------------------------------------
    def read_bytes(self, rel: str) -> bytes | None:
        """The whole file ``rel``, or None if there is none."""
        return files.read_bytes(self.fs, self.path(rel))

    def read_json(self, rel: str) -> Any:
        """The JSON in ``rel`` (None if there is no file); CheckpointError naming the file
        when it is not JSON: Sluice writes whole files atomically, so one that is not was
        damaged after it was written."""
        data = self.read_bytes(rel)
        if not data:
            return None
        try:
            return json.loads(data)
        except (ValueError, UnicodeDecodeError) as e:
            raise CheckpointError(
                f"{self.location(rel)} is damaged (not JSON: {e}). Restore it from a backup, or run with a new checkpoint."
            ) from None

    def write_bytes(self, rel: str, data: bytes, durable: bool = False) -> None:
        """Replace ``rel`` atomically: readers see the old content or the new, never a part.
        ``durable``: synced to the disk before this returns (``files.write_atomic``); the
        commit records, a batch's done record and the plan log's entries, always are."""
        durable = durable or rel.startswith(f"{PLANS}/") or (rel.startswith(f"{BATCHES}/") and rel.endswith(".done.json"))
        with self._writing(rel):
            files.write_atomic(self.fs, self.path(rel), data, durable=durable)

    @contextlib.contextmanager
    def _writing(self, rel: str):
        """A write the disk refuses (full, read-only, over quota) as a CheckpointError that
        names the file and the way out, not a bare OSError."""
        try:
            yield
        except OSError as e:
            problem = storage_problem(e, str(e), self.location(rel))
            if problem is None:
                raise
            raise problem from e

    def write_json(self, rel: str, payload: Any, durable: bool = False) -> None:
        self.write_bytes(rel, json.dumps(payload).encode(), durable=durable)

    def append_line(self, rel: str, line: str) -> None:
        with self._writing(rel):
            files.append(self.fs, self.path(rel), line.encode() + b"\n")

    def files(self, rel: str) -> list[str]:
        """Names of the files directly in directory ``rel`` (sorted, hidden ones left out)."""
        return [p.rsplit("/", 1)[1] for p in files.list_files(self.fs, self.path(rel))]

    def dirs(self, rel: str) -> list[str]:
        """Names of the directories directly in directory ``rel`` (sorted)."""
        return [p.rsplit("/", 1)[1] for p in files.list_dirs(self.fs, self.path(rel))]

    # ---- what the records say --------------------------------------------------------------
    def started_batches(self) -> list[int]:
        """Ids of the batches recorded as started (a new plan must not rewrite their history);
        files of other names in ``batches/`` are not records and are left alone."""
        return sorted({int(m[1]) for name in self.files(BATCHES) if (m := _BATCH_RECORD.fullmatch(name))})

    def remove_spark_temporaries(self) -> list[str]:
        """Remove the temporary files of Spark's metadata and offset and commit log entries
        it did not finish (a write the disk refused leaves its temporary file; so does a
        crash mid-write); returns their paths. Only while no query runs on the checkpoint:
        a running one may be writing them."""
        removed = []
        for where in (self.path(SPARK), self.path(SPARK, "offsets"), self.path(SPARK, "commits")):
            for info in self.fs.get_file_info(pafs.FileSelector(where, allow_not_found=True)):
                if info.type == pafs.FileType.File and _SPARK_TEMPORARY.fullmatch(info.base_name):
                    with contextlib.suppress(OSError):
                        self.fs.delete_file(info.path)
                        removed.append(info.path)
        return removed

    def done_batches(self) -> list[int]:
        return sorted(int(m[1]) for name in self.files(BATCHES) if (m := _BATCH_RECORD.fullmatch(name)) and m[2] == "done")
