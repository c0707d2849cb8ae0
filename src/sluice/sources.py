"""Sources for ``Pipeline.source(...)``.

- ``generator(fields={...}, rate=..., seed=..., total_rows=...)``: synthetic rows, with field
  generators ``Keys`` (uniform or Zipf), ``Sequence``, ``Uniform``, ``Normal``, ``Choice``,
  ``EventTime`` and ``Text``; deterministic by seed.
- ``directory(path, format=...)``: JSON lines, CSV or Parquet files; new files are picked up.
- ``replay(path, format=..., rate=...)``: a file replayed at a given rate.
- ``spark(factory)``: any Spark streaming DataFrame, ``factory(spark) -> DataFrame``.
- ``nats(stream, schema)``: JSON messages of a NATS JetStream stream (offsets: sequence numbers).
- ``redis(key, schema)``: entries of a Redis stream, one field per column (offsets: entry IDs).
- ``mqtt(topics, schema, client_id=...)``: JSON messages on MQTT topics, journaled (see
  ``sluice.runtime.connectors.mqtt`` for the guarantee).
- ``postgres(dsn, table, column)``: rows of a table, read in the order of a growing column.
- ``delta(uri)``: the rows each new version of a Delta table adds (offsets: table versions).
- ``kafka(topics, schema, format=...)``: records of Kafka topics (JSON, Avro or raw bytes;
  offsets: per topic-partition).

Connector sources need the declared ``schema`` of their records (a ``pyarrow.Schema``;
``postgres`` reads the table's own if none is given); a message that does not fit it goes to
the dead-letter sink with the reason.
"""

import pyarrow as _pa

from sluice.graph.connectors import MqttAuth, MqttSource, NatsAuth, NatsSource, PostgresTableSource, RedisStreamSource
from sluice.graph.kafka import KafkaSource
from sluice.graph.lakehouse import DeltaSource
from sluice.graph.sources import (
    Choice,
    DirectorySource,
    EventTime,
    GeneratorSource,
    Keys,
    Normal,
    ReplaySource,
    Sequence,
    SourceSpec,
    SparkSource,
    Text,
    Uniform,
)

generator = GeneratorSource
directory = DirectorySource
replay = ReplaySource
spark = SparkSource
nats = NatsSource
redis = RedisStreamSource
mqtt = MqttSource
kafka = KafkaSource


def postgres(dsn: str, table: str, column: str, schema: _pa.Schema | None = None, **options) -> PostgresTableSource:
    """Rows of ``table`` in the order of ``column`` (which must only grow); ``schema``
    defaults to the table's columns, read from the database now.

    >>> import pyarrow as pa
    >>> from sluice import sources as S
    >>> S.postgres("postgresql://localhost/energy", "readings", "id",
    ...            schema=pa.schema([("id", pa.int64()), ("kwh", pa.float64())])).table
    'readings'
    """
    if schema is None:
        from sluice.runtime.connectors.postgres import table_schema

        schema = table_schema(dsn, table)
    return PostgresTableSource(dsn, table, column, schema, **options)


def delta(uri: str, schema: _pa.Schema | None = None, **options) -> DeltaSource:
    """The rows each new version of the Delta table at ``uri`` adds, as a stream (see
    ``DeltaSource``); ``schema`` defaults to the table's columns, read from it now.

    >>> import pyarrow as pa
    >>> from sluice import sources as S
    >>> S.delta("/data/bronze", schema=pa.schema([("id", pa.int64())]), max_rows_per_batch=1000).uri
    '/data/bronze'
    """
    if schema is None:
        from sluice.runtime.connectors.delta import table_schema

        schema = table_schema(str(uri))
    return DeltaSource(str(uri), schema, **options)


__all__ = [
    "Choice",
    "DeltaSource",
    "DirectorySource",
    "EventTime",
    "GeneratorSource",
    "KafkaSource",
    "Keys",
    "MqttAuth",
    "MqttSource",
    "NatsAuth",
    "NatsSource",
    "Normal",
    "PostgresTableSource",
    "RedisStreamSource",
    "ReplaySource",
    "Sequence",
    "SourceSpec",
    "SparkSource",
    "Text",
    "Uniform",
    "delta",
    "directory",
    "generator",
    "kafka",
    "mqtt",
    "nats",
    "postgres",
    "redis",
    "replay",
    "spark",
]
