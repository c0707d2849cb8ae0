"""A file sink's directories: one per batch as written, and small ones rolled together.

Every batch writes ``path/batch=<id>/`` through Spark's file commit protocol (complete with
``_SUCCESS``, or replaced whole by a replay). A batch that wrote no rows leaves no directory.
A sink given a target file size (``sinks.files(path, target_file_size="64MB")``) also rolls
its small batch directories together behind itself, between batches: once the directories
of consecutive committed batches hold the target size together, they are rewritten as one
Parquet file in ``path/batches=<first>-<last>/`` and then removed.

Exactly once throughout: only batches already recorded done are rolled (no replay can write
them again); the rolled directory is written under a hidden name and renamed into place
with its ``_SUCCESS`` (a reader sees it whole or not at all); and a reader skips every
``batch=<id>`` a complete ``batches=<first>-<last>`` covers, so a crash between the rename
and the removal of the originals neither loses nor doubles a row (the next roll removes
them).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from sluice.runtime import files

_SINGLE = re.compile(r"batch=(\d+)$")
_RANGE = re.compile(r"batches=(\d+)-(\d+)$")
SUCCESS = "_SUCCESS"


@dataclass(frozen=True)
class OutputDir:
    """One complete directory of a file sink: the batches it holds and its data files."""

    path: str
    first: int
    last: int
    parts: tuple[str, ...]  # data files with bytes in them
    size: int

    @property
    def rolled(self) -> bool:
        return self.last != self.first or _RANGE.search(self.path) is not None


def output_dirs(fs: pafs.FileSystem, base: str) -> list[OutputDir]:
    """The complete directories under ``base`` in batch order, a batch covered by a rolled
    directory given only by that one."""
    found: list[OutputDir] = []
    for directory in files.list_dirs(fs, base):
        name = directory.rsplit("/", 1)[-1]
        single, ranged = _SINGLE.match(name), _RANGE.match(name)
        if not (single or ranged):
            continue
        infos = fs.get_file_info(pafs.FileSelector(directory))
        if not any(i.base_name == SUCCESS for i in infos):
            continue  # being written, or left half-written by a crash: replaced by its replay
        # a batch with no rows written by an older version left an empty JSON part file
        parts = sorted((i.path, i.size) for i in infos if i.base_name.startswith("part-") and i.size)
        if single:
            first = last = int(single.group(1))
        else:
            assert ranged is not None
            first, last = int(ranged.group(1)), int(ranged.group(2))
        found.append(OutputDir(directory, first, last, tuple(p for p, _ in parts), sum(s for _, s in parts)))
    ranges = [(d.first, d.last) for d in found if d.rolled]
    return sorted((d for d in found if d.rolled or not any(a <= d.first <= b for a, b in ranges)), key=lambda d: d.first)


def remove_if_empty(path: str, batch_id: int, rows: int) -> None:
    """Remove a batch's directory when the batch wrote no rows (no empty folder per batch)."""
    if rows:
        return
    from sluice.runtime.sinks import batch_dir

    fs, target = files.filesystem(batch_dir(path, batch_id))
    if fs.get_file_info(target).type == pafs.FileType.Directory:
        fs.delete_dir(target)


def roll(path: str, up_to_batch: int, target_bytes: int) -> list[str]:
    """Roll the committed batch directories (ids <= ``up_to_batch``) of the sink at ``path``
    into files of about ``target_bytes``; returns the rolled directories written. Removes what
    an earlier roll left behind (covered originals, hidden half-written directories)."""
    fs, base = files.filesystem(files.normalize(path))
    if fs.get_file_info(base).type != pafs.FileType.Directory:
        return []
    for directory in files.list_dirs(fs, base):
        if directory.rsplit("/", 1)[-1].startswith(".rolling-"):
            fs.delete_dir(directory)  # a roll that died before its rename
    dirs = output_dirs(fs, base)
    ranges = [(d.first, d.last) for d in dirs if d.rolled]
    for directory in files.list_dirs(fs, base):  # originals a finished roll covers
        single = _SINGLE.match(directory.rsplit("/", 1)[-1])
        if single and any(a <= int(single.group(1)) <= b for a, b in ranges):
            fs.delete_dir(directory)
    written = []
    group: list[OutputDir] = []
    for d in dirs:
        if d.rolled or d.first > up_to_batch or d.size >= target_bytes:
            group = []
            continue
        group.append(d)
        if sum(g.size for g in group) >= target_bytes:
            written.append(_write_rolled(fs, base, group))
            group = []
    return written


def _write_rolled(fs: pafs.FileSystem, base: str, group: list[OutputDir]) -> str:
    tables = [pq.read_table(part, filesystem=fs) for d in group for part in d.parts]
    table = pa.concat_tables(tables, promote_options="permissive") if tables else None
    hidden = f"{base}/.rolling-{uuid.uuid4().hex[:12]}"
    final = f"{base}/batches={group[0].first:09d}-{group[-1].last:09d}"
    fs.create_dir(hidden)
    if table is not None:
        pq.write_table(table, f"{hidden}/part-00000.parquet", filesystem=fs)
    with fs.open_output_stream(f"{hidden}/{SUCCESS}"):
        pass
    fs.move(hidden, final)
    for d in group:
        fs.delete_dir(d.path)
    return final
