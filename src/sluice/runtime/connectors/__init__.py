"""Connectors on Spark: stream readers for broker and database sources, and writers for sinks.

- ``reader_type(spec)``: the Python data source reader of a connector source
  (``sluice.runtime.sources.datasource`` picks it like the built-in readers).
- ``write(spec, table, batch_id, checkpoint)``: one batch into a broker or database,
  idempotently for (job, batch id); the job is the Spark query id of the checkpoint, so a new
  checkpoint writing to the same target starts afresh while a restarted one skips what it
  wrote.
"""

from __future__ import annotations

import importlib
import json
import threading
import time
from typing import Any, TypeGuard

import pyarrow as pa

from sluice.errors import SinkError
from sluice.graph.connectors import (
    CONNECTOR_SINKS,
    ConnectorSink,
    MqttSource,
    NatsSink,
    NatsSource,
    PostgresSink,
    PostgresTableSource,
    RedisSink,
    RedisStreamSource,
)
from sluice.graph.kafka import KafkaSink, KafkaSource
from sluice.graph.sinks import SinkSpec
from sluice.runtime.checkpoint import SPARK, Checkpoint

# modules of each connector, imported when first used (the readers import pyspark, which a
# user of sluice.sinks need not load)
_READERS = {
    NatsSource: ("nats", "NatsStreamReader"),
    RedisStreamSource: ("redis_streams", "RedisStreamReader"),
    MqttSource: ("mqtt", "MqttStreamReader"),
    PostgresTableSource: ("postgres", "PostgresTableReader"),
    KafkaSource: ("kafka", "KafkaStreamReader"),
}
_WRITER_TYPES = {PostgresSink: ("postgres", "PostgresWriter"), RedisSink: ("redis_streams", "RedisWriter"),
                 NatsSink: ("nats", "NatsWriter"), KafkaSink: ("kafka", "KafkaWriter")}
_WRITERS: dict[SinkSpec, Any] = {}
_LOCK = threading.Lock()


def _load(where: tuple[str, str]):
    module, name = where
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def reader_type(spec) -> type | None:
    """The stream reader class of a connector source spec (None for other specs)."""
    where = _READERS.get(type(spec))
    return _load(where) if where else None


def is_connector_sink(spec: SinkSpec) -> TypeGuard[ConnectorSink | KafkaSink]:
    return isinstance(spec, (*CONNECTOR_SINKS, KafkaSink))


def job_id(checkpoint: str | Checkpoint) -> str:
    """The id Spark gave the query of ``checkpoint`` (kept across restarts, new for a new
    checkpoint); the checkpoint's location itself before Spark has written it."""
    checkpoint = Checkpoint.of(checkpoint)
    data = checkpoint.read_bytes(f"{SPARK}/metadata")
    if data:
        try:
            return json.loads(data.decode().splitlines()[0])["id"]
        except (ValueError, KeyError, IndexError):
            pass
    return checkpoint.uri


def write(spec: ConnectorSink | KafkaSink, table: pa.Table, batch_id: int, checkpoint: str | Checkpoint) -> None:
    """Write ``table`` (user columns) to a connector sink for ``batch_id``; connections are
    kept per sink for the next batch. While the server is unreachable the write is retried
    (it is idempotent), for at most ``spec.patience_s``."""
    with _LOCK:
        writer = _WRITERS.get(spec)
        if writer is None:
            writer = _WRITERS[spec] = _load(_WRITER_TYPES[type(spec)])(spec)
    from sluice.runtime.connectors import reader

    job = job_id(checkpoint)
    deadline = time.monotonic() + spec.patience_s
    while True:
        try:
            return writer.write(table, batch_id, job)
        except reader.BrokerDown as e:
            if time.monotonic() > deadline:
                raise SinkError(f"sink {spec.target} has been unreachable for {spec.patience_s:g} s: {e}") from None
            time.sleep(reader.RETRY_S)
