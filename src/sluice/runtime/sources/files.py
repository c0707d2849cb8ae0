"""Reading one data file (JSON lines, CSV, Parquet) into Arrow with a fixed schema."""

from __future__ import annotations

import functools
import os

import pyarrow as pa

from sluice.errors import SourceError


def read_data_file(path: str, fmt: str, schema: pa.Schema) -> pa.Table:
    """The file's rows as a table with exactly ``schema``'s columns, in its order and types.

    Columns the file lacks come out null; extra columns in the file are ignored.
    """
    try:
        if fmt == "json":
            import pyarrow.json as pajson

            options = pajson.ParseOptions(explicit_schema=schema,
                                          unexpected_field_behavior="ignore")
            table = pajson.read_json(path, parse_options=options)
        elif fmt == "csv":
            import pyarrow.csv as pacsv

            # Timestamps are read as text and parsed in ``conform``, which accepts them
            # with or without a zone offset (pyarrow's CSV reader insists on one).
            options = pacsv.ConvertOptions(
                column_types={f.name: pa.string() if pa.types.is_timestamp(f.type) else f.type
                              for f in schema},
                include_columns=schema.names,
                include_missing_columns=True,
            )
            table = pacsv.read_csv(path, convert_options=options)
        elif fmt == "parquet":
            import pyarrow.parquet as pq

            present = set(pq.read_schema(path).names)
            table = pq.read_table(path, columns=[n for n in schema.names if n in present])
        else:
            raise SourceError(f"unknown file format {fmt!r} for {path!r}")
    except (pa.ArrowException, OSError) as e:
        raise SourceError(f"cannot read {path!r} as {fmt}: {e}") from None
    return conform(table, schema, path)


def conform(table: pa.Table, schema: pa.Schema, where: str) -> pa.Table:
    """Select and cast ``table``'s columns to ``schema`` (missing columns become nulls)."""
    columns = []
    for f in schema:
        if f.name in table.column_names:
            column = table.column(f.name)
            if column.type != f.type:
                try:
                    column = _cast(column, f.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                    raise SourceError(
                        f"{where}: column {f.name!r} is {column.type}, cannot be read as "
                        f"{f.type}: {e}"
                    ) from None
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

        return pq.ParquetFile(path).metadata.num_rows
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
