"""Reading one data file (JSON lines, CSV, Parquet) into Arrow with a fixed schema."""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from sluice.errors import SourceError


@dataclass(frozen=True)
class Reject:
    """A record that could not be read, or a whole file: where (``path:line``, ``path:row
    n`` or ``path``), why, and its text (cut at ``REJECT_TEXT_BYTES``)."""

    location: str
    error: str
    text: str | None = None


REJECT_TEXT_BYTES = 64 * 1024
"""A rejected record keeps this much of its text in its dead letter; its location points
at the rest."""

_BLOCK_BYTES = 1 << 20


def read_data_file(path: str, fmt: str, schema: pa.Schema) -> pa.Table:
    """The file's rows as a table with exactly ``schema``'s columns, in its order and types;
    raises SourceError naming the first record (file and line) that cannot be read.

    Columns the file lacks come out null; extra columns in the file are ignored.
    """
    table, rejects = read_records(path, fmt, schema)
    if rejects:
        more = f" (and {len(rejects) - 1} more)" if len(rejects) > 1 else ""
        raise SourceError(f"cannot read {rejects[0].location} as {fmt}: {rejects[0].error}{more}")
    return table


def read_records(path: str, fmt: str, schema: pa.Schema) -> tuple[pa.Table, list[Reject]]:
    """The rows of the file that can be read (as ``read_data_file``), and the rest as rejects.

    One bad record never costs the others: JSON lines and CSV rows that do not parse, or hold
    a value that cannot be read as its column's type, are rejected one by one (the file is
    read whole first; only when that fails are its parts read again, halving the range
    that fails, so a few bad records cost a few extra reads, not one per record). A
    Parquet file that cannot be opened is rejected whole. An empty file has no rows.
    """
    if fmt not in ("json", "csv", "parquet"):
        raise SourceError(f"unknown file format {fmt!r} for {path!r}")
    try:
        if os.path.getsize(path) == 0:
            return schema.empty_table(), []
        if fmt == "json":
            return _read_json_lines(path, schema)
        if fmt == "csv":
            return _read_csv(path, schema)
        return _read_parquet(path, schema)
    except OSError as e:
        return schema.empty_table(), [Reject(path, f"cannot read the file: {e}")]


def _read_json_lines(path: str, schema: pa.Schema) -> tuple[pa.Table, list[Reject]]:
    import pyarrow.json as pajson

    with open(path, "rb") as f:
        data = f.read()
    newlines = np.flatnonzero(np.frombuffer(data, np.uint8) == ord("\n"))
    starts = np.concatenate([[0], newlines + 1])
    ends = np.concatenate([newlines + 1, [len(data)]])  # each line with its newline
    # A block must hold the longest line whole (pyarrow cannot parse a line across blocks)
    block = int(max(_BLOCK_BYTES, (ends - starts).max() + 1))
    options = pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    buffer = pa.py_buffer(data)

    def parse(first: int, stop: int) -> pa.Table:
        chunk = buffer.slice(int(starts[first]), int(ends[stop - 1] - starts[first]))
        table = pajson.read_json(pa.BufferReader(chunk), parse_options=options, read_options=pajson.ReadOptions(block_size=block))
        return conform(table, schema, path)

    def reject(line: int, error: Exception) -> Reject | None:
        text = bytes(buffer.slice(int(starts[line]), int(ends[line] - starts[line])))
        if not text.strip():
            return None  # a blank line is no record
        # pyarrow counts rows from the start of the part it read: the line says where
        return Reject(f"{path}:{line + 1}", re.sub(r" in row \d+$", "", _reason(error)), _text(text))

    return _bisect(len(starts), parse, reject, schema)


def _read_csv(path: str, schema: pa.Schema) -> tuple[pa.Table, list[Reject]]:
    import pyarrow.csv as pacsv

    # Timestamps are read as text and parsed in ``conform``, which accepts them with or
    # without a zone offset (pyarrow's CSV reader insists on one).
    typed = pacsv.ConvertOptions(
        column_types={f.name: pa.string() if pa.types.is_timestamp(f.type) else f.type for f in schema},
        include_columns=schema.names,
        include_missing_columns=True,
    )
    try:
        return conform(pacsv.read_csv(path, convert_options=typed), schema, path), []
    except (pa.ArrowInvalid, SourceError):
        pass
    # Some row does not fit: read every cell as text (rows with a wrong number of cells are
    # rejected by the reader), then convert row ranges, halving those that fail.
    rejects: list[Reject] = []

    def bad_row(row) -> str:
        rejects.append(
            Reject(
                f"{path}:{row.number}" if row.number else path,
                f"expected {row.expected_columns} cells, found {row.actual_columns}",
                _text(row.text.encode()),
            )
        )
        return "skip"

    text = pacsv.ConvertOptions(
        column_types={f.name: pa.string() for f in schema}, include_columns=schema.names, include_missing_columns=True
    )
    try:
        cells = pacsv.read_csv(
            path,
            convert_options=text,
            parse_options=pacsv.ParseOptions(invalid_row_handler=bad_row),
            read_options=pacsv.ReadOptions(use_threads=False),
        )
    except pa.ArrowInvalid as e:
        return schema.empty_table(), [Reject(path, f"cannot be read as CSV: {_reason(e)}")]

    def convert(first: int, stop: int) -> pa.Table:
        return conform(cells.slice(first, stop - first), schema, path)

    skipped = sorted(_line(r.location) for r in rejects)

    def reject(row: int, error: Exception) -> Reject:
        # the row's line, counting the header and the rows skipped before it (exact for a
        # file without line breaks inside quoted cells)
        line = row + 2
        for number in skipped:
            line += number <= line
        record = cells.slice(row, 1).to_pylist()[0]
        return Reject(f"{path}:{line}", _reason(error), _text(json.dumps(record).encode()))

    table, converted = _bisect(cells.num_rows, convert, reject, schema)
    return table, sorted(rejects + converted, key=lambda r: _line(r.location))


def _read_parquet(path: str, schema: pa.Schema) -> tuple[pa.Table, list[Reject]]:
    import pyarrow.parquet as pq

    try:
        present = set(pq.read_schema(path).names)
        table = pq.read_table(path, columns=[n for n in schema.names if n in present])
    except (pa.ArrowException, OSError) as e:  # truncated or not Parquet at all: the file is lost
        return schema.empty_table(), [Reject(path, f"cannot be read as Parquet: {_reason(e)}")]
    try:
        return conform(table, schema, path), []
    except SourceError:
        pass

    def reject(row: int, error: Exception) -> Reject:
        return Reject(
            f"{path}:row {row + 1}", _reason(error), _text(json.dumps(table.slice(row, 1).to_pylist()[0], default=str).encode())
        )

    return _bisect(table.num_rows, lambda a, b: conform(table.slice(a, b - a), schema, path), reject, schema)


def _bisect(
    n: int, read: Callable[[int, int], pa.Table], reject: Callable[[int, Exception], Reject | None], schema: pa.Schema
) -> tuple[pa.Table, list[Reject]]:
    """``read(0, n)``, or when it fails, the parts of [0, n) that ``read`` accepts and a
    reject for each single item it does not."""
    good: list[pa.Table] = []
    rejects: list[Reject] = []
    pending = [(0, n)]
    while pending:
        first, stop = pending.pop()
        if first >= stop:
            continue
        try:
            good.append((first, read(first, stop)))
        except (pa.ArrowException, SourceError) as e:
            if stop - first == 1:
                found = reject(first, e)
                if found is not None:
                    rejects.append(found)
                continue
            middle = (first + stop) // 2
            pending += [(middle, stop), (first, middle)]  # first half popped first: in order
    tables = [t for _, t in sorted(good, key=lambda item: item[0])]
    return (pa.concat_tables(tables) if tables else schema.empty_table()), rejects


def _reason(error: Exception) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def _text(raw: bytes) -> str:
    cut = raw[:REJECT_TEXT_BYTES].decode("utf-8", errors="replace").rstrip("\r\n")
    return cut + (f"... ({len(raw):,} bytes)" if len(raw) > REJECT_TEXT_BYTES else "")


def _line(location: str) -> int:
    tail = location.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def conform(table: pa.Table, schema: pa.Schema, where: str) -> pa.Table:
    """Select and cast ``table``'s columns to ``schema`` (missing columns become nulls);
    raises SourceError when a column's values cannot be read as its type."""
    columns = []
    for f in schema:
        if f.name in table.column_names:
            column = table.column(f.name)
            if column.type != f.type:
                try:
                    column = _cast(column, f.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                    raise SourceError(f"{where}: column {f.name!r} is {column.type}, cannot be read as {f.type}: {e}") from None
        else:
            column = pa.nulls(table.num_rows, f.type)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema)


def _cast(column: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    """Cast, reading zone-less timestamp text as UTC."""
    if pa.types.is_string(column.type) and pa.types.is_timestamp(target) and target.tz:
        try:
            return column.cast(target)
        except pa.ArrowInvalid:  # no zone offset in the text: take it as UTC
            return column.cast(pa.timestamp(target.unit)).cast(target)
    return column.cast(target)


def count_rows(path: str, fmt: str) -> int:
    """Rows in a data file, cheaply: Parquet metadata, else non-blank lines (minus a CSV
    header). Used for admission and backlog only; a CSV with quoted newlines is over-counted
    (the data read is still exact)."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        try:
            return pq.ParquetFile(path).metadata.num_rows
        except (pa.ArrowException, OSError):  # unreadable: reading it will make it a dead letter
            return 0
    lines = 0
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                lines += 1
    return max(lines - 1, 0) if fmt == "csv" else lines


@functools.lru_cache(maxsize=4)
def _cached_files(files: tuple[str, ...], stamps: tuple, fmt: str, schema: pa.Schema) -> pa.Table:
    tables = [read_data_file(p, fmt, schema) for p in files]
    return pa.concat_tables(tables).combine_chunks() if tables else schema.empty_table()


def read_files_cached(files: list[str], fmt: str, schema: pa.Schema) -> pa.Table:
    """All rows of ``files`` concatenated, cached per process (Python workers are reused)
    and invalidated when a file's size or mtime changes."""
    stamps = tuple((os.stat(p).st_mtime_ns, os.stat(p).st_size) for p in files)
    return _cached_files(tuple(files), stamps, fmt, schema)
