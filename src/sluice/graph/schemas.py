"""Schemas as users write them: a pyarrow.Schema, or a dict of column name to type name."""

from __future__ import annotations

import re

import pyarrow as pa

from sluice.errors import PipelineError

_TYPES = {
    "int": pa.int64(),
    "int64": pa.int64(),
    "long": pa.int64(),
    "bigint": pa.int64(),
    "int32": pa.int32(),
    "integer": pa.int32(),
    "float": pa.float64(),
    "double": pa.float64(),
    "float64": pa.float64(),
    "float32": pa.float32(),
    "str": pa.string(),
    "string": pa.string(),
    "bool": pa.bool_(),
    "boolean": pa.bool_(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "binary": pa.binary(),
    "date": pa.date32(),
}
_DECIMAL = re.compile(r"(?:decimal|numeric)\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)")


def to_arrow_type(t, where: str = "") -> pa.DataType:
    if isinstance(t, pa.DataType):
        return t
    if isinstance(t, type):
        t = {int: "int64", float: "float64", str: "string", bool: "bool", bytes: "binary"}.get(t, t)
    if isinstance(t, str) and t.strip().lower() in _TYPES:
        return _TYPES[t.strip().lower()]
    decimal = _DECIMAL.fullmatch(t.strip().lower()) if isinstance(t, str) else None
    if decimal:
        precision, scale = int(decimal.group(1)), int(decimal.group(2))
        if not 1 <= precision <= 38 or scale > precision:
            raise PipelineError(f"{where}{t!r}: a decimal needs 1 <= precision <= 38 and scale <= precision")
        return pa.decimal128(precision, scale)
    raise PipelineError(
        f"{where}unknown type {t!r}; use a pyarrow type or one of {sorted(_TYPES)} or 'decimal(precision, scale)'"
    )


def spark_type(t: pa.DataType) -> pa.DataType:
    """The type a declared column has inside Spark, which holds timestamps in microseconds
    only and no unsigned integers or half floats: ``timestamp[ms]`` (what
    ``pyarrow.parquet.read_schema`` gives for many files) becomes ``timestamp[us]`` with the
    same zone, unsigned integers ``int64``, ``float16`` ``float32``, and so inside lists,
    structs and maps. A function's output is cast to the declared schema, so its values
    keep their meaning."""
    if pa.types.is_timestamp(t) and t.unit != "us":
        return pa.timestamp("us", tz=t.tz)
    if pa.types.is_unsigned_integer(t):
        return pa.int64()
    if pa.types.is_float16(t):
        return pa.float32()
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(pa.field(t.value_field.name, spark_type(t.value_type), t.value_field.nullable))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, spark_type(f.type), f.nullable) for f in t])
    if pa.types.is_map(t):
        return pa.map_(spark_type(t.key_type), spark_type(t.item_type))
    return t


def as_schema(schema, where: str = "") -> pa.Schema | None:
    """Accept None, a pyarrow.Schema or {name: type}; return a pyarrow.Schema (or None), its
    types the ones Spark holds (:func:`spark_type`), so a declared ``timestamp[ms]`` is cast
    when the graph is built rather than refused inside Spark.

    >>> as_schema({"ts": pa.timestamp("ms", tz="UTC"), "n": "int"}).types
    [TimestampType(timestamp[us, tz=UTC]), DataType(int64)]
    """
    if schema is None:
        return None
    if isinstance(schema, pa.Schema):
        return pa.schema([f.with_type(spark_type(f.type)) for f in schema], metadata=schema.metadata)
    if isinstance(schema, dict):
        return pa.schema(
            [pa.field(name, spark_type(to_arrow_type(t, f"{where}column {name!r}: "))) for name, t in schema.items()]
        )
    raise PipelineError(f"{where}schema must be a pyarrow.Schema or a dict of name -> type, got {schema!r}")


def is_hidden(name: str) -> bool:
    """Columns the runtime carries along (ingest time, key group) start with two underscores."""
    return name.startswith("__")
