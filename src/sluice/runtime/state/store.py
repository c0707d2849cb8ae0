"""The key-group store: versioned keyed state of one operator, per key group (docs/runtime.md, section 4).

Layout under ``<root>/state/<operator_id>/`` (``root`` is the checkpoint directory, a local
path or any ``pyarrow.fs`` URI: ``file:///...``, ``s3://...``, ``hdfs://...``)::

    deltas/<batch>/part-<partition>.arrow   state rows one task changed (Arrow IPC file)
    deltas/<batch>/part-<partition>.json    its DeltaFile descriptor (written after the data)
    commits/<batch>.json                    commit record: the batch's DeltaFiles
    snapshots/<batch>/part-<n>.arrow        compacted state of all key groups as of <batch>
    snapshots/<batch>.json                  snapshot record: its parts as DeltaFiles
    history.json                            {"floor": b}: gc removed everything up to batch b
    initial/part-<n>.arrow, initial.json    the operator's initial state (``write_initial``): the
                                            base of every index until the first snapshot

Batch ids are zero-padded to 12 digits so names sort in batch order.

Protocol (docs/runtime.md, sections 3 and 4):

* Task side. Each (batch, partition) task of a keyed stage calls ``write_delta`` once with the
  upserts and deletions of every key group it processed: ONE file per task, so the files of a
  batch are bounded by the partitions, not by the key groups. The name depends only on
  (batch, partition) and the write is atomic (temp file + rename on file systems; a single
  PUT on object stores), so a retried or replayed task replaces its file.
* Driver side. After the sinks are written the driver calls ``commit(batch, files)`` with the
  DeltaFiles its tasks returned; the commit record is written atomically and is the ONLY thing
  that makes the files visible. A crash before it leaves files no index will ever list
  (``gc`` deletes them). Re-committing a batch (a replay) replaces its record.
* ``index(before_batch)`` lists, per key group, the files to apply oldest -> newest: the
  latest snapshot below ``before_batch`` then every committed delta after it. It is small and
  picklable; the driver ships it to the tasks, which ``read`` their key groups through it.
* ``compact(b)`` writes a snapshot of all key groups as of batch b (a bounded number of files,
  about state size / ``snapshot_target_bytes``), so reads don't grow with history. ``gc``
  removes uncommitted files and history below the latest snapshot.

Integrity: every file's SHA-256 is in its DeltaFile and every commit/snapshot record carries
the SHA-256 of its own body; a mismatch, a truncated or missing committed file raises
``StateCorruptionError`` naming the file. Nothing is read unverified.

Cost: loading key groups reads every file their chain lists (each whole, once per ``read``
call, then kept in a per-process cache), so the time is proportional to the bytes of their
state (plus un-compacted deltas). That is the migration cost of moving a key group to another
partition, which ``key_group_sizes`` estimates for the balancers. A cache hit only saves the
read; correctness never depends on it (entries are keyed by path and checksum).

Assumptions: one driver commits (the store object caches what it learned from the records it
read; it re-lists the record directories on every ``index`` call and re-reads any record
whose size or modification time changed, so another process's commits are seen too). Don't
run ``gc`` while tasks still read through an index older than the latest snapshot.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from sluice.errors import ConfigError, StateCorruptionError, StateError
from sluice.runtime import files
from sluice.runtime.state.cache import FILE_CACHE
from sluice.runtime.state.format import (
    KEY_GROUP,
    build_state_table,
    checksum,
    conform,
    deserialize,
    merge_latest,
    row_ranges,
    serialize,
)
from sluice.runtime.state.index import DeltaFile, StateIndex

RECORD_FORMAT = 1
INITIAL_RECORD, INITIAL_DIR, INITIAL_BATCH = "initial.json", "initial", -1  # the state before any batch
DEFAULT_SNAPSHOT_TARGET_BYTES = 64 * 1024 * 1024


def _batch_name(batch_id: int) -> str:
    return f"{batch_id:012d}"


def _record_checksum(body: dict[str, Any]) -> str:
    return checksum(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


def _resolve_root(root: str) -> tuple[pafs.FileSystem, str]:
    """A file system and a path in it for ``root``: a URI, or a (possibly relative) local path."""
    try:
        return files.filesystem(root)
    except ConfigError as exc:
        raise StateError(f"cannot open checkpoint directory {root!r} for state: {exc}") from exc


class KeyGroupStore:
    """Keyed state of one operator, per key group, versioned by micro-batch id.

    Cheap to construct and to pickle (only ``root``, ``operator_id``, ``key_columns`` and the
    options travel; the file system is opened lazily and caches stay behind).
    """

    def __init__(
        self,
        root: str,
        operator_id: str,
        key_columns: list[str],
        *,
        snapshot_target_bytes: int = DEFAULT_SNAPSHOT_TARGET_BYTES,
    ):
        if not operator_id or "/" in operator_id:
            raise StateError(f"operator id {operator_id!r} cannot name a state directory")
        self.root = root
        self.operator_id = operator_id
        self.key_columns = list(key_columns)
        self.snapshot_target_bytes = snapshot_target_bytes
        self._reset_caches()

    def _reset_caches(self) -> None:
        self._fs: pafs.FileSystem | None = None
        self._base: str | None = None
        # batch -> ((mtime_ns, size), files, serial) of the commit / snapshot records read so
        # far; the serial (unique per parse) tells index() whether a record changed
        self._commit_records: dict[int, tuple[tuple[Any, int], list[DeltaFile], int]] = {}
        self._snapshot_records: dict[int, tuple[tuple[Any, int], list[DeltaFile], int]] = {}
        self._initial_record: tuple[tuple[Any, int], list[DeltaFile], int] | None = None
        self._serial = 0
        # the last index built, to extend it instead of rebuilding (see index())
        self._last_index: tuple[tuple[int | None, int | None], list[tuple[int, int]], StateIndex] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "operator_id": self.operator_id,
            "key_columns": self.key_columns,
            "snapshot_target_bytes": self.snapshot_target_bytes,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset_caches()

    def __repr__(self) -> str:
        return f"KeyGroupStore({self.root!r}, {self.operator_id!r}, {self.key_columns!r})"

    # ------------------------------------------------------------------ file-system helpers

    @property
    def fs(self) -> pafs.FileSystem:
        if self._fs is None:
            fs, root_path = _resolve_root(self.root)
            self._fs = fs
            self._base = posixpath.join(root_path, "state", self.operator_id)
        return self._fs

    @property
    def base(self) -> str:
        """The operator's store root inside ``fs`` (DeltaFile paths are relative to it)."""
        _ = self.fs
        assert self._base is not None
        return self._base

    def _abs(self, rel: str) -> str:
        return posixpath.join(self.base, rel)

    def _atomic_write(self, rel: str, data: bytes | pa.Buffer) -> None:
        """Write a whole file so readers see either the old or the new content, never a part.

        File systems (local, HDFS): temp file in the same directory, then rename over the
        target. Object stores have no rename but a single PUT is already atomic.
        """
        files.write_atomic(self.fs, self._abs(rel), data)

    def _list(self, rel_dir: str) -> list[pafs.FileInfo]:
        selector = pafs.FileSelector(self._abs(rel_dir), allow_not_found=True)
        return self.fs.get_file_info(selector)

    def _delete(self, rel: str, removed: list[str]) -> None:
        path = self._abs(rel)
        info = self.fs.get_file_info(path)
        if info.type == pafs.FileType.Directory:
            self.fs.delete_dir(path)
        elif info.type == pafs.FileType.File:
            self.fs.delete_file(path)
        else:
            return
        removed.append(rel)

    def _read_bytes(self, rel: str) -> bytes:
        try:
            with self.fs.open_input_stream(self._abs(rel)) as stream:
                return stream.read()
        except FileNotFoundError as exc:
            raise StateCorruptionError(f"state file {self._abs(rel)} is missing") from exc

    # ------------------------------------------------------------------ task side

    def delta_path(self, batch_id: int, partition: int) -> str:
        """Relative path of the delta file of (batch, partition): a function of both only."""
        return f"deltas/{_batch_name(batch_id)}/part-{partition:05d}.arrow"

    def write_delta(self, batch_id: int, partition: int, upserts: pa.Table | None, deletes: pa.Table | None) -> DeltaFile | None:
        """Write one task's state changes; return their descriptor for the driver's commit.

        ``upserts``: ``__kg`` (int32) + key columns + state columns; ``deletes``: ``__kg`` + key
        columns (other columns are ignored), or None. A key both deleted and upserted here
        ends up upserted. With no rows at all nothing is written and None is returned (any
        file a previous attempt of this task left is removed so no listing can pick it up).
        """
        if batch_id < 0 or partition < 0:
            raise StateError(f"batch id and partition must be >= 0, got ({batch_id}, {partition})")
        where = f"operator {self.operator_id!r} batch {batch_id} partition {partition}"
        table = build_state_table(upserts, deletes, self.key_columns, where)
        rel = self.delta_path(batch_id, partition)
        if table.num_rows == 0:
            removed: list[str] = []
            self._delete(rel[: -len(".arrow")] + ".json", removed)
            self._delete(rel, removed)
            return None
        return self._write_state_file(rel, batch_id, table, kind="delta", sidecar=True)

    def _write_state_file(self, rel: str, batch_id: int, table: pa.Table, kind: str, sidecar: bool) -> DeltaFile:
        data = serialize(table)
        ranges = row_ranges(table.column(KEY_GROUP))
        delta = DeltaFile(
            path=rel,
            batch_id=batch_id,
            key_groups=tuple(sorted(ranges)),
            row_ranges=ranges,
            rows=table.num_rows,
            bytes=data.size,
            checksum=checksum(data),
            kind=kind,
        )
        self._atomic_write(rel, data)
        if sidecar:
            self._atomic_write(rel[: -len(".arrow")] + ".json", json.dumps(delta.to_dict()).encode())
        # write-through: the task that owns these key groups next batch likely runs here
        FILE_CACHE.put(self._cache_key(delta), deserialize(data))
        return delta

    def _cache_key(self, f: DeltaFile) -> tuple:
        return (self.root, self.operator_id, f.path, f.checksum)

    def _load_file(self, f: DeltaFile) -> pa.Table:
        """The verified content of a committed file (from the cache or storage)."""
        key = self._cache_key(f)
        table = FILE_CACHE.get(key)
        if table is not None:
            return table
        full = self._abs(f.path)
        data = self._read_bytes(f.path)
        if len(data) != f.bytes:
            raise StateCorruptionError(
                f"state file {full} has {len(data)} bytes, its commit says {f.bytes} (truncated or overwritten)"
            )
        actual = checksum(data)
        if actual != f.checksum:
            raise StateCorruptionError(f"state file {full} failed its checksum: expected {f.checksum}, got {actual}")
        try:
            table = deserialize(data)
        except (pa.ArrowInvalid, OSError) as exc:  # checksum matched but unreadable: a bug
            raise StateCorruptionError(f"state file {full} cannot be decoded: {exc}") from exc
        if table.num_rows != f.rows:
            raise StateCorruptionError(f"state file {full} has {table.num_rows} rows, expected {f.rows}")
        FILE_CACHE.put(key, table)
        return table

    def read(self, index: StateIndex, key_groups: Iterable[int], schema: pa.Schema | None = None) -> pa.Table | None:
        """Latest committed state of ``key_groups`` as seen by ``index``.

        Result: ``__kg`` + key columns + state columns, one row per live key, ordered
        deterministically (by key group, then by the position of each key's latest row in
        the files, which are themselves sorted by key), so a replayed task sees the same
        table.
        Later files override earlier rows of the same key; deletions remove keys.

        ``schema`` (optional): the state schema (key columns first, as a kernel's
        ``state_schema``); the result then has exactly ``__kg`` + those columns and types,
        even when there is no state. Without it the schema is learned from the files; with
        no committed file at all in ``index`` the result is None.
        """
        if index.operator_id != self.operator_id:
            raise StateError(f"index of operator {index.operator_id!r} used with the store of {self.operator_id!r}")
        pieces: list[pa.Table] = []
        for kg in sorted(set(key_groups)):
            for f in index.files_by_kg.get(kg, ()):
                start, stop = f.row_ranges[kg]
                pieces.append(self._load_file(f).slice(start, stop - start))
        if not pieces:
            any_file = next((fs[-1] for fs in index.files_by_kg.values() if fs), None)
            if any_file is not None:
                pieces.append(self._load_file(any_file).slice(0, 0))
        if not pieces:
            if schema is None:
                return None
            return conform(pa.table({KEY_GROUP: pa.array([], pa.int32())}), schema)
        result = merge_latest(pieces, self.key_columns)
        return result if schema is None else conform(result, schema)

    # ------------------------------------------------------------------ driver side

    def committed_files(self, batch_id: int) -> list[DeltaFile]:
        """The delta files tasks wrote for ``batch_id`` (committed or not), from their
        descriptors in the batch's directory. A data file whose descriptor is missing (a task
        that died between the two writes) is not listed; its task was retried anyway."""
        files = []
        for info in self._list(f"deltas/{_batch_name(batch_id)}"):
            if info.type == pafs.FileType.File and info.base_name.endswith(".json"):
                rel = f"deltas/{_batch_name(batch_id)}/{info.base_name}"
                try:
                    files.append(DeltaFile.from_dict(json.loads(self._read_bytes(rel))))
                except (ValueError, KeyError, TypeError) as exc:
                    raise StateCorruptionError(f"delta descriptor {self._abs(rel)} is unreadable: {exc}") from exc
        return sorted(files, key=lambda f: f.path)

    written_files = committed_files

    def _commit_rel(self, batch_id: int) -> str:
        return f"commits/{_batch_name(batch_id)}.json"

    def _snapshot_rel(self, batch_id: int) -> str:
        return f"snapshots/{_batch_name(batch_id)}.json"

    def _write_record(self, rel: str, kind: str, batch_id: int, files: list[DeltaFile]) -> None:
        body = {
            "format": RECORD_FORMAT,
            "kind": kind,
            "operator_id": self.operator_id,
            "batch_id": batch_id,
            "files": [f.to_dict() for f in files],
        }
        record = dict(body, checksum=_record_checksum(body))
        self._atomic_write(rel, json.dumps(record, indent=1).encode())

    def _read_record(self, rel: str, batch_id: int) -> list[DeltaFile]:
        full = self._abs(rel)
        try:
            record = json.loads(self._read_bytes(rel))
            body = {k: v for k, v in record.items() if k != "checksum"}
            ok = record.get("checksum") == _record_checksum(body) and body["batch_id"] == batch_id
            files = [DeltaFile.from_dict(d) for d in body["files"]]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StateCorruptionError(f"state record {full} is unreadable: {exc}") from exc
        if not ok:
            raise StateCorruptionError(f"state record {full} failed its checksum")
        return files

    def _history_floor(self) -> int | None:
        info = self.fs.get_file_info(self._abs("history.json"))
        if info.type != pafs.FileType.File:
            return None
        try:
            return int(json.loads(self._read_bytes("history.json"))["floor"])
        except (ValueError, KeyError, TypeError) as exc:
            raise StateCorruptionError(f"{self._abs('history.json')} is unreadable: {exc}") from exc

    def commit(self, batch_id: int, files: list[DeltaFile | None]) -> None:
        """Make ``files`` the state changes of ``batch_id`` (atomically; replaces an earlier
        commit of the same batch). ``None`` entries (tasks with nothing to write) are skipped.

        Snapshots as of ``batch_id`` or later were built without this version of the batch,
        so they are dropped first (before the record is written, so a crash in between
        cannot leave a stale snapshot in front of the new record).
        """
        floor = self._history_floor()
        if floor is not None and batch_id <= floor:
            raise StateError(
                f"cannot commit batch {batch_id} of operator {self.operator_id!r}: "
                f"history up to batch {floor} was compacted and collected"
            )
        real = sorted((f for f in files if f is not None), key=lambda f: f.path)
        for f in real:
            if f.batch_id != batch_id or f.kind != "delta":
                raise StateError(
                    f"file {f.path} (batch {f.batch_id}, {f.kind}) cannot be committed as "
                    f"batch {batch_id} of operator {self.operator_id!r}"
                )
        removed: list[str] = []
        for snap in sorted(self._list_records("snapshots")):
            if snap >= batch_id:
                self._delete(self._snapshot_rel(snap), removed)
                self._delete(f"snapshots/{_batch_name(snap)}", removed)
                self._snapshot_records.pop(snap, None)
        self._write_record(self._commit_rel(batch_id), "commit", batch_id, real)
        self._commit_records.pop(batch_id, None)

    def is_committed(self, batch_id: int) -> bool:
        return self.fs.get_file_info(self._abs(self._commit_rel(batch_id))).type == pafs.FileType.File

    def committed_batches(self) -> list[int]:
        """Batch ids with a commit record (those gc has not collected), ascending."""
        return sorted(self._list_records("commits"))

    def latest_committed(self) -> int | None:
        """The newest committed batch id, or None if nothing is committed (or kept)."""
        return max(self._list_records("commits"), default=None)

    def _list_records(self, rel_dir: str) -> dict[int, pafs.FileInfo]:
        records = {}
        for info in self._list(rel_dir):
            name = info.base_name
            if info.type == pafs.FileType.File and name.endswith(".json") and name[:-5].isdigit():
                records[int(name[:-5])] = info
        return records

    def _records(
        self,
        rel_dir: str,
        cache: dict[int, tuple[tuple[Any, int], list[DeltaFile], int]],
        wanted: Iterable[int],
        infos: dict[int, pafs.FileInfo],
    ) -> dict[int, tuple[list[DeltaFile], int]]:
        """Parsed records (files, serial) of ``wanted`` batches, re-read only when changed."""
        out = {}
        for b in wanted:
            info = infos[b]
            stamp = (info.mtime_ns, info.size)
            hit = cache.get(b)
            if hit is None or hit[0] != stamp:
                self._serial += 1
                hit = (stamp, self._read_record(f"{rel_dir}/{info.base_name}", b), self._serial)
                cache[b] = hit
            out[b] = (hit[1], hit[2])
        return out

    def index(self, before_batch: int) -> StateIndex:
        """The state visible to batch ``before_batch``: the latest snapshot as of a batch
        below it, then every commit between that snapshot and ``before_batch`` (exclusive).

        Incremental: the record directories are listed (one listing each), records already
        parsed are reused, and if the last index built is a prefix of this one it is extended
        with the newer commits instead of rebuilt.
        """
        floor = self._history_floor()
        if floor is not None and before_batch <= floor:
            raise StateError(
                f"state of operator {self.operator_id!r} before batch {before_batch} is gone: "
                f"history up to batch {floor} was compacted and collected"
            )
        snap_infos = self._list_records("snapshots")
        snapshot = max((b for b in snap_infos if b < before_batch), default=None)
        initial = self._initial() if snapshot is None else None
        base = (snapshot, initial[1] if initial is not None else None)
        commit_infos = self._list_records("commits")
        batches = sorted(b for b in commit_infos if b < before_batch and (snapshot is None or b > snapshot))
        commits = self._records("commits", self._commit_records, batches, commit_infos)
        signature = [(b, commits[b][1]) for b in batches]

        last = self._last_index
        if last is not None and last[0] == base and signature[: len(last[1])] == last[1]:
            files_by_kg = {kg: list(fs) for kg, fs in last[2].files_by_kg.items()}
            new_batches = batches[len(last[1]) :]
        else:
            files_by_kg = {}
            if snapshot is not None:
                parts = self._records("snapshots", self._snapshot_records, [snapshot], snap_infos)[snapshot][0]
                for f in parts:
                    for kg in f.key_groups:
                        files_by_kg.setdefault(kg, []).append(f)
            elif initial is not None:  # no snapshot yet: the initial state is the base
                for f in initial[0]:
                    for kg in f.key_groups:
                        files_by_kg.setdefault(kg, []).append(f)
            new_batches = batches
        for b in new_batches:
            for f in commits[b][0]:
                for kg in f.key_groups:
                    files_by_kg.setdefault(kg, []).append(f)
        index = StateIndex(
            operator_id=self.operator_id,
            before_batch=before_batch,
            files_by_kg={kg: tuple(fs) for kg, fs in sorted(files_by_kg.items())},
            snapshot_batch=snapshot,
        )
        self._last_index = (base, signature, index)
        return index

    # ------------------------------------------------------------------ initial state

    def has_history(self) -> bool:
        """Whether anything was ever committed, compacted or seeded for this operator."""
        return bool(self._list_records("commits") or self._list_records("snapshots") or self._history_floor() is not None) or (
            self.fs.get_file_info(self._abs(INITIAL_RECORD)).type == pafs.FileType.File
        )

    def write_initial(self, table: pa.Table) -> DeltaFile | None:
        """Seed the operator's state before its first batch: ``table`` (``__kg``, the key
        columns, the state columns) becomes the base every index starts from until the first
        snapshot, which then holds it. Written once: the part first, the record last (a crash
        in between leaves a part that the next call overwrites), and never over a store with
        history. Returns the part, or None when nothing was written."""
        if self.has_history():
            return None
        table = build_state_table(table, None, self.key_columns, f"initial state of operator {self.operator_id!r}")
        parts = []
        if table.num_rows:
            parts.append(self._write_state_file(f"{INITIAL_DIR}/part-00000.arrow", INITIAL_BATCH, table, "snapshot", False))
        self._write_record(INITIAL_RECORD, "initial", INITIAL_BATCH, parts)
        self._initial_record = None
        return parts[0] if parts else None

    def _initial(self) -> tuple[list[DeltaFile], int] | None:
        """The initial state's parts and the serial of their record, or None."""
        info = self.fs.get_file_info(self._abs(INITIAL_RECORD))
        if info.type != pafs.FileType.File:
            return None
        stamp = (info.mtime_ns, info.size)
        if self._initial_record is None or self._initial_record[0] != stamp:
            self._serial += 1
            self._initial_record = (stamp, self._read_record(INITIAL_RECORD, INITIAL_BATCH), self._serial)
        return self._initial_record[1], self._initial_record[2]

    def key_group_sizes(self, index: StateIndex) -> dict[int, int]:
        """Estimated bytes a load of each key group reads (its share of every file in its
        chain): the migration cost of moving it. An upper bound of its live state until the
        next compaction, since overridden rows and tombstones still count."""
        return {kg: sum(f.kg_bytes(kg) for f in fs) for kg, fs in index.files_by_kg.items()}

    def key_group_rows(self, index: StateIndex) -> dict[int, int]:
        """Rows a load of each key group reads (same caveat as ``key_group_sizes``)."""
        return {kg: sum(f.kg_rows(kg) for f in fs) for kg, fs in index.files_by_kg.items()}

    # ------------------------------------------------------------------ compaction and gc

    @staticmethod
    def compaction_due(index: StateIndex, max_delta_batches: int = 10, max_delta_ratio: float = 1.0) -> bool:
        """A policy for the driver: compact when a read would apply more than
        ``max_delta_batches`` delta batches, or when the delta rows outnumber
        ``max_delta_ratio`` times the snapshot rows (reads then cost more than twice the
        live state)."""
        files = index.files()
        delta_batches = {f.batch_id for f in files if f.kind == "delta"}
        delta_rows = sum(f.rows for f in files if f.kind == "delta")
        snapshot_rows = sum(f.rows for f in files if f.kind == "snapshot")
        return len(delta_batches) > max_delta_batches or delta_rows > max_delta_ratio * max(snapshot_rows, 1)

    def compact(self, up_to_batch: int) -> list[DeltaFile] | None:
        """Write a snapshot of every key group as of ``up_to_batch`` (all commits <= it).

        Key groups are packed, in order, into parts of about ``snapshot_target_bytes`` (a
        key group is never split), so a snapshot has a bounded number of files and a reader
        of one key group reads at most about that many extra bytes. The parts are written
        first and the snapshot record last (atomically): a crash in between leaves an
        invisible snapshot that ``gc`` removes. Returns the parts, or None when there is
        nothing new to compact.
        """
        index = self.index(up_to_batch + 1)
        if not any(f.kind == "delta" for f in index.files()):
            return None
        sizes = self.key_group_sizes(index)
        chunks: list[list[int]] = []
        chunk_bytes = 0
        for kg in index.key_groups_with_state():
            if not chunks or (chunk_bytes + sizes[kg] > self.snapshot_target_bytes and chunks[-1]):
                chunks.append([])
                chunk_bytes = 0
            chunks[-1].append(kg)
            chunk_bytes += sizes[kg]
        parts: list[DeltaFile] = []
        for chunk in chunks:
            table = self.read(index, chunk)
            if table is None or table.num_rows == 0:
                continue
            table = build_state_table(table, None, self.key_columns, f"snapshot {up_to_batch}")
            rel = f"snapshots/{_batch_name(up_to_batch)}/part-{len(parts):05d}.arrow"
            parts.append(self._write_state_file(rel, up_to_batch, table, kind="snapshot", sidecar=False))
        self._write_record(self._snapshot_rel(up_to_batch), "snapshot", up_to_batch, parts)
        self._snapshot_records.pop(up_to_batch, None)
        return parts

    def gc(self, before_batch: int | None = None) -> list[str]:
        """Delete what no index at or after ``before_batch`` can need; return the removed paths.

        * uncommitted deltas of batches below ``before_batch`` (files of a crashed attempt,
          files a commit did not list, temp files), and unfinished snapshots;
        * history made redundant by the latest snapshot below ``before_batch``: older
          snapshots, commit records and deltas up to it. ``history.json`` records that
          floor first, so indexes and commits below it fail loudly instead of reading a
          partial history.

        Default ``before_batch``: one past the latest committed batch (the batch in flight
        is always newer than that). Don't call it while tasks read through older indexes.
        """
        removed: list[str] = []
        commit_infos = self._list_records("commits")
        if before_batch is None:
            before_batch = max(commit_infos, default=-1) + 1
        snap_infos = self._list_records("snapshots")

        # 1. uncommitted and stray delta files
        for info in self._list("deltas"):
            if info.type != pafs.FileType.Directory or not info.base_name.isdigit():
                continue
            b = int(info.base_name)
            if b >= before_batch:
                continue
            rel_dir = f"deltas/{info.base_name}"
            if b not in commit_infos:
                self._delete(rel_dir, removed)
                continue
            listed = {f.path for f in self._records("commits", self._commit_records, [b], commit_infos)[b][0]}
            for entry in self._list(rel_dir):
                rel = f"{rel_dir}/{entry.base_name}"
                data_rel = rel[: -len(".json")] + ".arrow" if rel.endswith(".json") else rel
                if data_rel not in listed:
                    self._delete(rel, removed)

        # 2. unfinished snapshots (parts without a record) and temp files of torn record writes
        for rel_dir in ("commits", "snapshots", ""):
            for info in self._list(rel_dir):
                if info.type == pafs.FileType.File and ".tmp-" in info.base_name:
                    self._delete(posixpath.join(rel_dir, info.base_name), removed)
        for info in self._list("snapshots"):
            if info.type == pafs.FileType.Directory and info.base_name.isdigit():
                b = int(info.base_name)
                if b < before_batch and b not in snap_infos:
                    self._delete(f"snapshots/{info.base_name}", removed)

        # 3. history below the latest snapshot (the initial state too: the snapshot holds it)
        keep = max((b for b in snap_infos if b < before_batch), default=None)
        has_initial = self.fs.get_file_info(self._abs(INITIAL_RECORD)).type == pafs.FileType.File
        if keep is not None or not has_initial:
            self._delete(INITIAL_RECORD, removed)
            self._delete(INITIAL_DIR, removed)
            self._initial_record = None
        if keep is not None:
            floor = self._history_floor()
            if floor is None or keep > floor:
                self._atomic_write("history.json", json.dumps({"floor": keep}).encode())
            for b in sorted(commit_infos):
                if b <= keep:
                    self._delete(self._commit_rel(b), removed)
                    self._delete(f"deltas/{_batch_name(b)}", removed)
                    self._commit_records.pop(b, None)
            for b in sorted(snap_infos):
                if b < keep:
                    self._delete(self._snapshot_rel(b), removed)
                    self._delete(f"snapshots/{_batch_name(b)}", removed)
                    self._snapshot_records.pop(b, None)
        self._last_index = None
        return removed
