"""Connectors: sources and sinks that talk to brokers and databases (pure descriptions).

Sources, each replayable by an offset Spark logs, so a batch replayed after a crash reads
exactly the records it read before:

- ``NatsSource``: a NATS JetStream stream; offsets are stream sequence numbers.
- ``RedisStreamSource``: a Redis stream; offsets are entry IDs.
- ``MqttSource``: MQTT topics. MQTT has no replay: the source journals every message
  to files under the checkpoint before a batch may admit it, and acknowledges it to the
  broker only then (QoS 1, persistent session). See ``runtime/connectors/mqtt.py``.
- ``PostgresTableSource``: rows of a table read in the order of a monotonically increasing
  column; offsets are that column's values.

Message payloads (NATS, MQTT) are JSON objects, Redis entries are field/value pairs; both are
read as the declared ``schema``. A message that does not fit it is not dropped: it goes to
the pipeline's dead-letter sink with the reason.

Sinks, each idempotent per batch id (a replayed batch is a no-op):

- ``PostgresSink``: rows appended, or upserted by ``key``, in one transaction that also
  records the batch id.
- ``RedisSink``: stream entries (``XADD``), or hashes upserted by ``key``, in one MULTI/EXEC
  transaction that also records the batch id.
- ``NatsSink``: JetStream publishes with a ``Nats-Msg-Id`` made of job, batch and row, which
  JetStream deduplicates (within the stream's duplicate window).

Nothing here connects to anything; ``sluice.runtime.connectors`` does.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pyarrow as pa

from sluice.credentials import redact, redacted_repr, resolve
from sluice.errors import PipelineError, SourceError
from sluice.graph.schemas import as_schema
from sluice.graph.sinks import SinkSpec
from sluice.graph.sources import SourceSpec, _check_column_names, spark_compatible

DEFAULT_PATIENCE_S = 30.0
"""How long a connector waits for its broker to come back before the job fails."""
DEFAULT_MAX_BYTES_PER_BATCH = 256 << 20
"""Bytes of messages a connector batch admits at most: with large messages a cap by rows
alone could make a batch of gigabytes (read, parsed and copied several times over)."""


def _declared_schema(where: str, schema) -> pa.Schema:
    if not isinstance(schema, pa.Schema) or len(schema) == 0:
        raise SourceError(
            f"{where}: schema= must be a dict of column to type name or a pyarrow.Schema, with at "
            f"least one column "
            f"(messages carry no schema of their own), got {schema!r}"
        )
    _check_column_names(where, schema.names)
    return spark_compatible(schema)


def _text(where: str, name: str, value) -> None:
    if not isinstance(value, str) or not value:
        raise SourceError(f"{where}: {name} must be a non-empty string, got {value!r}")


def _auth(where: str, auth, kind: type) -> None:
    if auth is not None and not isinstance(auth, kind):
        raise SourceError(f"{where}: auth= must be a {kind.__name__}, got {type(auth).__name__}")


@dataclass(frozen=True)
class NatsAuth:
    """How a NATS connector proves who it is, besides what its URL carries: a ``user`` and
    ``password``, a ``token``, or a ``creds_file`` (a NATS ``.creds`` file: JWT and NKey
    seed). ``password`` and ``token`` may name their value instead of holding it,
    ``${env:NAME}`` or ``${file:/path}`` (see ``sluice.credentials``): it is read only when
    the connector connects."""

    user: str | None = None
    password: str | None = None
    token: str | None = None
    creds_file: str | None = None

    def connect_options(self) -> dict:
        """Keyword arguments of ``nats.connect``."""
        out: dict = {}
        if self.user is not None:
            out["user"] = self.user
        if self.password is not None:
            out["password"] = resolve(self.password, "NATS password")
        if self.token is not None:
            out["token"] = resolve(self.token, "NATS token")
        if self.creds_file is not None:
            out["user_credentials"] = self.creds_file
        return out


@dataclass(frozen=True)
class MqttAuth:
    """How an MQTT source logs in and protects the connection: ``username`` and
    ``password`` (the password may be ``${env:NAME}`` or ``${file:/path}``, read only when
    connecting), and TLS: ``tls=True`` verifies the broker against the system's CAs, or
    against ``ca_file``; ``cert_file`` and ``key_file`` present a client certificate."""

    username: str | None = None
    password: str | None = None
    tls: bool = False
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None


@dataclass(frozen=True, kw_only=True)
class ConnectorSource(SourceSpec):
    """What every connector source has: a declared schema and how long to wait for a
    broker that is down (``patience_s``) before the job fails with an error naming it."""

    schema_: pa.Schema
    patience_s: float = DEFAULT_PATIENCE_S
    # messages' bytes a batch admits at most, besides its rows (None: rows alone)
    max_bytes_per_batch: int | None = None
    # columns declared ``nullable=False``: a message without a value for one is a dead letter
    required: tuple = ()

    @property
    def broker(self) -> str:
        """What the source reads from, for messages: e.g. "NATS JetStream at nats://..."."""
        raise NotImplementedError

    def schema(self) -> pa.Schema:
        return self.schema_

    def _init(self, where: str, schema, **values) -> None:
        set_ = functools.partial(object.__setattr__, self)
        for name, value in values.items():
            set_(name, value)
        if isinstance(schema, dict):  # {"meter": "string", "kwh": "double"}, as schema= takes everywhere
            schema = as_schema(schema, f"{where}: ")
        set_("schema_", _declared_schema(where, schema))
        set_("required", tuple(f.name for f in schema if not f.nullable))
        self._validate_common(where)
        self._validate_event_time(where, self.schema_)
        if not self.patience_s > 0:
            raise SourceError(f"{where}: patience_s must be positive, got {self.patience_s!r}")
        if self.max_bytes_per_batch is not None and (
            isinstance(self.max_bytes_per_batch, bool)
            or not isinstance(self.max_bytes_per_batch, int)
            or self.max_bytes_per_batch < 1
        ):
            raise SourceError(
                f"{where}: max_bytes_per_batch must be a positive integer (bytes) or None, got {self.max_bytes_per_batch!r}"
            )


@dataclass(frozen=True, kw_only=True)
class NatsSource(ConnectorSource):
    """Messages of a JetStream ``stream`` (JSON objects), in stream sequence order.

    >>> import pyarrow as pa
    >>> from sluice import sources as S
    >>> S.nats("readings", schema=pa.schema([("meter", pa.string()), ("kwh", pa.float64())])).stream
    'readings'
    """

    stream: str
    url: str = "nats://127.0.0.1:4222"
    auth: NatsAuth | None = None

    def __init__(
        self,
        stream: str,
        schema: pa.Schema,
        *,
        url: str = "nats://127.0.0.1:4222",
        auth: NatsAuth | None = None,
        event_time: str | None = None,
        watermark_delay: float = 0.0,
        max_rows_per_batch: int | None = None,
        patience_s: float = DEFAULT_PATIENCE_S,
        max_bytes_per_batch: int | None = DEFAULT_MAX_BYTES_PER_BATCH,
    ):
        where = f"NatsSource({stream!r})"
        _text(where, "stream", stream)
        _auth(where, auth, NatsAuth)
        self._init(
            where,
            schema,
            stream=stream,
            url=url,
            auth=auth,
            event_time=event_time,
            watermark_delay=watermark_delay,
            max_rows_per_batch=max_rows_per_batch,
            patience_s=patience_s,
            max_bytes_per_batch=max_bytes_per_batch,
        )

    @property
    def broker(self) -> str:
        return f"NATS JetStream at {redact(self.url)} (stream {self.stream!r})"


@dataclass(frozen=True, kw_only=True)
class RedisStreamSource(ConnectorSource):
    """Entries of the Redis stream ``key``; each field is a column (text cast to its type).

    >>> import pyarrow as pa
    >>> from sluice import sources as S
    >>> S.redis("readings", schema=pa.schema([("meter", pa.string()), ("kwh", pa.float64())])).key
    'readings'
    """

    key: str
    url: str = "redis://127.0.0.1:6379/0"

    def __init__(
        self,
        key: str,
        schema: pa.Schema,
        *,
        url: str = "redis://127.0.0.1:6379/0",
        event_time: str | None = None,
        watermark_delay: float = 0.0,
        max_rows_per_batch: int | None = None,
        patience_s: float = DEFAULT_PATIENCE_S,
        max_bytes_per_batch: int | None = DEFAULT_MAX_BYTES_PER_BATCH,
    ):
        where = f"RedisStreamSource({key!r})"
        _text(where, "key", key)
        self._init(
            where,
            schema,
            key=key,
            url=url,
            event_time=event_time,
            watermark_delay=watermark_delay,
            max_rows_per_batch=max_rows_per_batch,
            patience_s=patience_s,
            max_bytes_per_batch=max_bytes_per_batch,
        )

    @property
    def broker(self) -> str:
        return f"Redis at {redact(self.url)} (stream {self.key!r})"


@dataclass(frozen=True, kw_only=True)
class MqttSource(ConnectorSource):
    """Messages (JSON objects) on MQTT ``topics``, received with QoS 1 in a persistent session
    named ``client_id`` and journaled before they are admitted (see the module docstring).

    >>> import pyarrow as pa
    >>> from sluice import sources as S
    >>> S.mqtt(["meters/#"], schema=pa.schema([("meter", pa.string()), ("kwh", pa.float64())]),
    ...        client_id="energy-1").topics
    ('meters/#',)
    """

    topics: tuple
    client_id: str
    host: str = "127.0.0.1"
    port: int = 1883
    auth: MqttAuth | None = None

    def __init__(
        self,
        topics,
        schema: pa.Schema,
        *,
        client_id: str,
        host: str = "127.0.0.1",
        port: int = 1883,
        auth: MqttAuth | None = None,
        event_time: str | None = None,
        watermark_delay: float = 0.0,
        max_rows_per_batch: int | None = None,
        patience_s: float = DEFAULT_PATIENCE_S,
        max_bytes_per_batch: int | None = DEFAULT_MAX_BYTES_PER_BATCH,
    ):
        topics = (topics,) if isinstance(topics, str) else tuple(topics)
        where = f"MqttSource({list(topics)!r})"
        if not topics:
            raise SourceError(f"{where}: at least one topic is needed")
        for topic in topics:
            _text(where, "a topic", topic)
        _text(where, "client_id (it names the persistent session)", client_id)
        _auth(where, auth, MqttAuth)
        self._init(
            where,
            schema,
            topics=topics,
            client_id=client_id,
            host=host,
            port=int(port),
            auth=auth,
            event_time=event_time,
            watermark_delay=watermark_delay,
            max_rows_per_batch=max_rows_per_batch,
            patience_s=patience_s,
            max_bytes_per_batch=max_bytes_per_batch,
        )

    @property
    def broker(self) -> str:
        return f"MQTT broker at {self.host}:{self.port} (topics {list(self.topics)})"


@dataclass(frozen=True, kw_only=True)
class PostgresTableSource(ConnectorSource):
    """Rows of ``table`` read incrementally in the order of ``column``, which must only grow
    (an identity or serial column, an insertion timestamp): a row whose value is at or below
    one already admitted is never read. Rows of one value must be committed together."""

    dsn: str
    table: str
    column: str

    def __init__(
        self,
        dsn: str,
        table: str,
        column: str,
        schema: pa.Schema,
        *,
        event_time: str | None = None,
        watermark_delay: float = 0.0,
        max_rows_per_batch: int | None = None,
        patience_s: float = DEFAULT_PATIENCE_S,
        max_bytes_per_batch: int | None = DEFAULT_MAX_BYTES_PER_BATCH,
    ):
        where = f"PostgresTableSource({table!r})"
        for name, value in (("dsn", dsn), ("table", table), ("column", column)):
            _text(where, name, value)
        if column not in schema.names:
            raise SourceError(f"{where}: the offset column {column!r} must be among the columns read {schema.names}")
        self._init(
            where,
            schema,
            dsn=dsn,
            table=table,
            column=column,
            event_time=event_time,
            watermark_delay=watermark_delay,
            max_rows_per_batch=max_rows_per_batch,
            patience_s=patience_s,
            max_bytes_per_batch=max_bytes_per_batch,
        )

    @property
    def broker(self) -> str:
        return f"PostgreSQL at {redact(repr(self.dsn))} (table {self.table!r})"


# --------------------------------------------------------------------------------------------
# Sinks
# --------------------------------------------------------------------------------------------


def _key_columns(where: str, key) -> tuple[str, ...]:
    keys = (key,) if isinstance(key, str) else tuple(key or ())
    for k in keys:
        if not isinstance(k, str) or not k:
            raise PipelineError(f"{where}: key columns must be non-empty strings, got {key!r}")
    return keys


@dataclass(frozen=True)
class PostgresSink(SinkSpec):
    """Rows into ``table`` (created from the stream's columns if it does not exist).

    Without ``key`` every row is appended; with ``key`` (columns) a row replaces the one with
    the same key (an upsert: the table then holds the latest value per key, e.g. of a keyed
    aggregate). Either way a batch is one transaction that also records its batch id in
    ``sluice_batches``, so a replayed batch changes nothing.
    """

    dsn: str = ""
    table: str = ""
    key: tuple = ()
    patience_s: float = DEFAULT_PATIENCE_S
    kind: str = "postgres"

    def __post_init__(self) -> None:
        if not self.dsn or not self.table:
            raise PipelineError("postgres sink: dsn and table are required")
        object.__setattr__(self, "key", _key_columns(f"postgres sink {self.table!r}", self.key))

    @property
    def target(self) -> str:
        return f"PostgreSQL at {redact(repr(self.dsn))} (table {self.table!r})"


@dataclass(frozen=True)
class RedisSink(SinkSpec):
    """Rows into Redis: without ``key``, entries of the stream ``name`` (one field per
    column); with ``key``, one hash per key, named ``name:<key values joined by ':'>``
    (upserted). A batch is one MULTI/EXEC transaction that records its batch id."""

    name: str = ""
    key: tuple = ()
    url: str = "redis://127.0.0.1:6379/0"
    patience_s: float = DEFAULT_PATIENCE_S
    kind: str = "redis"

    def __post_init__(self) -> None:
        if not self.name:
            raise PipelineError("redis sink: a stream (or hash prefix) name is required")
        object.__setattr__(self, "key", _key_columns(f"redis sink {self.name!r}", self.key))

    @property
    def target(self) -> str:
        return f"Redis at {redact(self.url)} ({'hashes' if self.key else 'stream'} {self.name!r})"


@dataclass(frozen=True)
class NatsSink(SinkSpec):
    """Rows as JSON messages published to ``subject`` of a JetStream stream, each with the
    header ``Nats-Msg-Id: <job>:<batch>:<row>``: JetStream drops a message whose id it has
    seen within the stream's duplicate window (2 minutes by default), so a batch replayed
    within that window adds nothing."""

    subject: str = ""
    url: str = "nats://127.0.0.1:4222"
    patience_s: float = DEFAULT_PATIENCE_S
    kind: str = "nats"
    auth: NatsAuth | None = None

    def __post_init__(self) -> None:
        if not self.subject:
            raise PipelineError("nats sink: a subject is required")

    @property
    def target(self) -> str:
        return f"NATS JetStream at {redact(self.url)} (subject {self.subject!r})"


CONNECTOR_SINKS = (PostgresSink, RedisSink, NatsSink)

# a spec's repr (in errors, logs, a debugger) shows its address, never its password
for _spec in (NatsSource, RedisStreamSource, MqttSource, PostgresTableSource, *CONNECTOR_SINKS, NatsAuth, MqttAuth):
    redacted_repr(_spec)


# the sinks that write to a server (and retry while it is away, for patience_s)
ConnectorSink = PostgresSink | RedisSink | NatsSink
