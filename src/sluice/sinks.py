"""Sinks for ``Stream.sink(...)``: ``files``, ``console``, ``memory``, ``callback``, and the
connectors ``postgres``, ``redis``, ``nats`` and ``kafka``, the lakehouse tables ``delta`` and
``iceberg``; and readers of what a file sink wrote: ``read_files`` (every batch's records) and
``read_latest`` (the current row per key).

Connector sinks are idempotent per batch id: a batch replayed after a crash writes nothing
twice (``sluice.graph.connectors`` and ``sluice.graph.lakehouse`` say how each one does it). Any sink can also take the
dead letters (``Pipeline.dead_letter``) or the late records of windows (``Pipeline.late_data``).
"""

from sluice.graph.connectors import NatsAuth, NatsSink, PostgresSink, RedisSink
from sluice.graph.kafka import KafkaSink
from sluice.graph.lakehouse import DeltaSink, IcebergSink
from sluice.graph.sinks import CallbackSink, ConsoleSink, FileSink, MemorySink, SinkSpec, callback, console, files, memory
from sluice.runtime.changelog import read_latest
from sluice.runtime.sinks import memory_table, read_files


def postgres(dsn: str, table: str, key=()) -> PostgresSink:
    """Rows into a PostgreSQL table: appended, or upserted by the ``key`` column(s).

    >>> from sluice import sinks
    >>> sinks.postgres("postgresql://localhost/energy", "totals", key=["meter"]).target
    "PostgreSQL at 'postgresql://localhost/energy' (table 'totals')"
    """
    return PostgresSink(dsn=dsn, table=table, key=key)


def redis(name: str, key=(), url: str = "redis://127.0.0.1:6379/0") -> RedisSink:
    """Rows into Redis: entries of stream ``name``, or hashes ``name:<key>`` upserted by ``key``.

    >>> from sluice import sinks
    >>> sinks.redis("totals", key=["meter"]).target
    "Redis at redis://127.0.0.1:6379/0 (hashes 'totals')"
    """
    return RedisSink(name=name, key=key, url=url)


def nats(subject: str, url: str = "nats://127.0.0.1:4222", auth: NatsAuth | None = None) -> NatsSink:
    """Rows as JSON messages on a JetStream subject, deduplicated by ``Nats-Msg-Id``.

    >>> from sluice import sinks
    >>> sinks.nats("readings").target
    "NATS JetStream at nats://127.0.0.1:4222 (subject 'readings')"
    """
    return NatsSink(subject=subject, url=url, auth=auth)


def kafka(
    topic: str, bootstrap: str = "127.0.0.1:9092", key=(), headers=(), format: str = "json", avro=None, config=None
) -> KafkaSink:
    """Rows as records of a Kafka topic, one transaction per batch (exactly once for
    ``read_committed`` consumers): ``key`` column(s), ``headers`` {header: column}, JSON or
    Avro values (``KafkaSink`` says how).

    >>> from sluice import sinks
    >>> sinks.kafka("totals", key="meter").target
    "Kafka at 127.0.0.1:9092 (topic 'totals')"
    """
    return KafkaSink(topic=topic, bootstrap=bootstrap, key=key, headers=headers, format=format, avro=avro, config=config or ())


def delta(uri: str, mode: str = "append", key=(), partition_by=(), storage_options=None) -> DeltaSink:
    """Rows into the Delta table at ``uri``, exactly once per batch by Delta application
    transactions: appended (``mode="append"``), or MERGEd on ``key`` (``mode="upsert"``).

    >>> from sluice import sinks
    >>> sinks.delta("/data/totals", mode="upsert", key="meter").target
    "Delta table '/data/totals' (upsert by ['meter'])"
    """
    return DeltaSink(
        uri=str(uri),
        mode=mode,
        key=key,
        partition_by=partition_by,
        storage_options=tuple(sorted((storage_options or {}).items())),
    )


def iceberg(catalog, table: str, warehouse: str | None = None, key=(), catalog_name: str = "sluice") -> IcebergSink:
    """Rows into the Iceberg ``table`` ("namespace.name") of ``catalog`` (a SQL catalog URL,
    with ``warehouse``, or pyiceberg catalog properties), once per batch by the job and batch
    id recorded in each snapshot; appended, or upserted on ``key``.

    >>> from sluice import sinks
    >>> sinks.iceberg("sqlite:////tmp/catalog.db", "energy.readings", warehouse="file:///tmp/wh").target
    "Iceberg table 'energy.readings' (catalog sqlite:////tmp/catalog.db)"
    """
    return IcebergSink(catalog=catalog, table=table, warehouse=warehouse, key=key, catalog_name=catalog_name)


__all__ = [
    "CallbackSink",
    "ConsoleSink",
    "DeltaSink",
    "FileSink",
    "IcebergSink",
    "KafkaSink",
    "MemorySink",
    "NatsAuth",
    "NatsSink",
    "PostgresSink",
    "RedisSink",
    "SinkSpec",
    "callback",
    "console",
    "delta",
    "files",
    "iceberg",
    "kafka",
    "memory",
    "memory_table",
    "nats",
    "postgres",
    "read_files",
    "read_latest",
    "redis",
]
