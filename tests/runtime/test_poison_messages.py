"""Messages that would slip through as rows of NULLs or as mangled text become dead letters,
kept byte for byte (real Redis and NATS on loopback)."""

from __future__ import annotations

import base64
import json

import pyarrow as pa
import pytest

import sluice
from connector_services import REDIS_URL, nats_delete, nats_publish, nats_stream, redis_client, require, unique
from sluice import sinks, sources
from sluice.runtime.connectors.reader import Span, dead_letter_message, screen
from sluice.runtime.sinks import clear_memory, memory_table

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string()), ("v", pa.float64())])
BINARY = b"\xff\xfe\x00caf\xe9"  # Latin-1 bytes, not UTF-8


def _read(spec, tmp_path, rows: int):
    """What the source's reader makes of the first ``rows`` messages: (rows, rejects)."""
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from sluice.runtime.sources.datasource import reader_type, stream_schema

    reader = reader_type(spec)(spec, "src", str(tmp_path), from_arrow_schema(stream_schema(spec)), 1)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(rows))
    span = Span(start["position"], end["position"], end["rows"] - start["rows"], 0)
    parsed, ingest, positions, payloads = reader.fetch(span)
    parsed, ingest = screen(parsed, ingest, spec.required)
    assert len(ingest) == parsed.table.num_rows
    return parsed.table.to_pylist(), {i: (reason, dead_letter_message(payloads[i])) for i, reason in parsed.rejects}


def test_redis_entries_without_fields_or_with_bytes_that_are_not_text_are_dead_letters(tmp_path):
    require("Redis")
    key = unique("poison")
    r = redis_client()
    try:
        r.xadd(key, {"id": "1", "name": "ok", "v": "1.5"})
        r.xadd(key, {"other": "x"})  # none of the declared fields
        r.xadd(key, {"name": "no id", "v": "2"})  # lacks the required id
        r.xadd(key, {"id": "4", "name": BINARY, "v": "3"})  # not UTF-8: never replaced silently
        r.xadd(key, {"id": "5", "v": "4"})  # name is nullable: a row with a null
        spec = sources.redis(key, SCHEMA, url=REDIS_URL)
        rows, rejects = _read(spec, tmp_path, 10)
        assert rows == [{"id": 1, "name": "ok", "v": 1.5}, {"id": 5, "name": None, "v": 4.0}]
        assert sorted(rejects) == [1, 2, 3]
        assert "none of the declared fields" in rejects[1][0]
        assert "required" in rejects[2][0] and "id" in rejects[2][0]
        assert "not UTF-8" in rejects[3][0]
        # the dead letter keeps the entry losslessly: the bad value as base64
        pairs = json.loads(rejects[3][1])
        assert ["id", "4"] in pairs and ["name", {"base64": base64.b64encode(BINARY).decode()}] in pairs
    finally:
        r.delete(key)


def test_an_empty_json_object_and_a_binary_message_are_dead_letters(tmp_path):
    require("NATS")
    stream = unique("poison")
    nats_stream(stream)
    try:
        nats_publish(stream, [b'{"id": 1, "name": "ok", "v": 1}', b"{}", b'{"name": "x"}', BINARY, b'{"id": 2, "v": null}'])
        rows, rejects = _read(sources.nats(stream, SCHEMA), tmp_path, 10)
        assert rows == [{"id": 1, "name": "ok", "v": 1.0}, {"id": 2, "name": None, "v": None}]
        assert sorted(rejects) == [1, 2, 3]
        assert rejects[1][1] == "{}" and "none of the declared fields" in rejects[1][0]
        assert rejects[3][1] == {"payload_base64": base64.b64encode(BINARY).decode()}
    finally:
        nats_delete(stream)


@pytest.mark.spark
def test_poison_redis_entries_reach_the_dead_letter_sink_and_good_ones_the_output(spark, tmp_path):
    require("Redis")
    key = unique("poison_job")
    r = redis_client()
    try:
        for i in range(20):
            r.xadd(key, {"id": str(i), "name": f"n{i}", "v": str(i / 2)})
        r.xadd(key, {"": ""})  # what an empty row looks like in a stream
        r.xadd(key, {"id": "99", "name": BINARY, "v": "1"})
        clear_memory()
        p = sluice.Pipeline("poison_redis")
        p.source(sources.redis(key, SCHEMA, url=REDIS_URL), name="entries").sink(sinks.memory("poison_out"))
        p.dead_letter(sinks.memory("poison_dead"))

        def letters_in() -> int:
            table = memory_table("poison_dead")
            return 0 if table is None else table.num_rows

        p.run(str(tmp_path / "ckpt"), spark=spark, stop_when=lambda _: letters_in() >= 2, duration=120)
        assert sorted(row["id"] for row in memory_table("poison_out").to_pylist()) == list(range(20))
        letters = memory_table("poison_dead").to_pylist()
        assert len(letters) == 2
        binary = next(x for x in letters if "UTF-8" in x["error"])
        assert ["name", {"base64": base64.b64encode(BINARY).decode()}] in json.loads(json.loads(binary["record"]))
    finally:
        r.delete(key)


def test_a_postgres_value_of_the_wrong_type_is_a_dead_letter_and_bytea_reads_as_bytes(tmp_path):
    """A value that does not read as its declared type used to fail the task on every
    restart; now its row is a dead letter. ``bytea`` comes back as the bytes, not hex text."""
    require("PostgreSQL")
    from connector_services import PG_DSN, pg

    table = unique("poison_pg")
    pg(f"CREATE TABLE {table} (id bigint, v text, b bytea)")
    try:
        pg(
            f"INSERT INTO {table} VALUES (1, '1.5', '\\x00ff10'::bytea), (2, 'not a number', NULL), "
            f"(3, '2.5', ''::bytea), (4, NULL, '\\xdeadbeef'::bytea), (5, '1e999x', '\\x41'::bytea)"
        )
        schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.float64()), ("b", pa.binary())])
        spec = sources.PostgresTableSource(PG_DSN, table, "id", schema)
        rows, rejects = _read(spec, tmp_path, 10)
        assert rows == [
            {"id": 1, "v": 1.5, "b": b"\x00\xff\x10"},
            {"id": 3, "v": 2.5, "b": b""},
            {"id": 4, "v": None, "b": b"\xde\xad\xbe\xef"},
        ]
        assert sorted(rejects) == [1, 4]
        assert "declared type" in rejects[1][0]
        assert json.loads(rejects[1][1]) == {"id": "2", "v": "not a number", "b": None}
        # all good: one typed read, bytea as bytes
        pg(f"DELETE FROM {table} WHERE id IN (2, 5)")
        rows, rejects = _read(spec, tmp_path / "again", 10)
        assert rejects == {} and [r["b"] for r in rows] == [b"\x00\xff\x10", b"", b"\xde\xad\xbe\xef"]
    finally:
        pg(f"DROP TABLE IF EXISTS {table}")


def test_a_large_batch_is_read_by_several_tasks_each_its_own_slice(tmp_path, monkeypatch):
    """A connector batch is not read whole by one task: JetStream sequence ranges are cut
    into one slice per task, and together the slices read every message once, in order."""
    require("NATS")
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from sluice.runtime.connectors import reader as reader_module
    from sluice.runtime.sources.datasource import reader_type, stream_schema

    monkeypatch.setattr(reader_module, "MIN_SPLIT_ROWS", 100)
    stream = unique("split")
    nats_stream(stream)
    try:
        nats_publish(stream, [json.dumps({"id": i, "name": "x", "v": i / 2}).encode() for i in range(1000)])
        spec = sources.nats(stream, SCHEMA)
        reader = reader_type(spec)(spec, "src", str(tmp_path), from_arrow_schema(stream_schema(spec)), 4)
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadMaxRows(10_000))
        spans = reader.partitions(start, end)
        assert len(spans) == 4 and [s.part for s in spans] == [0, 1, 2, 3]
        ids = []
        for span in spans:
            parsed = reader.fetch(span)[0]
            assert 0 < parsed.table.num_rows < 1000
            ids += parsed.table.column("id").to_pylist()
        assert ids == list(range(1000))
        one = reader_type(spec)(spec, "src", str(tmp_path), from_arrow_schema(stream_schema(spec)), 1)
        assert len(one.partitions(start, end)) == 1  # one task: one span
    finally:
        nats_delete(stream)


@pytest.mark.parametrize("kind", ["nats", "redis"])
def test_a_batch_of_large_messages_is_bounded_by_bytes_as_well_as_rows(tmp_path, kind):
    """Messages of 20 KB with a 200 KB byte limit: a batch admits about 10, not the 1,000 its
    row limit allows."""
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from sluice.runtime.sources.datasource import reader_type, stream_schema

    big = "x" * 20_000
    name = unique("bytes")
    if kind == "nats":
        require("NATS")
        nats_stream(name)
        nats_publish(name, [json.dumps({"id": i, "name": big, "v": 1}).encode() for i in range(200)])
        spec = sources.nats(name, SCHEMA, max_rows_per_batch=1000, max_bytes_per_batch=200_000)
    else:
        require("Redis")
        r = redis_client()
        for i in range(200):
            r.xadd(name, {"id": str(i), "name": big, "v": "1"})
        spec = sources.redis(name, SCHEMA, url=REDIS_URL, max_rows_per_batch=1000, max_bytes_per_batch=200_000)
    try:
        reader = reader_type(spec)(spec, "src", str(tmp_path), from_arrow_schema(stream_schema(spec)), 1)
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadMaxRows(1 << 62))
        assert 5 <= end["rows"] - start["rows"] <= 10
    finally:
        if kind == "nats":
            nats_delete(name)
        else:
            r.delete(name)


def test_max_bytes_per_batch_is_checked():
    from sluice.errors import SourceError

    for bad in (0, -1, 1.5, True):
        with pytest.raises(SourceError, match="max_bytes_per_batch"):
            sources.nats("s", SCHEMA, max_bytes_per_batch=bad)
    assert sources.nats("s", SCHEMA).max_bytes_per_batch == 256 << 20
    assert sources.nats("s", SCHEMA, max_bytes_per_batch=None).max_bytes_per_batch is None


def test_a_redis_sink_upserts_a_large_batch_in_several_transactions(tmp_path, monkeypatch):
    """Hashes upserted by key go in transactions of UPSERT_CHUNK rows (the batch id with the
    last), not one MULTI/EXEC for the whole batch; a replay changes nothing."""
    require("Redis")
    from sluice.runtime import connectors
    from sluice.runtime.connectors import redis_streams

    monkeypatch.setattr(redis_streams, "UPSERT_CHUNK", 1000)
    r = redis_client()
    prefix = unique("chunks")
    table = pa.table({"k": [f"k{i}" for i in range(4500)], "n": list(range(4500))})
    spec = sinks.redis(prefix, key="k", url=REDIS_URL)

    def execs() -> int:
        return int(r.info("commandstats").get("cmdstat_exec", {}).get("calls", 0))

    try:
        before = execs()
        connectors.write(spec, table, 7, str(tmp_path / "ckpt"))
        assert execs() - before >= 5  # 4,500 rows in transactions of 1,000 (other clients may add more)
        assert len(r.keys(f"{prefix}:*")) == 4500 and r.hgetall(f"{prefix}:k4499")[b"n"] == b"4499"
        marker = r.hgetall(f"sluice:batches:{prefix}")
        assert list(marker.values()) == [b"7"]
        connectors.write(spec, table.slice(0, 10), 7, str(tmp_path / "ckpt"))  # a replay: skipped
        assert r.hgetall(f"{prefix}:k0")[b"n"] == b"0"
    finally:
        keys = r.keys(f"{prefix}:*")
        for i in range(0, len(keys), 1000):
            r.delete(*keys[i : i + 1000])
        r.delete(f"sluice:batches:{prefix}")
