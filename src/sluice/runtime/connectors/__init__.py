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
import sys
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
from sluice.graph.lakehouse import LAKEHOUSE_SINKS, DeltaSink, DeltaSource, IcebergSink
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
    DeltaSource: ("delta", "DeltaStreamReader"),
}
_WRITER_TYPES = {
    PostgresSink: ("postgres", "PostgresWriter"),
    RedisSink: ("redis_streams", "RedisWriter"),
    NatsSink: ("nats", "NatsWriter"),
    KafkaSink: ("kafka", "KafkaWriter"),
    DeltaSink: ("delta", "DeltaWriter"),
    IcebergSink: ("iceberg", "IcebergWriter"),
}
_WRITERS: dict[SinkSpec, Any] = {}
_LOCK = threading.Lock()


def _load(where: tuple[str, str]):
    module, name = where
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def reader_type(spec) -> type | None:
    """The stream reader class of a connector source spec (None for other specs)."""
    where = _READERS.get(type(spec))
    return _load(where) if where else None


def is_connector_sink(spec: SinkSpec) -> TypeGuard[ConnectorSink | KafkaSink | DeltaSink | IcebergSink]:
    return isinstance(spec, (*CONNECTOR_SINKS, KafkaSink, *LAKEHOUSE_SINKS))


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


def write(
    spec: ConnectorSink | KafkaSink | DeltaSink | IcebergSink, table: pa.Table, batch_id: int, checkpoint: str | Checkpoint
) -> None:
    """Write ``table`` (user columns) to a connector sink for ``batch_id``; connections are
    kept per sink for the next batch. While the server is unreachable the write is retried
    (it is idempotent), for at most ``spec.patience_s``. Rows a writer could not store
    (lakehouse sinks: a value the table's column type cannot hold) go to the batch's dead
    letters with the writer's reason."""
    with _LOCK:
        writer = _WRITERS.get(spec)
        if writer is None:
            writer = _WRITERS[spec] = _load(_WRITER_TYPES[type(spec)])(spec)
    from sluice.runtime.connectors import reader

    job = job_id(checkpoint)
    began = time.monotonic()
    said = None  # when the last waiting line was printed (None: none yet)
    while True:
        try:
            rejects = writer.write(table, batch_id, job)
            break
        except reader.BrokerDown as e:
            down = time.monotonic() - began
            if down > spec.patience_s:
                raise SinkError(f"sink {spec.target} has been unreachable for {spec.patience_s:g} s: {e}") from None
            if said is None or down - said >= reader.WAIT_LINE_EVERY_S:
                # the job is not stuck: it waits for the server, and says so (as a source does)
                said = down
                print(
                    f"sluice: waiting for {spec.target} ({down:.0f} s of {spec.patience_s:g}): {e}", file=sys.stderr, flush=True
                )
            time.sleep(reader.RETRY_S)
    if said is not None:
        print(f"sluice: sink {spec.target} reached its server again", file=sys.stderr, flush=True)
    if rejects:
        _dead_letters(spec, table, rejects, batch_id, checkpoint)


def _dead_letters(spec, table: pa.Table, rejects: list[tuple[int, str]], batch_id: int, checkpoint: str | Checkpoint) -> None:
    """The rows a sink could not store, as dead letters of the batch (one file per sink,
    replaced when the batch is replayed)."""
    import zlib

    from sluice.runtime.side_outputs import DEAD_LETTER, SideOutputWriter

    stage = f"sink-{spec.kind}-{zlib.crc32(spec.target.encode()):08x}"
    writer = SideOutputWriter(checkpoint, DEAD_LETTER, batch_id, stage, 0)
    rows = table.take([row for row, _ in rejects]).to_pylist()
    for (row, reason), record in zip(rejects, rows):
        writer.dead(f"sink {spec.target}", record, reason, f"{spec.target}, batch {batch_id} row {row}")
    writer.flush()
