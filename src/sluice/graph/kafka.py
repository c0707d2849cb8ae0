"""Kafka: a source of topic records and an exactly-once sink (pure descriptions).

``KafkaSource`` reads the records of one or more topics. Its offset, logged by Spark before a
batch runs, holds the next offset of every topic-partition, so a batch replayed after a crash
reads exactly the records it read before (by offset range, with assign and seek: no consumer
group decides what is read). Partitions that appear while the job runs are read from their
first offset. ``sluice.runtime.connectors.kafka`` says how batches are planned and read.

``KafkaSink`` writes each batch in one Kafka transaction that also commits the batch id, so
a ``read_committed`` consumer sees every record once whatever crashes (see the class).

Nothing here connects to anything.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa

from sluice.errors import PipelineError, SourceError
from sluice.graph.connectors import DEFAULT_PATIENCE_S, ConnectorSource, _key_columns, _text
from sluice.graph.schemas import as_schema
from sluice.graph.sinks import SinkSpec
from sluice.graph.sources import TIMESTAMP

FORMATS = ("json", "avro", "raw")

METADATA = {
    "key": pa.field("kafka_key", pa.binary()),
    "topic": pa.field("kafka_topic", pa.string()),
    "partition": pa.field("kafka_partition", pa.int32()),
    "offset": pa.field("kafka_offset", pa.int64()),
    "timestamp": pa.field("kafka_timestamp", TIMESTAMP),
}
"""Record metadata a source can add as columns (``metadata=("timestamp", ...)``)."""

RAW_SCHEMA = pa.schema([("value", pa.binary())])
"""The value column of ``format="raw"`` (the record's bytes, undecoded)."""


def _config(where: str, config) -> tuple:
    """Extra client settings (librdkafka names, e.g. security), as sorted pairs (hashable)."""
    if config is None:
        return ()
    if not isinstance(config, Mapping):
        raise PipelineError(f"{where}: config must be a mapping of librdkafka settings, got {config!r}")
    return tuple(sorted((str(k), str(v)) for k, v in config.items()))


def avro_schema(schema: pa.Schema, name: str = "record") -> dict:
    """The Avro record schema of ``schema``'s columns, every field nullable (default null)."""

    def avro_type(t: pa.DataType):
        if pa.types.is_timestamp(t):
            return {"type": "long", "logicalType": "timestamp-micros"}
        for check, avro in (
            (pa.types.is_boolean, "boolean"),
            (pa.types.is_int64, "long"),
            (pa.types.is_integer, "int"),
            (pa.types.is_float32, "float"),
            (pa.types.is_floating, "double"),
            (pa.types.is_string, "string"),
            (pa.types.is_large_string, "string"),
            (pa.types.is_binary, "bytes"),
        ):
            if check(t):
                return avro
        raise PipelineError(f"Avro: no Avro type for column type {t} (use numbers, strings, bytes, booleans or timestamps)")

    return {
        "type": "record",
        "name": name,
        "fields": [{"name": f.name, "type": ["null", avro_type(f.type)], "default": None} for f in schema],
    }


@dataclass(frozen=True, kw_only=True)
class KafkaSource(ConnectorSource):
    """Records of Kafka ``topics``, decoded as ``format``:

    - ``"json"``: each value is a JSON object read as ``schema``;
    - ``"avro"``: each value is Avro binary (no schema-registry header) written with
      ``avro`` (a schema as JSON text or dict; by default the one ``schema`` implies);
    - ``"raw"``: the value's bytes as the column ``value`` (``schema`` not needed).

    ``metadata`` adds record metadata as columns: ``"key"`` (``kafka_key``, bytes),
    ``"topic"``, ``"partition"``, ``"offset"``, ``"timestamp"`` (``kafka_timestamp``, the
    record's Kafka time). Event time is a column of the value (``event_time="ts"``) or the
    Kafka timestamp (``metadata=("timestamp",), event_time="kafka_timestamp"``).

    ``starting_offsets``: where a new checkpoint starts in partitions that exist when it
    does: ``"earliest"`` or ``"latest"``; partitions created later are read from their start.
    Only committed records are read (``isolation.level=read_committed``). ``config`` passes
    extra librdkafka settings (e.g. ``security.protocol``).

    >>> import pyarrow as pa
    >>> from sluice import sources as S
    >>> S.kafka("orders", schema=pa.schema([("id", pa.int64())]), metadata=("timestamp",)).schema().names
    ['id', 'kafka_timestamp']
    """

    topics: tuple
    bootstrap: str = "127.0.0.1:9092"
    format: str = "json"
    value_schema: pa.Schema | None = None
    avro: str | None = None
    metadata: tuple = ()
    starting_offsets: str = "earliest"
    config: tuple = ()

    def __init__(
        self,
        topics,
        schema: pa.Schema | dict | None = None,
        *,
        format: str = "json",
        bootstrap: str = "127.0.0.1:9092",
        avro=None,
        metadata=(),
        starting_offsets: str = "earliest",
        config: Mapping[str, str] | None = None,
        event_time: str | None = None,
        watermark_delay: float = 0.0,
        max_rows_per_batch: int | None = None,
        patience_s: float = DEFAULT_PATIENCE_S,
    ):
        topics = (topics,) if isinstance(topics, str) else tuple(topics or ())
        where = f"KafkaSource({list(topics)!r})"
        if not topics:
            raise SourceError(f"{where}: at least one topic is needed")
        for topic in topics:
            _text(where, "a topic", topic)
        _text(where, "bootstrap", bootstrap)
        if format not in FORMATS:
            raise SourceError(f"{where}: format must be one of {list(FORMATS)}, got {format!r}")
        if format == "raw":
            schema = RAW_SCHEMA if schema is None else schema
        elif schema is None:
            raise SourceError(f"{where}: format={format!r} needs schema= (a pyarrow.Schema of the values)")
        meta = (metadata,) if isinstance(metadata, str) else tuple(metadata or ())
        unknown = [m for m in meta if m not in METADATA]
        if unknown:
            raise SourceError(f"{where}: unknown metadata {unknown} (choose from {list(METADATA)})")
        if starting_offsets not in ("earliest", "latest"):
            raise SourceError(f"{where}: starting_offsets must be 'earliest' or 'latest', got {starting_offsets!r}")
        if isinstance(schema, dict):  # {"meter": "string", "kwh": "double"}, as schema= takes everywhere
            schema = as_schema(schema, f"{where}: ")
        if not isinstance(schema, pa.Schema):
            raise SourceError(f"{where}: schema= must be a dict of column to type name or a pyarrow.Schema, got {schema!r}")
        clash = [METADATA[m].name for m in meta if METADATA[m].name in schema.names]
        if clash:
            raise SourceError(f"{where}: columns {clash} are both in the schema and metadata")
        full = pa.schema(list(schema) + [METADATA[m] for m in meta])
        if format == "avro":
            avro = avro_schema(schema) if avro is None else (json.loads(avro) if isinstance(avro, str) else avro)
            avro = json.dumps(avro, sort_keys=True)  # text: the spec stays hashable
        elif avro is not None:
            raise SourceError(f"{where}: avro= is for format='avro'")
        self._init(
            where,
            full,
            topics=topics,
            bootstrap=bootstrap,
            format=format,
            avro=avro,
            metadata=meta,
            starting_offsets=starting_offsets,
            config=_config(where, config),
            event_time=event_time,
            watermark_delay=watermark_delay,
            max_rows_per_batch=max_rows_per_batch,
            patience_s=patience_s,
        )
        object.__setattr__(self, "value_schema", pa.schema(self.schema_.field(n) for n in schema.names))

    @property
    def broker(self) -> str:
        return f"Kafka at {self.bootstrap} (topics {list(self.topics)})"


@dataclass(frozen=True)
class KafkaSink(SinkSpec):
    """Rows as records of ``topic``, exactly once for ``read_committed`` consumers.

    Values are JSON objects (``format="json"``) or Avro binary (``"avro"``, schema from the
    rows' columns or ``avro``); ``key`` names the column(s) whose values make the record key
    (one column: its text; several: a JSON array), and ``headers`` maps header names to the
    columns whose text they carry. Without a key Kafka spreads records over partitions.

    How a batch is written exactly once: the sink's producer has the transactional id
    ``sluice.<job>.<topic>`` (the job is the Spark query id of the checkpoint, kept across
    restarts). Every batch is one transaction holding its records *and* an offset commit,
    to the consumer group ``sluice.<job>.<topic>``, of ``batch id + 1`` on partition 0 of
    the topic (``send_offsets_to_transaction``); Kafka makes both visible together or not at
    all. When a driver restarts, its producer's ``init_transactions`` fences the dead one
    and aborts the transaction it left open (a kill between producing and committing:
    those records are never visible to ``read_committed`` consumers); the sink then reads
    the group's committed offset, and a replayed batch at or below it writes nothing (a kill
    after Kafka committed but before Spark did). ``read_uncommitted`` consumers may see the
    aborted records: consume with ``isolation.level=read_committed``.
    """

    topic: str = ""
    bootstrap: str = "127.0.0.1:9092"
    key: tuple = ()
    headers: tuple = ()
    format: str = "json"
    avro: str | None = None
    config: tuple = ()
    patience_s: float = DEFAULT_PATIENCE_S
    kind: str = "kafka"

    def __post_init__(self) -> None:
        where = f"kafka sink {self.topic!r}"
        if not self.topic or not isinstance(self.topic, str):
            raise PipelineError("kafka sink: a topic is required")
        if self.format not in ("json", "avro"):
            raise PipelineError(f"{where}: format must be 'json' or 'avro', got {self.format!r}")
        object.__setattr__(self, "key", _key_columns(where, self.key))
        headers = self.headers
        if isinstance(headers, Mapping):
            headers = tuple(sorted(headers.items()))
        for pair in headers:
            if not (isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(x, str) and x for x in pair)):
                raise PipelineError(f"{where}: headers must map header names to column names, got {self.headers!r}")
        object.__setattr__(self, "headers", tuple(headers))
        if isinstance(self.avro, dict):
            object.__setattr__(self, "avro", json.dumps(self.avro, sort_keys=True))
        if isinstance(self.config, Mapping):
            object.__setattr__(self, "config", _config(where, self.config))

    @property
    def target(self) -> str:
        return f"Kafka at {self.bootstrap} (topic {self.topic!r})"
