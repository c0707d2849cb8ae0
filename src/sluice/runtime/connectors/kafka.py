"""Kafka on confluent-kafka: a source read by offset ranges and a transactional sink.

Source. The offset Spark logs for a batch is ``{"next": {"<topic>:<partition>": offset},
"from": {...}}``: the next offset of every topic-partition after the batch, and the first
offset of partitions whose range does not start where the previous batch ended (a partition
seen for the first time, or one whose old records retention deleted). A batch reads, in
each partition, the records in [previous next (or "from"), next): a replay reads the same
records. Planning asks the broker for the partitions of the topics (so partitions added while
the job runs are found) and their first and last stable offsets (``read_committed``: records
of open or aborted transactions are never admitted), and spreads the admission limit over the
partitions with lag, evenly (water-filling), so no partition falls behind the others while
the limit binds. The backlog is the consumer lag: last stable offset minus next offset, summed
and per partition (``partitions`` in the source's backlog file and Spark's progress). Row
counts are counted in offsets, so a topic written with transactions (whose commit markers
take offsets) shows a few more rows than it has records.

Each partition's range is read by one Spark task (a long range is split so every core
reads): a consumer assigned to the partition at the range's start (``assign`` + seek, no
group membership, no commits) until the range's end. Values are decoded in one pyarrow call
per batch for JSON (``payloads.parse_json``, which bisects to find the undecodable ones),
per record with fastavro for Avro. An undecodable record is a dead letter whose location
names its topic, partition and offset. Ingest time is the record's Kafka timestamp.

Watermarks: Sluice's watermark of a source is the latest event time it has delivered minus
``watermark_delay``, over all its partitions; a partition that is idle therefore never holds
the watermark back. Even admission keeps the partitions with data advancing together, so a
partition's records are not judged late because another partition ran ahead within a batch
limit; records of a partition that is behind by more than ``watermark_delay`` in event time
(e.g. one producer's clock) are late, as on any source.

Sink. One transaction per batch with the records and the batch id (``graph.kafka.KafkaSink``
says how a replay and a kill between producing and committing are handled).
"""

from __future__ import annotations

import contextlib
import io
import json
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import InputPartition

from sluice.errors import SinkError, SourceError
from sluice.graph.kafka import METADATA, KafkaSink, KafkaSource
from sluice.graph.sources import TIMESTAMP
from sluice.runtime.connectors.payloads import Parsed, parse_json, rows_as_json
from sluice.runtime.connectors.reader import (
    INGEST_FIELD,
    BrokerDown,
    ConnectorStreamReader,
    Plan,
    Span,
    dead_letter_message,
    screen,
)
from sluice.runtime.sources.control import BacklogReporter

TIMEOUT_S = 10.0  # one request to the broker, at most (never longer than the spec's patience)
PROBE_AFTER_S = 2.0  # a read that gets nothing this long asks the broker whether it is there
PROBE_TIMEOUT_S = 3.0  # ... and takes no answer in this long for an outage (a retry, not a failure)
CONSUME_BATCH = 10_000  # messages per consume() call
MIN_SPLIT = 20_000  # offsets in the smallest piece a partition's range is split into
PRODUCE_WAIT_S = 0.05  # wait for the producer's queue to drain when it is full


def client_config(bootstrap: str, config: tuple, **settings) -> dict:
    return {"bootstrap.servers": bootstrap, **settings, **dict(config)}


def timeout_s(spec: KafkaSource | KafkaSink) -> float:
    """How long one request may take: a broker that is down is found out within the spec's
    patience, not after a fixed wait."""
    return min(TIMEOUT_S, max(1.0, spec.patience_s / 2))


def _down(where: str, error: Exception) -> BrokerDown:
    return BrokerDown(f"{where}: {type(error).__name__}: {error}")


def fair_share(lag: np.ndarray, cap: int | None) -> np.ndarray:
    """Offsets to admit per partition: all the lag if it fits under ``cap``, else ``cap``
    spread evenly (each partition gets min(lag, level), the level set so the sum is cap)."""
    lag = np.maximum(lag.astype(np.int64), 0)
    if cap is None or lag.sum() <= cap:
        return lag
    ordered = np.sort(lag)
    before = np.concatenate([[0], np.cumsum(ordered)])[:-1]  # lag of the partitions below each
    left = len(lag) - np.arange(len(lag))
    reach = before + left * ordered  # admitted if the level were each sorted lag
    i = int(np.searchsorted(reach, cap, side="left"))
    level = (cap - before[i]) // left[i]
    take = np.minimum(lag, level)
    spare = int(cap - take.sum())  # the remainder of the division: one more each
    more = np.flatnonzero(lag > take)[:spare]
    take[more] += 1
    return take


class KafkaSpan(Span):
    """Offsets [start, end) of one topic-partition (``part`` numbers it within the batch)."""

    def __init__(self, topic: str, partition: int, start: int, end: int, at_us: int, part: int):
        super().__init__(start, end, end - start, at_us, part)
        self.topic, self.partition = topic, partition

    def __repr__(self) -> str:
        return f"KafkaSpan({self.topic}:{self.partition} [{self.start}, {self.end}))"


def _split_key(key: str) -> tuple[str, int]:
    topic, partition = key.rsplit(":", 1)
    return topic, int(partition)


class _Locations(Sequence):
    """Where each message of a span is (its text made only for the few a dead letter
    names), with the messages' keys for the ``key`` metadata column."""

    def __init__(self, topic: str, partition: int, offsets: np.ndarray, keys: list | None):
        self.topic, self.partition, self.offsets, self.keys = topic, partition, offsets, keys

    def __len__(self) -> int:
        return len(self.offsets)

    def __getitem__(self, i):
        return f"topic {self.topic} partition {self.partition} offset {int(self.offsets[i])}"


class _LagReporter(BacklogReporter):
    """The backlog file of every connector, with the lag of each partition."""

    lag: dict[str, int] | None = None

    def report(self, status: dict, planned_batch: bool) -> None:
        super().report({**status, "partitions": None if "error" in status else self.lag}, planned_batch)


_CONSUMERS: dict[tuple, Any] = {}
_CONSUMERS_LOCK = threading.Lock()


def _consumer(spec: KafkaSource):
    """This worker's consumer for ``spec``'s cluster (a Python worker reads one task at a
    time and lives across batches: the connection is kept)."""
    from confluent_kafka import Consumer

    key = (spec.bootstrap, spec.config)
    with _CONSUMERS_LOCK:
        consumer = _CONSUMERS.get(key)
        if consumer is None:
            consumer = _CONSUMERS[key] = Consumer(
                client_config(
                    spec.bootstrap,
                    spec.config,
                    **{
                        "group.id": "sluice-reader",
                        "enable.auto.commit": False,
                        "enable.auto.offset.store": False,
                        "isolation.level": "read_committed",
                        "enable.partition.eof": True,
                        "auto.offset.reset": "earliest",
                        # a range is read to its end and the partition let go: a
                        # fetch that waits for more (500 ms by default) only
                        # delays the next range's first fetch behind it. Its records
                        # are there (offsets planned from the stable end): reading
                        # 200 took 10-12 ms at a 10 ms wait, 1.5-3 ms at 1 ms
                        "fetch.wait.max.ms": 1,
                    },
                )
            )
        return consumer


class KafkaStreamReader(ConnectorStreamReader):
    spec: KafkaSource

    def __init__(self, spec, name: str, control_dir: str, schema, parallelism: int):
        super().__init__(spec, name, control_dir, schema, parallelism)
        self._backlog: _LagReporter = _LagReporter(control_dir, name)

    # --- the broker, from the planning side -------------------------------------------------

    def _admin(self):
        from confluent_kafka.admin import AdminClient

        if getattr(self, "_conn_admin", None) is None:
            self._conn_admin: Any = AdminClient(client_config(self.spec.bootstrap, self.spec.config))
        return self._conn_admin

    def _call(self, work):
        from confluent_kafka import KafkaException

        try:
            return work(self._admin())
        except KafkaException as e:
            self._conn_admin = None
            raise _down(self.spec.bootstrap, e) from None

    def _partitions(self, admin) -> list[tuple[str, int]]:
        topics = admin.list_topics(timeout=timeout_s(self.spec)).topics
        found: list[tuple[str, int]] = []
        for topic in self.spec.topics:
            meta = topics.get(topic)
            if meta is not None and meta.error is None:  # a topic not created yet has no records
                found.extend((topic, p) for p in sorted(meta.partitions))
        return found

    def _offsets(self, admin, partitions: list[tuple[str, int]], which: str) -> np.ndarray:
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        if not partitions:
            return np.zeros(0, np.int64)
        spec = OffsetSpec.latest() if which == "latest" else OffsetSpec.earliest()
        futures = admin.list_offsets(
            {TopicPartition(t, p): spec for t, p in partitions},
            isolation_level=IsolationLevel.READ_COMMITTED,
            request_timeout=timeout_s(self.spec),
        )
        by_key = {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}
        return np.array([by_key[tp] for tp in partitions], np.int64)

    # --- offsets ------------------------------------------------------------------------------

    def first_position(self) -> dict:
        if self.spec.starting_offsets == "latest":

            def now(admin):
                partitions = self._partitions(admin)
                return dict(zip((f"{t}:{p}" for t, p in partitions), self._offsets(admin, partitions, "latest").tolist()))

            return {"next": self.with_patience(lambda: self._call(now)), "from": {}}
        return {"next": {}, "from": {}}

    def plan(self, start: dict, cap: int | None) -> Plan:
        def ask(admin):
            partitions = self._partitions(admin)
            return (partitions, self._offsets(admin, partitions, "earliest"), self._offsets(admin, partitions, "latest"))

        partitions, low, high = self._call(ask)
        known = start["position"]["next"]
        keys = [f"{t}:{p}" for t, p in partitions]
        previous = np.array([known.get(k, -1) for k in keys], np.int64)
        starts = np.maximum(previous, low)  # new partitions from their first record; retention skips ahead
        lag = np.maximum(high - starts, 0)
        take = fair_share(lag, cap)
        ends = starts + take
        moved = np.flatnonzero((starts != previous) & (take > 0))
        position = {"next": {**known, **dict(zip(keys, ends.tolist()))}, "from": {keys[i]: int(starts[i]) for i in moved}}
        self._backlog.lag = dict(zip(keys, (lag - take).tolist()))
        return Plan(position, int(take.sum()), int((lag - take).sum()))

    def reportLatestOffset(self) -> dict | None:
        latest = super().reportLatestOffset()
        return None if latest is None else {**latest, "partitions": self._backlog.lag}

    def partitions(self, start: dict, end: dict) -> list:
        if end["rows"] == start["rows"]:
            return []
        before, after, first = start["position"]["next"], end["position"]["next"], end["position"]["from"]
        ranges = []
        for key in sorted(after):
            begin = first.get(key, before.get(key))
            if begin is not None and after[key] > begin:
                ranges.append((*_split_key(key), begin, after[key]))
        total = sum(e - s for _, _, s, e in ranges)
        # split long ranges so that every core reads, in pieces of at least MIN_SPLIT offsets
        piece = max(MIN_SPLIT, -(-total // self.parallelism))
        spans: list[KafkaSpan] = []
        for topic, partition, s, e in ranges:
            for lo in range(s, e, piece):
                spans.append(KafkaSpan(topic, partition, lo, min(lo + piece, e), end.get("at_us", 0), len(spans)))
        return spans

    # --- reading --------------------------------------------------------------------------------

    def _consume(self, span: KafkaSpan) -> list:
        """The records of the span, in offset order (the consumer's errors become BrokerDown)."""
        from confluent_kafka import KafkaError, KafkaException, TopicPartition

        consumer = _consumer(self.spec)
        got: list = []
        at = span.start
        try:
            consumer.assign([TopicPartition(span.topic, span.partition, span.start)])
            deadline = time.monotonic() + self.spec.patience_s
            quiet_since = time.monotonic()
            while at < span.end:
                messages = consumer.consume(min(CONSUME_BATCH, span.end - at), timeout=1.0)
                records = [m for m in messages if m.error() is None]
                for m in messages:
                    error = m.error()
                    if error is None:
                        continue
                    if error.code() == KafkaError._PARTITION_EOF:
                        # the end of the partition's stable records: the range's last ones were
                        # commit markers or aborted records, which a read_committed consumer skips
                        at = max(at, m.offset())
                    elif error.code() != KafkaError._NO_OFFSET:
                        raise KafkaException(error)
                if records:
                    last = records[-1].offset()
                    if last >= span.end - 1:
                        records = [m for m in records if m.offset() < span.end]
                    got.extend(records)
                    at = max(at, last + 1)
                    deadline = time.monotonic() + self.spec.patience_s
                    quiet_since = time.monotonic()
                elif time.monotonic() - quiet_since > PROBE_AFTER_S:
                    # the consumer stays silent while its broker is away: ask the broker, so
                    # an outage is retried as one (BrokerDown), not taken for missing records
                    consumer.list_topics(span.topic, timeout=min(PROBE_TIMEOUT_S, timeout_s(self.spec)))
                    quiet_since = time.monotonic()
                if not records and time.monotonic() > deadline:
                    raise SourceError(
                        f"source {self.name!r}: {self.spec.broker}: partition {span.topic}:"
                        f"{span.partition} gave nothing at offset {at} for {self.spec.patience_s:g} s "
                        f"(the batch's range ends at {span.end}; were records deleted?)"
                    )
        except KafkaException as e:
            raise _down(self.spec.bootstrap, e) from None
        finally:
            try:
                consumer.unassign()
            except KafkaException:
                _CONSUMERS.pop((self.spec.bootstrap, self.spec.config), None)
        return got

    def fetch(self, span: Span):
        assert isinstance(span, KafkaSpan)  # what partitions() made
        records = self._consume(span)
        values = [m.value() or b"" for m in records]  # a tombstone (no value) decodes as nothing
        offsets = np.array([m.offset() for m in records], np.int64)
        stamps_us = np.array([m.timestamp()[1] for m in records], np.int64) * 1000
        keys = [m.key() for m in records] if "key" in self.spec.metadata else None
        parsed = self._decode(values)
        return parsed, stamps_us[np.asarray(parsed.kept, np.int64)], _Locations(span.topic, span.partition, offsets, keys), values

    def read(self, span: InputPartition) -> Iterator[pa.RecordBatch]:
        """As every connector reads (``ConnectorStreamReader.read``), then the metadata
        columns of the rows kept."""
        assert isinstance(span, KafkaSpan)  # what partitions() made
        parsed, ingest_us, where, payloads = self.with_patience(lambda: self.fetch(span))
        parsed, ingest_us = screen(parsed, ingest_us, self.spec.required)
        if parsed.rejects:
            self._dead_letter(
                span,
                [
                    (f"{self.spec.broker}, message {where[i]}", reason, dead_letter_message(payloads[i]))
                    for i, reason in parsed.rejects
                ],
            )
        table = self._with_metadata(parsed, ingest_us, where)
        table = table.append_column(INGEST_FIELD, pa.array(ingest_us, type=TIMESTAMP))
        yield from table.cast(self.arrow_schema).to_batches()

    def _with_metadata(self, parsed: Parsed, stamps_us: np.ndarray, where: _Locations) -> pa.Table:
        kept = np.asarray(parsed.kept, np.int64)
        table = parsed.table
        for name in self.spec.metadata:
            column: pa.Array
            if name == "key":
                assert where.keys is not None  # fetched when the key is asked for
                column = pa.array([where.keys[i] for i in kept], pa.binary())
            elif name == "topic":
                column = pa.array(np.full(len(kept), where.topic, object), pa.string())
            elif name == "partition":
                column = pa.array(np.full(len(kept), where.partition, np.int32))
            elif name == "offset":
                column = pa.array(where.offsets[kept])
            else:
                column = pa.array(stamps_us, pa.int64()).view(TIMESTAMP)
            table = table.append_column(METADATA[name], column)
        return table

    def _decode(self, values: list[bytes]) -> Parsed:
        schema = self.spec.value_schema
        assert schema is not None  # set by KafkaSource
        if self.spec.format == "json":
            return parse_json(values, schema)
        if self.spec.format == "raw":
            return Parsed(pa.table([pa.array(values, pa.binary())], schema=schema).cast(schema), list(range(len(values))), [])
        return _decode_avro(values, json.loads(self.spec.avro or "null"), schema)


def _decode_avro(values: list[bytes], avro: dict, schema: pa.Schema) -> Parsed:
    """Avro binary values (fastavro decodes one record per call: there is no batch decoder)."""
    import fastavro

    parsed_schema = fastavro.parse_schema(avro)
    rows, kept, rejects = [], [], []
    for i, value in enumerate(values):
        try:
            rows.append(fastavro.schemaless_reader(io.BytesIO(value), parsed_schema, None))
            kept.append(i)
        except Exception as e:  # any decoding failure makes the record a dead letter
            rejects.append((i, f"does not decode as Avro {avro.get('name', 'record')}: {type(e).__name__}: {e}"))
    try:
        table = pa.Table.from_pylist(rows, schema=schema) if rows else schema.empty_table()
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise SourceError(f"Avro records do not fit the declared schema: {e}") from None
    return Parsed(table, kept, rejects)


# --- the sink ---------------------------------------------------------------------------------------


class KafkaWriter:
    """Writes each batch in one transaction with the batch id (see ``graph.kafka.KafkaSink``)."""

    def __init__(self, spec: KafkaSink):
        self.spec = spec
        self.job: str | None = None
        self.producer: Any = None
        self.group: Any = None  # the consumer whose group holds the committed batch id
        self.last_batch = -1

    def _open(self, job: str) -> None:
        """A producer with the job's transactional id (fencing any earlier one, whose open
        transaction Kafka aborts), and the last batch id Kafka committed for the job."""
        from confluent_kafka import Consumer, Producer, TopicPartition

        self.close()
        name = f"sluice.{job}.{self.spec.topic}"
        producer = Producer(
            client_config(
                self.spec.bootstrap,
                self.spec.config,
                **{"transactional.id": name, "linger.ms": 5, "transaction.timeout.ms": 60_000},
            )
        )
        producer.init_transactions(timeout_s(self.spec))
        group = Consumer(
            client_config(
                self.spec.bootstrap,
                self.spec.config,
                **{"group.id": name, "enable.auto.commit": False, "isolation.level": "read_committed"},
            )
        )
        committed = group.committed([TopicPartition(self.spec.topic, 0)], timeout=timeout_s(self.spec))[0].offset
        self.producer, self.group, self.job = producer, group, job
        self.last_batch = committed - 1 if committed >= 0 else -1

    def close(self) -> None:
        if self.group is not None:
            self.group.close()
        self.producer = self.group = self.job = None

    def write(self, table: pa.Table, batch_id: int, job: str) -> None:
        from confluent_kafka import KafkaException

        try:
            if self.job != job:
                self._open(job)
            if batch_id <= self.last_batch or table.num_rows == 0:
                return  # written before a crash (committed by Kafka, not yet by Spark), or nothing
            self._transaction(table, batch_id)
        except KafkaException as e:
            error = e.args[0]
            producer, self.producer = self.producer, None
            self.close()  # the next try starts afresh: a new producer fences this one
            if error.fatal() and "fenc" in str(error).lower():
                raise SinkError(
                    f"sink {self.spec.target}: another writer with the same transactional id "
                    f"took over (is the job running twice?): {error}"
                ) from None
            if producer is not None and error.txn_requires_abort():
                with contextlib.suppress(KafkaException):  # else the next init_transactions aborts it
                    producer.abort_transaction(TIMEOUT_S)
            raise _down(self.spec.target, e) from None

    def _transaction(self, table: pa.Table, batch_id: int) -> None:
        from confluent_kafka import TopicPartition

        values = self._values(table)
        keys = self._keys(table)
        headers = self._headers(table)
        producer, topic = self.producer, self.spec.topic
        producer.begin_transaction()
        for i, value in enumerate(values):  # the client takes records one by one
            while True:
                try:
                    producer.produce(topic, value, keys[i] if keys else None, headers=headers[i] if headers else None)
                    break
                except BufferError:  # the queue is full: let the client send some
                    producer.poll(PRODUCE_WAIT_S)
        producer.send_offsets_to_transaction(
            [TopicPartition(topic, 0, batch_id + 1)], self.group.consumer_group_metadata(), TIMEOUT_S
        )
        producer.commit_transaction(TIMEOUT_S)
        self.last_batch = batch_id

    def _values(self, table: pa.Table) -> list[bytes]:
        if self.spec.format == "json":
            return rows_as_json(table)
        import fastavro

        from sluice.graph.kafka import avro_schema

        schema = fastavro.parse_schema(json.loads(self.spec.avro) if self.spec.avro else avro_schema(table.schema))
        out = []
        for row in table.to_pylist():  # fastavro encodes one record per call
            buffer = io.BytesIO()
            fastavro.schemaless_writer(buffer, schema, row)
            out.append(buffer.getvalue())
        return out

    def _text(self, table: pa.Table, column: str) -> list:
        if column not in table.column_names:
            raise SinkError(f"sink {self.spec.target}: no column {column!r} among {table.column_names}")
        values = table.column(column)
        if pa.types.is_boolean(values.type):
            values = pc.if_else(values, "true", "false")
        return values.cast(pa.string()).to_pylist()

    def _keys(self, table: pa.Table) -> list | None:
        if not self.spec.key:
            return None
        if len(self.spec.key) == 1:
            return self._text(table, self.spec.key[0])
        return [json.dumps(list(k)) for k in zip(*(table.column(c).to_pylist() for c in self.spec.key))]

    def _headers(self, table: pa.Table) -> list | None:
        if not self.spec.headers:
            return None
        columns = [(name, self._text(table, column)) for name, column in self.spec.headers]
        return [[(name, values[i]) for name, values in columns if values[i] is not None] for i in range(table.num_rows)]
