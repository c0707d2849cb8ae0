"""Messages to Arrow and back, vectorized, with the messages that do not fit set aside.

A broker hands over a list of messages; the source needs one Arrow table of its declared
schema. A message that is not a JSON object, or whose values cannot be read as the declared
types, is a *reject*: it is returned with its reason (it goes to the dead-letter sink) and
the other messages go on. The whole list is parsed in one pyarrow call; only when that call
fails is it bisected, to tell the bad ones from the good.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson


@dataclass
class Parsed:
    table: pa.Table  # the good messages, declared schema
    kept: list[int]  # index of each row of ``table`` in the input list
    rejects: list[tuple[int, str]]  # (index in the input, reason)


def _json_lines(payloads: list[bytes], schema: pa.Schema) -> pa.Table:
    # A raw newline in valid JSON is whitespace (newlines in strings are escaped), so it can
    # be blanked to keep one message per line.
    data = b"\n".join(p.replace(b"\n", b" ") for p in payloads) + b"\n"
    options = pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    table = pajson.read_json(
        io.BytesIO(data), parse_options=options, read_options=pajson.ReadOptions(block_size=max(len(data), 1 << 20))
    )
    if table.num_rows != len(payloads):  # e.g. an empty message is no line at all
        raise pa.ArrowInvalid(f"{len(payloads)} messages gave {table.num_rows} rows")
    return table.select(schema.names).cast(schema)


def parse_json(payloads: list[bytes], schema: pa.Schema) -> Parsed:
    """The JSON objects in ``payloads`` as rows of ``schema`` (missing fields are null).

    One pyarrow call parses them all; if it fails, the list is bisected (each half parsed
    in one call again) down to the messages that fail alone, so k bad messages among n cost
    about k log2(n) calls, never one per message."""

    def parse(lo: int, hi: int) -> pa.Table:
        if hi - lo == 1 and not payloads[lo].strip().startswith(b"{"):
            raise pa.ArrowInvalid("not a JSON object")
        return _json_lines(payloads[lo:hi], schema)

    return parse_by_bisection(
        len(payloads),
        schema,
        parse,
        f"does not parse as {_describe(schema)}",
        (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError),
    )


def parse_by_bisection(
    n: int, schema: pa.Schema, parse: Callable[[int, int], pa.Table], reason: str, errors: tuple[type[Exception], ...]
) -> Parsed:
    """Rows [0, n) parsed by ``parse(lo, hi)`` in one call, else each half, down to the rows
    that fail alone (rejected with ``reason`` and the error); kept rows in input order."""
    tables: list[pa.Table] = []
    kept: list[int] = []
    rejects: list[tuple[int, str]] = []

    def bisect(lo: int, hi: int) -> None:
        try:
            tables.append(parse(lo, hi))
            kept.extend(range(lo, hi))
        except errors as e:
            if hi - lo == 1:
                rejects.append((lo, f"{reason}: {e}"))
                return
            mid = (lo + hi) // 2
            bisect(lo, mid)
            bisect(mid, hi)

    if n:
        bisect(0, n)
    return Parsed(pa.concat_tables(tables) if tables else schema.empty_table(), kept, rejects)


def parse_text_columns(columns: dict[str, list], n: int, schema: pa.Schema) -> Parsed:
    """Rows given as text per column (Redis fields; None where absent), cast to ``schema``."""
    text = pa.table({f.name: pa.array(columns.get(f.name, [None] * n), pa.string()) for f in schema})
    return parse_by_bisection(
        n,
        schema,
        lambda lo, hi: _cast_text(text.slice(lo, hi - lo), schema),
        f"does not parse as {_describe(schema)}",
        (pa.ArrowInvalid, pa.ArrowNotImplementedError),
    )


def _cast_text(text: pa.Table, schema: pa.Schema) -> pa.Table:
    columns = []
    for f in schema:
        column = text.column(f.name)
        if pa.types.is_boolean(f.type):
            lowered = pc.utf8_lower(column)
            valid = pc.is_in(lowered, pa.array(["true", "false", "1", "0"]))
            if not pc.all(pc.or_kleene(valid, pc.is_null(lowered))).as_py():
                raise pa.ArrowInvalid(f"column {f.name!r}: not a boolean")
            column = pc.is_in(lowered, pa.array(["true", "1"]))
            column = pc.if_else(pc.is_null(lowered), pa.scalar(None, pa.bool_()), column)
        elif not pa.types.is_string(f.type):
            column = column.cast(f.type)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema)


def _describe(schema: pa.Schema) -> str:
    return "{" + ", ".join(f"{f.name}: {f.type}" for f in schema) + "}"


def rows_as_json(table: pa.Table) -> list[bytes]:
    """Each row of ``table`` as one JSON object (bytes), in order: pandas' C encoder does the
    work (timestamps in ISO 8601, microseconds)."""
    if table.num_rows == 0:
        return []
    frame = table.to_pandas(integer_object_nulls=True)  # an int column with nulls stays ints
    text = frame.to_json(orient="records", lines=True, date_format="iso", date_unit="us")
    return [line.encode() for line in text.splitlines()]


def rows_as_text(table: pa.Table) -> list[dict[str, str]]:
    """Each row as {column: text} (nulls left out), for field/value stores such as Redis."""
    columns = {}
    for name in table.column_names:
        column = table.column(name)
        if pa.types.is_boolean(column.type):
            column = pc.if_else(column, "true", "false")
        columns[name] = column.cast(pa.string()).to_pylist()
    names = list(columns)
    return [{k: v for k, v in zip(names, values) if v is not None} for values in zip(*columns.values())]
