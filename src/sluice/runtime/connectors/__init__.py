"""Connectors on Spark: stream readers for broker and database sources, and writers for sinks.

- ``READERS``: source spec type -> the Python data source reader that reads it
  (``sluice.runtime.sources.datasource`` picks it like the built-in readers).
- ``write(spec, table, batch_id, checkpoint)``: one batch into a broker or database,
  idempotently for (job, batch id); the job is the Spark query id of the checkpoint, so a new
  checkpoint writing to the same target starts afresh while a restarted one skips what it
  wrote.
"""

from __future__ import annotations

import json
import threading
import time

import pyarrow as pa

from sluice.graph.connectors import (
    CONNECTOR_SINKS,
    MqttSource,
    NatsSink,
    NatsSource,
    PostgresSink,
    PostgresTableSource,
    RedisSink,
    RedisStreamSource,
)
from sluice.errors import SinkError
from sluice.graph.sinks import SinkSpec
from sluice.runtime.connectors.mqtt import MqttStreamReader
from sluice.runtime.connectors.nats import NatsStreamReader, NatsWriter
from sluice.runtime.connectors.postgres import PostgresTableReader, PostgresWriter
from sluice.runtime.connectors.reader import RETRY_S, BrokerDown
from sluice.runtime.connectors.redis_streams import RedisStreamReader, RedisWriter
from sluice.runtime.checkpoint import SPARK, Checkpoint

READERS = {
    NatsSource: NatsStreamReader,
    RedisStreamSource: RedisStreamReader,
    MqttSource: MqttStreamReader,
    PostgresTableSource: PostgresTableReader,
}

_WRITER_TYPES = {PostgresSink: PostgresWriter, RedisSink: RedisWriter, NatsSink: NatsWriter}
_WRITERS: dict[SinkSpec, object] = {}
_LOCK = threading.Lock()


def is_connector_sink(spec: SinkSpec) -> bool:
    return isinstance(spec, CONNECTOR_SINKS)


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


def write(spec: SinkSpec, table: pa.Table, batch_id: int, checkpoint: str | Checkpoint) -> None:
    """Write ``table`` (user columns) to a connector sink for ``batch_id``; connections are
    kept per sink for the next batch. While the server is unreachable the write is retried
    (it is idempotent), for at most ``spec.patience_s``."""
    with _LOCK:
        writer = _WRITERS.get(spec)
        if writer is None:
            writer = _WRITERS[spec] = _WRITER_TYPES[type(spec)](spec)
    job = job_id(checkpoint)
    deadline = time.monotonic() + spec.patience_s
    while True:
        try:
            return writer.write(table, batch_id, job)
        except BrokerDown as e:
            if time.monotonic() > deadline:
                raise SinkError(f"sink {spec.target} has been unreachable for {spec.patience_s:g} s: {e}") from None
            time.sleep(RETRY_S)
