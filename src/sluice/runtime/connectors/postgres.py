"""PostgreSQL: a table read incrementally by a growing column, and a sink that appends or
upserts a batch in one transaction together with the batch id (a replay is a no-op).

Source: a batch is the rows with ``column`` in (start, end]; planning asks for the value of
the ``cap``-th row after the start. The rows travel as CSV through ``COPY ... TO STDOUT`` and
are parsed by pyarrow, column by column. Ingest time = when the batch was planned (it is in
the offset Spark logs). The column must only grow: a row committed later with a value at or
below one already admitted is never read (e.g. two writers whose transactions commit out of
order of their ``serial`` values); one writer, or an insertion timestamp set at commit, is safe.

Sink: ``COPY`` into the table (append), or into a temporary table and then ``INSERT ... ON
CONFLICT (key) DO UPDATE`` (upsert; the last row of a key in a batch wins), and a row
``(sink, job, batch_id)`` into ``sluice_batches``, all in one transaction. The marker row is
inserted first: if it already exists the batch was written and the transaction ends there.
"""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from sluice.credentials import redact, resolve
from sluice.errors import SinkError, SourceError
from sluice.graph.connectors import PostgresSink, PostgresTableSource
from sluice.graph.sources import spark_compatible
from sluice.runtime.connectors.payloads import Parsed, parse_by_bisection
from sluice.runtime.connectors.reader import BrokerDown, ConnectorStreamReader, Plan, Span
from sluice.runtime.kernels.grouping import last_rows

UNCAPPED_BATCH = 1_000_000
"""Rows a batch admits when no limit is set."""
CONNECT_TIMEOUT_S = 5
MARKERS = "sluice_batches"


def connect(dsn: str):
    import psycopg

    try:
        return psycopg.connect(resolve(dsn, "PostgreSQL DSN"), connect_timeout=CONNECT_TIMEOUT_S, autocommit=True)
    except psycopg.OperationalError as e:
        raise BrokerDown(f"cannot connect to {dsn!r}: {str(e).strip()}") from None


def quote_name(name: str) -> str:
    """An identifier, possibly schema-qualified (``a.b``), quoted part by part."""
    return ".".join('"' + part.replace('"', '""') + '"' for part in name.split("."))


def _literal(conn, value) -> str:
    from psycopg import sql

    return sql.Literal(value).as_string(conn)


# --- the source --------------------------------------------------------------------------------

_PG_TO_ARROW = {
    "smallint": pa.int16(),
    "integer": pa.int32(),
    "bigint": pa.int64(),
    "real": pa.float32(),
    "double precision": pa.float64(),
    "numeric": pa.float64(),
    "boolean": pa.bool_(),
    "text": pa.string(),
    "character varying": pa.string(),
    "character": pa.string(),
    "timestamp with time zone": pa.timestamp("us", tz="UTC"),
    "timestamp without time zone": pa.timestamp("us", tz="UTC"),
    "date": pa.date32(),
    "bytea": pa.binary(),
    "uuid": pa.string(),
    "jsonb": pa.string(),
    "json": pa.string(),
}


def table_schema(dsn: str, table: str) -> pa.Schema:
    """The Arrow schema of a table's columns, for ``sources.postgres`` without ``schema=``."""
    schema, _, name = table.rpartition(".")
    try:
        conn = connect(dsn)
    except BrokerDown as e:
        raise SourceError(f"PostgreSQL table {table!r}: {e}") from None
    with conn:
        rows = conn.execute(
            "SELECT column_name, data_type, numeric_precision, numeric_scale FROM information_schema.columns"
            " WHERE table_name = %s AND table_schema = coalesce(nullif(%s, ''), current_schema()) ORDER BY ordinal_position",
            (name, schema),
        ).fetchall()
    if not rows:
        raise SourceError(f"PostgreSQL at {redact(repr(dsn))}: no table {table!r} (pass schema= to read a view)")
    return spark_compatible(pa.schema([(c, _arrow_type(t, p, s)) for c, t, p, s in rows]))


def _arrow_type(pg_type: str, precision: int | None, scale: int | None) -> pa.DataType:
    """A column's Arrow type: ``numeric(p, s)`` stays exact as a decimal (money keeps its
    cents); a ``numeric`` of no declared precision has no exact Arrow type and is read as double."""
    if pg_type == "numeric" and precision is not None and 1 <= precision <= 38:
        return pa.decimal128(precision, scale or 0)
    return _PG_TO_ARROW.get(pg_type, pa.string())


class PostgresTableReader(ConnectorStreamReader):
    spec: PostgresTableSource
    _conn: Any = None  # the connection, opened on first use (a task's reader keeps it)

    def _call(self, work):
        import psycopg

        if self._conn is None or self._conn.closed:
            self._conn = connect(self.spec.dsn)
        try:
            return work(self._conn)
        except (psycopg.OperationalError, psycopg.InterfaceError) as e:
            self._conn = None
            raise BrokerDown(f"{self.spec.dsn!r}: {str(e).strip()}") from None
        except psycopg.Error as e:
            raise SourceError(f"source {self.name!r}: {self.spec.broker}: {redact(str(e).strip())}") from None

    def first_position(self) -> None:
        return None  # below every value

    def _after(self, conn, position) -> str:
        column = quote_name(self.spec.column)
        return "TRUE" if position is None else f"{column} > {_literal(conn, position)}"

    def plan(self, start: dict, cap: int | None) -> Plan:
        column, table = quote_name(self.spec.column), quote_name(self.spec.table)

        def work(conn):
            after = self._after(conn, start["position"])
            count, end = conn.execute(
                f"SELECT count(*), max(c)::text FROM (SELECT {column} AS c FROM {table} "
                f"WHERE {after} ORDER BY {column} LIMIT {int(cap or UNCAPPED_BATCH)}) s"
            ).fetchone()
            waiting = 0
            if count:
                waiting = conn.execute(f"SELECT count(*) FROM {table} WHERE {self._after(conn, end)}").fetchone()[0]
            return int(count), end, int(waiting)

        count, end, waiting = self._call(work)
        return Plan(end if count else start["position"], count, waiting)

    def fetch(self, span: Span):
        schema = self.spec.schema()
        column, table = quote_name(self.spec.column), quote_name(self.spec.table)
        selected = ", ".join(_wire_column(f) for f in schema)

        def work(conn):
            query = (
                f"COPY (SELECT {selected} FROM {table} WHERE {self._after(conn, span.start)} AND "
                f"{column} <= {_literal(conn, span.end)} ORDER BY {column}) TO STDOUT (FORMAT csv)"
            )
            out = io.BytesIO()
            with conn.cursor().copy(query) as copy:
                for chunk in copy:
                    out.write(chunk)
            return out.getvalue()

        data = self._call(work) if span.rows else b""
        parsed, text = _read_csv(data, schema)
        ingest = np.full(parsed.table.num_rows, span.at_us, np.int64)
        if text is None:  # every row read as its type: the rows' text is made only if one is screened out
            text = _Deferred(lambda: _as_text(data, schema))
        positions = _Positions(text, self.spec.column)
        return parsed, ingest, positions, _RowsJson(text)


def _wire_column(f: pa.Field) -> str:
    """How a column travels in the CSV: timestamps as epoch microseconds, ``bytea`` as hex
    (PostgreSQL's CSV writes it as ``\\x...`` text), everything else as PostgreSQL prints it."""
    name = quote_name(f.name)
    if pa.types.is_timestamp(f.type):
        return f"(extract(epoch FROM {name}) * 1000000)::bigint"
    if pa.types.is_binary(f.type):
        return f"encode({name}::bytea, 'hex')"
    return name


def _wire_type(t: pa.DataType) -> pa.DataType:
    return pa.int64() if pa.types.is_timestamp(t) else pa.string() if pa.types.is_binary(t) else t


_CSV_OPTIONS = {"true_values": ["t"], "false_values": ["f"], "strings_can_be_null": True, "quoted_strings_can_be_null": False}


def _csv(data: bytes, schema: pa.Schema, types: dict) -> pa.Table:
    return pacsv.read_csv(
        io.BytesIO(data),
        read_options=pacsv.ReadOptions(column_names=schema.names),
        convert_options=pacsv.ConvertOptions(column_types=types, **_CSV_OPTIONS),
    )


def _read_csv(data: bytes, schema: pa.Schema) -> tuple[Parsed, pa.Table | None]:
    """The rows as ``schema``, and their text when some row did not read as its types.

    One typed read of the whole CSV; if it fails (a value of the wrong type: text in a
    column declared numeric, a number out of a narrow type's range), the rows are read as
    text and cast by bisection, so the rows that fail alone become rejects and the others
    go on, and a restart does not meet the same failure again."""
    if not data:
        return Parsed(schema.empty_table(), [], []), None
    try:
        table = _typed(_csv(data, schema, {f.name: _wire_type(f.type) for f in schema}), schema)
        return Parsed(table, list(range(table.num_rows)), []), None
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
        pass
    text = _as_text(data, schema)
    parsed = parse_by_bisection(
        text.num_rows,
        schema,
        lambda lo, hi: _typed(_from_text(text.slice(lo, hi - lo), schema), schema),
        f"a value is not of its declared type {_describe(schema)}",
        (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError),
    )
    return parsed, text


def _as_text(data: bytes, schema: pa.Schema) -> pa.Table:
    return _csv(data, schema, dict.fromkeys(schema.names, pa.string()))


def _from_text(text: pa.Table, schema: pa.Schema) -> pa.Table:
    """Text columns cast to the wire types (booleans as PostgreSQL prints them: t, f)."""
    columns = []
    for f in schema:
        column, wire = text.column(f.name), _wire_type(f.type)
        if pa.types.is_boolean(wire):
            valid = pc.or_kleene(pc.is_in(column, pa.array(["t", "f"])), pc.is_null(column))
            if not pc.all(valid).as_py():
                raise pa.ArrowInvalid(f"column {f.name!r}: not a boolean")
            column = pc.equal(column, "t")
        elif not pa.types.is_string(wire):
            column = column.cast(wire)
        columns.append(column)
    return pa.Table.from_arrays(columns, names=schema.names)


def _typed(wire: pa.Table, schema: pa.Schema) -> pa.Table:
    columns = []
    for f in schema:
        column = wire.column(f.name)
        columns.append(_unhex(column) if pa.types.is_binary(f.type) else column.cast(f.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _unhex(column: pa.ChunkedArray) -> pa.Array:
    """Hex text to the bytes it spells, in one pass over the column's data buffer: each value
    halves in length, so the offsets halve and the validity stays."""
    array = column.combine_chunks().cast(pa.string())
    if len(array) == 0:
        return pa.array([], pa.binary())
    offsets = np.frombuffer(array.buffers()[1], np.int32, len(array) + 1, array.offset * 4)
    first, last = int(offsets[0]), int(offsets[-1])
    data = array.buffers()[2]
    raw = bytes.fromhex(data.to_pybytes()[first:last].decode("ascii")) if last > first else b""
    halved = pa.py_buffer(((offsets - first) // 2).astype(np.int32).tobytes())
    return pa.Array.from_buffers(
        pa.binary(),
        len(array),
        [array.buffers()[0] if array.null_count else None, halved, pa.py_buffer(raw)],
        null_count=array.null_count,
        offset=0,
    )


def _describe(schema: pa.Schema) -> str:
    return "{" + ", ".join(f"{f.name}: {f.type}" for f in schema) + "}"


class _Deferred:
    """A table made the first time it is needed."""

    def __init__(self, make):
        self.make, self.table = make, None

    def get(self) -> pa.Table:
        if self.table is None:
            self.table = self.make()
        return self.table


class _Positions:
    """Where each row is, for its dead letter: ``<column> = <value>``."""

    def __init__(self, text, column: str):
        self.text, self.column = text, column

    def __getitem__(self, i: int) -> str:
        table = self.text.get() if isinstance(self.text, _Deferred) else self.text
        return f"row {self.column} = {table.column(self.column)[i].as_py()}"


class _RowsJson:
    """Each row as the JSON of its text, for its dead letter."""

    def __init__(self, text):
        self.text = text

    def __getitem__(self, i: int) -> bytes:
        table = self.text.get() if isinstance(self.text, _Deferred) else self.text
        return json.dumps(table.slice(i, 1).to_pylist()[0]).encode()


# --- the sink ------------------------------------------------------------------------------------


def _pg_type(t: pa.DataType) -> str:
    if pa.types.is_int8(t) or pa.types.is_int16(t):
        return "smallint"
    if pa.types.is_int32(t):
        return "integer"
    if pa.types.is_integer(t):
        return "bigint"
    if pa.types.is_float32(t):
        return "real"
    if pa.types.is_floating(t):
        return "double precision"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_timestamp(t):
        return "timestamptz"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_decimal(t):
        return "numeric"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "bytea"
    return "text"


def _last_per_key(table: pa.Table, key: tuple) -> pa.Table:
    """The last row of each key, in order (an upsert may touch a row once per statement)."""
    return table.take(last_rows(table, list(key)))


class PostgresWriter:
    def __init__(self, spec: PostgresSink):
        self.spec = spec
        self.conn = None
        self.ready = False

    def _connect(self):
        if self.conn is None or self.conn.closed:
            self.conn = connect(self.spec.dsn)
            self.ready = False
        return self.conn

    def _prepare(self, conn, schema: pa.Schema) -> None:
        """Create the table (from the stream's columns) and the marker table, once."""
        if self.ready:
            return
        columns = [f"{quote_name(f.name)} {_pg_type(f.type)}" for f in schema]
        missing = [k for k in self.spec.key if k not in schema.names]
        if missing:
            raise SinkError(f"sink {self.spec.target}: key columns {missing} are not among the columns {schema.names}")
        if self.spec.key:
            columns.append(f"PRIMARY KEY ({', '.join(quote_name(k) for k in self.spec.key)})")
        conn.execute(f"CREATE TABLE IF NOT EXISTS {quote_name(self.spec.table)} ({', '.join(columns)})")
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {MARKERS} (sink text, job text, batch_id bigint, "
            "written_at timestamptz DEFAULT now(), PRIMARY KEY (sink, job, batch_id))"
        )
        self.ready = True

    def write(self, table: pa.Table, batch_id: int, job: str) -> None:
        import psycopg

        try:
            self._write(table, batch_id, job)
        except (psycopg.OperationalError, psycopg.InterfaceError) as e:
            self.conn = None
            raise BrokerDown(f"{self.spec.dsn!r}: {str(e).strip()}") from None
        except psycopg.Error as e:
            raise SinkError(f"sink {self.spec.target}: {redact(str(e).strip())}") from None

    def _write(self, table: pa.Table, batch_id: int, job: str) -> None:
        conn = self._connect()
        self._prepare(conn, table.schema)
        target = quote_name(self.spec.table)
        names = ", ".join(quote_name(n) for n in table.column_names)
        with conn.transaction():
            first = conn.execute(
                f"INSERT INTO {MARKERS} (sink, job, batch_id) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING RETURNING 1",
                (self.spec.table, job, batch_id),
            ).fetchone()
            if first is None or table.num_rows == 0:
                return  # written before (a replay), or nothing to write
            if not self.spec.key:
                _copy(conn, f"COPY {target} ({names}) FROM STDIN (FORMAT csv)", table)
                return
            table = _last_per_key(table, self.spec.key)
            conn.execute(f"CREATE TEMP TABLE IF NOT EXISTS sluice_upsert (LIKE {target}) ON COMMIT DELETE ROWS")
            _copy(conn, f"COPY sluice_upsert ({names}) FROM STDIN (FORMAT csv)", table)
            keys = ", ".join(quote_name(k) for k in self.spec.key)
            updates = ", ".join(
                f"{quote_name(n)} = EXCLUDED.{quote_name(n)}" for n in table.column_names if n not in self.spec.key
            )
            action = f"DO UPDATE SET {updates}" if updates else "DO NOTHING"
            conn.execute(f"INSERT INTO {target} ({names}) SELECT {names} FROM sluice_upsert ON CONFLICT ({keys}) {action}")


def _copy(conn, statement: str, table: pa.Table) -> None:
    out = io.BytesIO()
    pacsv.write_csv(table, out, write_options=pacsv.WriteOptions(include_header=False))
    with conn.cursor().copy(statement) as copy:
        copy.write(out.getvalue())
