"""Delta Lake on delta-rs: a sink exactly once by application transactions, and a source
that streams the rows each new table version adds.

Sink: one Delta commit per batch, carrying ``txn(appId=<job>, version=<batch id>)`` (and the
job and batch in the commit's metadata). Before writing, the table's recorded version for the
job is read: a batch at or below it was committed before a crash (after its Delta commit,
before Spark's), and is skipped. delta-rs checks the txn again when it commits: a writer that
raced us on the same job fails instead of committing the batch twice. Append: the rows are
appended (``schema_mode="merge"`` when the batch adds columns). Upsert: the last row of each
key in the batch is MERGEd on the key (update all columns when matched, insert otherwise).

Source: a version's rows are those of the data files its commit adds (``add`` actions with
``dataChange`` true in ``_delta_log/<version>.json``); reading them, not the whole table,
makes a batch cost what it adds. A version whose commit also removes data files with
``dataChange`` true deleted or rewrote rows (DELETE, UPDATE, MERGE): appends alone cannot
describe it, so it stops the job unless ``skip_change_commits``. A compaction (OPTIMIZE) adds
and removes files with ``dataChange`` false and is skipped: its rows were read before.

An offset's position is ``[version, file]``, the next data file to read (files in the
order of the commit): batches can end inside a version, so the admission limit (rows per
batch) holds at the granularity of files, and a replay reads exactly the same files.
Each file's row count comes from its ``stats.numRecords`` (or its Parquet footer). The
backlog is the rows of the known versions not yet admitted. Ingest time = the commit's
timestamp.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from sluice.errors import SinkError, SourceError
from sluice.graph.lakehouse import DeltaSink, DeltaSource
from sluice.graph.sources import TIMESTAMP
from sluice.runtime import files
from sluice.runtime.connectors.fit import fit
from sluice.runtime.connectors.reader import INGEST_FIELD, ConnectorStreamReader, Plan, now_us
from sluice.runtime.sources.control import control_path, read_json, write_json_atomic

LOG = "_delta_log"
_COMMIT = re.compile(r"^(\d{20})\.json$")


def _last_per_key(table: pa.Table, key: tuple) -> pa.Table:
    from sluice.runtime.connectors.postgres import _last_per_key as last

    return last(table, key)


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# --- the sink ------------------------------------------------------------------------------------


class DeltaWriter:
    def __init__(self, spec: DeltaSink):
        self.spec = spec
        self.table: Any = None  # the DeltaTable, loaded once and then updated incrementally

    def _open(self):
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        if self.table is not None:
            self.table.update_incremental()
            return self.table
        try:
            self.table = DeltaTable(self.spec.uri, storage_options=dict(self.spec.storage_options) or None)
        except TableNotFoundError:
            return None
        return self.table

    def write(self, table: pa.Table, batch_id: int, job: str) -> list[tuple[int, str]]:
        """Write the batch once for (job, batch_id); returns the rows that could not be
        written (row, reason) for the dead letters (the same on a replay)."""
        from deltalake.exceptions import DeltaError

        try:
            return self._write(table, batch_id, job)
        except SinkError:
            raise
        except (DeltaError, OSError, pa.ArrowException) as e:
            raise SinkError(f"sink {self.spec.target}: {type(e).__name__}: {e}") from None

    def _write(self, table: pa.Table, batch_id: int, job: str) -> list[tuple[int, str]]:
        from deltalake import CommitProperties, Transaction, write_deltalake

        spec = self.spec
        dt = self._open()
        target = pa.schema(dt.schema().to_arrow()) if dt is not None else None
        fitted = fit(table, target, spec.key, f"sink {spec.target}")
        rows = fitted.table
        if rows.num_rows == 0:
            return fitted.rejects
        if dt is not None:
            done = dt.transaction_version(job)
            if done is not None and done >= batch_id:
                return fitted.rejects  # committed before a crash: the replay adds nothing
        commit = CommitProperties(
            app_transactions=[Transaction(job, batch_id)], custom_metadata={"sluice.job": job, "sluice.batch": str(batch_id)}
        )
        if spec.key:
            rows = _last_per_key(rows, spec.key)
        options = dict(spec.storage_options) or None
        if dt is None or spec.mode == "append":
            write_deltalake(
                dt if dt is not None else spec.uri,
                rows,
                mode="append",
                schema_mode="merge" if fitted.added else None,
                partition_by=(list(spec.partition_by) or None) if dt is None else None,
                storage_options=options if dt is None else None,
                commit_properties=commit,
            )
        else:
            predicate = " AND ".join(f"t.{_quoted(k)} = s.{_quoted(k)}" for k in spec.key)
            (
                dt.merge(
                    rows, predicate, source_alias="s", target_alias="t", merge_schema=bool(fitted.added), commit_properties=commit
                )
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .execute()
            )
        if dt is None:
            self._open()
        return fitted.rejects


# --- the source ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class DataFile:
    path: str  # as in the log: relative to the table (URL-encoded) or absolute
    rows: int
    partition_values: tuple  # (column, text or None) pairs
    committed_us: int


class DeltaSpan(InputPartition):
    """Data files of one batch, picklable."""

    def __init__(self, files_: list[DataFile], part: int):
        self.files, self.part = files_, part

    def __repr__(self) -> str:
        return f"DeltaSpan({len(self.files)} files, part {self.part})"


class DeltaStreamReader(ConnectorStreamReader):
    spec: DeltaSource
    _conn: Any = None  # not a connection: the per-process cache of parsed commits (not pickled)

    def _cache(self) -> dict:
        if self._conn is None:
            fs, root = files.filesystem(self.spec.uri)
            self._conn = {"fs": fs, "root": root, "commits": {}, "latest": -1}
        return self._conn

    # --- the log ---------------------------------------------------------------------------------

    def _log_path(self, version: int) -> str:
        return f"{self._cache()['root']}/{LOG}/{version:020d}.json"

    def _latest(self) -> int:
        """The table's newest version (-1: no table yet): listed once, then probed."""
        import pyarrow.fs as pafs

        cache = self._cache()
        fs = cache["fs"]
        if cache["latest"] < 0:
            infos = fs.get_file_info(pafs.FileSelector(f"{cache['root']}/{LOG}", allow_not_found=True))
            versions = [int(m.group(1)) for i in infos if (m := _COMMIT.match(i.base_name))]
            cache["latest"] = max(versions, default=-1)
        while fs.get_file_info(self._log_path(cache["latest"] + 1)).type == pafs.FileType.File:
            cache["latest"] += 1
        return cache["latest"]

    def _commit(self, version: int) -> list[DataFile]:
        """The data files version ``version`` adds (empty for a version that adds none, or a
        change commit skipped by ``skip_change_commits``)."""
        cache = self._cache()
        if version in cache["commits"]:
            return cache["commits"][version]
        data = files.read_bytes(cache["fs"], self._log_path(version))
        if data is None:
            raise SourceError(
                f"source {self.name!r}: {self.spec.broker}: the log of version {version} is gone "
                f"({LOG}/{version:020d}.json; log retention removed it?): start a new job with "
                f"starting_version= a version still in the log"
            )
        adds, changes, committed_ms, operation = [], False, None, "?"
        for line in data.splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            if "add" in action and action["add"].get("dataChange", True):
                adds.append(action["add"])
            elif "remove" in action and action["remove"].get("dataChange", True):
                changes = True
            elif "commitInfo" in action:
                committed_ms = action["commitInfo"].get("timestamp")
                operation = action["commitInfo"].get("operation", "?")
        if changes:
            if not self.spec.skip_change_commits:
                raise SourceError(
                    f"source {self.name!r}: version {version} of the {self.spec.broker} deletes or rewrites rows "
                    f"(operation {operation}): a Delta source streams appends only; pass "
                    f"skip_change_commits=True to skip such versions"
                )
            adds = []
        out = []
        for add in adds:
            if add.get("deletionVector"):
                raise SourceError(
                    f"source {self.name!r}: version {version} of the {self.spec.broker} adds "
                    f"{add['path']!r} with a deletion vector, which this source cannot apply"
                )
            at_ms = committed_ms if committed_ms is not None else add.get("modificationTime", 0)
            out.append(
                DataFile(
                    add["path"], self._rows(add), tuple(sorted((add.get("partitionValues") or {}).items())), int(at_ms) * 1000
                )
            )
        cache["commits"][version] = out
        return out

    def _rows(self, add: dict) -> int:
        stats = add.get("stats")
        if stats:
            rows = json.loads(stats).get("numRecords")
            if rows is not None:
                return int(rows)
        import pyarrow.parquet as pq

        cache = self._cache()
        with cache["fs"].open_input_file(self._file_path(add["path"])) as f:
            return pq.ParquetFile(f).metadata.num_rows

    def _file_path(self, path: str) -> str:
        if "://" in path:
            return files.filesystem(path)[1]
        return f"{self._cache()['root']}/{unquote(path)}"

    # --- offsets ----------------------------------------------------------------------------------

    def first_position(self) -> list[int]:
        if self.spec.starting_version != "latest":
            return [int(self.spec.starting_version), 0]
        # resolved once and kept beside the checkpoint's offsets: a restart before the first
        # batch committed must start where the first execution did
        where = control_path(self.control_dir, self.name, "delta")
        kept = read_json(where)
        if kept is None:
            kept = {"starting_version": self._latest() + 1}
            write_json_atomic(where, kept)
        return [int(kept["starting_version"]), 0]

    def _files_between(self, start: list[int], end: list[int]) -> list[DataFile]:
        out: list[DataFile] = []
        version, first = start
        while [version, first] < end:
            commit = self._commit(version)
            stop = end[1] if version == end[0] else len(commit)
            out += commit[first:stop]
            version, first = version + 1, 0
        return out

    def plan(self, start: dict, cap: int | None) -> Plan:
        latest = self._latest()
        version, first = start["position"]
        commits = self._cache()["commits"]
        for old in [v for v in commits if v < version]:  # read and committed: not needed again
            del commits[old]
        admitted, waiting, full, end = 0, 0, False, [version, first]
        while version <= latest:
            commit = self._commit(version)
            for i in range(first, len(commit)):
                rows = commit[i].rows
                # whole files only, and at least one per batch (a file above the cap too)
                if not full and (cap is None or admitted == 0 or admitted + rows <= cap):
                    admitted += rows
                    end = [version, i + 1]
                else:
                    full = True
                    waiting += rows
            if not full:
                end = [version + 1, 0]  # the whole version is read
            version, first = version + 1, 0
        return Plan(end, admitted, waiting)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        chosen = self._files_between(start["position"], end["position"])
        if not chosen:
            return []
        # contiguous runs of files, about equal in rows, one per task slot
        parts = min(self.parallelism, len(chosen))
        bounds = np.cumsum([f.rows for f in chosen])
        cut = np.searchsorted(bounds, np.arange(1, parts) * bounds[-1] / parts, side="left")
        edges = [0, *sorted({int(c) + 1 for c in cut if 0 <= c < len(chosen) - 1}), len(chosen)]
        return [DeltaSpan(chosen[a:b], i) for i, (a, b) in enumerate(itertools.pairwise(edges))]

    # --- reading ---------------------------------------------------------------------------------

    def read(self, span: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(span, DeltaSpan)  # what partitions() made
        schema = self.spec.schema()
        rejects: list[tuple[str, str, object]] = []
        for data_file in span.files:
            try:
                table = self._read_file(data_file, schema)
            except (SourceError, pa.ArrowException, OSError) as e:
                rejects.append((f"{self.spec.broker}, file {data_file.path}", f"cannot be read: {e}", data_file.path))
                continue
            ingest = pa.array(np.full(table.num_rows, data_file.committed_us, np.int64), TIMESTAMP)
            yield from table.append_column(INGEST_FIELD, ingest).cast(self.arrow_schema).to_batches()
        if rejects:
            from sluice.runtime.connectors.reader import Span

            self._dead_letter(Span(None, None, 0, now_us(), span.part), rejects)

    def _read_file(self, data_file: DataFile, schema: pa.Schema) -> pa.Table:
        import pyarrow.parquet as pq

        from sluice.runtime.sources.files import conform

        fs = self._cache()["fs"]
        path = self._file_path(data_file.path)
        present = [n for n in schema.names if n not in dict(data_file.partition_values)]
        with fs.open_input_file(path) as f:
            names = set(pq.read_schema(f).names)
            table = pq.read_table(f, columns=[n for n in present if n in names])
        for column, text in data_file.partition_values:
            if column in schema.names:
                table = table.append_column(column, pa.array([text] * table.num_rows, pa.string()))
        return conform(table, schema, path)


def table_schema(uri: str) -> pa.Schema:
    """The Arrow schema of a Delta table's columns, for ``sources.delta`` without ``schema=``."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    from sluice.graph.sources import spark_compatible

    try:
        dt = DeltaTable(uri)
    except TableNotFoundError:
        raise SourceError(f"no Delta table at {uri!r} (pass schema= to read one that does not exist yet)") from None
    mapping = dt.metadata().configuration.get("delta.columnMapping.mode", "none")
    if mapping not in (None, "none"):
        raise SourceError(
            f"Delta table at {uri!r} uses column mapping ({mapping!r}): the Delta source reads "
            "data files by their column names and cannot read it"
        )
    return spark_compatible(pa.schema(dt.schema().to_arrow()))
