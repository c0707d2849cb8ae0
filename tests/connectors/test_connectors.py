"""Connector sources and sinks against the real services on loopback (see connector_services):
what each source reads (exactly the input, in broker order, within the admission limit),
what it does with a message that does not fit the schema (a dead letter with its reason),
what a sink writes and that writing a batch again changes nothing, and the errors that name
a broker that is down."""

from __future__ import annotations

import json
import time

import paho.mqtt.client as mqtt
import pyarrow as pa
import pytest
from tests.connector_services import (
    MQTT_HOST,
    MQTT_PORT,
    NATS_URL,
    PG_DSN,
    REDIS_URL,
    free_port,
    nats_delete,
    nats_messages,
    nats_publish,
    nats_stream,
    pg,
    redis_client,
    require,
    unique,
)

import sluice
from sluice import agg, sinks, sources
from sluice.errors import SinkError, SluiceError
from sluice.graph.connectors import NatsSink, PostgresSink, RedisSink
from sluice.runtime import connectors
from sluice.runtime.sinks import clear_memory, memory_batches, memory_table
from sluice.runtime.sources import read_backlog

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("v", pa.float64())])
BAD = [b"not json at all", b'{"id": "seven", "name": "x", "v": 1.0}']


def record(i: int) -> dict:
    return {"id": i, "name": f"n{i}", "v": i / 4}


def run_until_rows(p: sluice.Pipeline, checkpoint: str, spark, sink: str, rows: int, timeout: float = 180):
    """Run until the memory sink ``sink`` holds ``rows`` rows (or ``timeout`` s)."""

    def enough(_):
        table = memory_table(sink)
        return table is not None and table.num_rows >= rows

    return p.run(checkpoint, spark=spark, duration=timeout, stop_when=enough)


def check_read(sink: str, dead: str, n: int, cap: int) -> None:
    """The sink got records 0..n-1 exactly once, no batch above ``cap`` rows, and the two BAD
    messages went to the dead letters with their reasons."""
    batches = memory_batches(sink)
    got = memory_table(sink)
    assert sorted(got["id"].to_pylist()) == list(range(n))
    assert got.sort_by("id").to_pylist() == [record(i) for i in range(n)]
    assert max(t.num_rows for t in batches.values()) <= cap
    assert len(batches) >= -(-n // cap)
    letters = memory_table(dead).to_pylist()
    assert sorted(r["record"] for r in letters) == sorted(json.dumps(b.decode()) for b in BAD)
    assert all("does not parse as {id: int64, name: string, v: double}" in r["error"] for r in letters)


# --- sources ----------------------------------------------------------------------------------------


def test_nats_source_reads_the_stream_in_sequence_order_within_the_admission_limit(spark, tmp_path):
    require("NATS")
    stream = unique("src")
    nats_stream(stream)
    try:
        n = 250
        payloads = [json.dumps(record(i)).encode() for i in range(n)]
        nats_publish(stream, payloads[:100] + [BAD[0]] + payloads[100:] + [BAD[1]])
        clear_memory()
        p = sluice.Pipeline("nats_src")
        p.source(sources.nats(stream, SCHEMA, max_rows_per_batch=60), name="orders").sink(sinks.memory("nats_out"))
        p.dead_letter(sinks.memory("nats_dead"))
        checkpoint = str(tmp_path / "ckpt")
        run_until_rows(p, checkpoint, spark, "nats_out", n)
        check_read("nats_out", "nats_dead", n, 60)
        letters = memory_table("nats_dead").to_pylist()
        assert {r["location"].rsplit(" ", 1)[1] for r in letters} == {"101", str(n + 2)}  # sequence numbers
        status = read_backlog(f"{checkpoint}/sources", "orders")
        assert status["planned_rows"] == n + 2 and status["backlog"] == 0

        # more messages later: the same checkpoint reads only those
        nats_publish(stream, [json.dumps(record(i)).encode() for i in range(n, n + 40)])
        clear_memory("nats_out")
        run_until_rows(p, checkpoint, spark, "nats_out", 40)
        assert sorted(memory_table("nats_out")["id"].to_pylist()) == list(range(n, n + 40))
    finally:
        nats_delete(stream)


def test_redis_stream_source_reads_entries_after_the_committed_id(spark, tmp_path):
    require("Redis")
    key = unique("src")
    r = redis_client()
    try:
        n = 230
        rows = [{k: str(v) for k, v in record(i).items()} for i in range(n)]
        for i, row in enumerate(rows):
            r.xadd(key, row)
            if i == 50:
                r.xadd(key, {"id": "x1", "name": "bad", "v": "1"})
        r.xadd(key, {"id": "7", "name": "bad", "v": "not a number"})
        clear_memory()
        p = sluice.Pipeline("redis_src")
        p.source(sources.redis(key, SCHEMA, url=REDIS_URL, max_rows_per_batch=70), name="entries").sink(sinks.memory("redis_out"))
        p.dead_letter(sinks.memory("redis_dead"))
        checkpoint = str(tmp_path / "ckpt")
        run_until_rows(p, checkpoint, spark, "redis_out", n)
        got = memory_table("redis_out")
        assert got.sort_by("id").to_pylist() == [record(i) for i in range(n)]
        assert max(t.num_rows for t in memory_batches("redis_out").values()) <= 70
        letters = memory_table("redis_dead").to_pylist()
        assert len(letters) == 2
        assert all("does not parse as" in x["error"] for x in letters)
        assert {x["location"].split("message id ")[1] for x in letters} <= {e[0].decode() for e in r.xrange(key)}
        assert read_backlog(f"{checkpoint}/sources", "entries")["backlog"] == 0

        r.xadd(key, {"id": "999", "name": "late", "v": "0.5"})
        clear_memory("redis_out")
        run_until_rows(p, checkpoint, spark, "redis_out", 1)
        assert memory_table("redis_out").to_pylist() == [{"id": 999, "name": "late", "v": 0.5}]
    finally:
        r.delete(key)


def test_postgres_table_source_reads_rows_by_a_growing_column(spark, tmp_path):
    require("PostgreSQL")
    table = unique("src")
    pg(f"CREATE TABLE {table} (id bigserial PRIMARY KEY, name text, v double precision, at timestamptz, ok boolean)")
    try:
        pg(
            f"INSERT INTO {table} (name, v, at, ok) SELECT 'n' || g, g / 4.0, "
            f"timestamptz '2026-01-01 00:00:00+00' + g * interval '1 second', g % 2 = 0 "
            f"FROM generate_series(1, 300) g"
        )
        pg(f"INSERT INTO {table} (name, v, at, ok) VALUES (NULL, NULL, NULL, NULL), ('', 0, NULL, true)")
        spec = sources.postgres(PG_DSN, table, "id", max_rows_per_batch=120)
        assert spec.schema().names == ["id", "name", "v", "at", "ok"]
        clear_memory()
        p = sluice.Pipeline("pg_src")
        p.source(spec, name="rows").sink(sinks.memory("pg_out"))
        checkpoint = str(tmp_path / "ckpt")
        run_until_rows(p, checkpoint, spark, "pg_out", 302)
        got = memory_table("pg_out").sort_by("id").to_pylist()
        want = [
            {"id": i, "name": n, "v": v, "at": at, "ok": ok}
            for i, n, v, at, ok in pg(f"SELECT id, name, v, at, ok FROM {table} ORDER BY id")
        ]
        assert got == want
        assert got[-2]["name"] is None and got[-1]["name"] == ""  # NULL and '' stay apart
        assert max(t.num_rows for t in memory_batches("pg_out").values()) <= 120

        pg(f"INSERT INTO {table} (name, v) VALUES ('later', 1.5)")
        clear_memory("pg_out")
        run_until_rows(p, checkpoint, spark, "pg_out", 1)
        assert [r["name"] for r in memory_table("pg_out").to_pylist()] == ["later"]
    finally:
        pg(f"DROP TABLE IF EXISTS {table}")


def _mqtt_publish(topic: str, payloads: list[bytes]) -> None:
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    client.connect(MQTT_HOST, MQTT_PORT)
    client.loop_start()
    infos = [client.publish(topic, p, qos=1) for p in payloads]
    for info in infos:
        info.wait_for_publish(10)
    client.loop_stop()
    client.disconnect()


def test_mqtt_source_keeps_messages_published_while_the_pipeline_is_down(spark, tmp_path):
    """The guarantee of the MQTT source: a persistent QoS 1 session keeps what is published
    while no pipeline runs, and every journaled message is processed once."""
    require("Mosquitto")
    topic, client_id = unique("sensors"), unique("sluice")
    clear_memory()
    p = sluice.Pipeline("mqtt_src")
    p.source(sources.mqtt(f"{topic}/#", SCHEMA, client_id=client_id, max_rows_per_batch=50), name="mq").sink(
        sinks.memory("mqtt_out")
    )
    p.dead_letter(sinks.memory("mqtt_dead"))
    checkpoint = str(tmp_path / "ckpt")

    # the first run opens the session; messages published while it runs are read
    def publish_when_subscribed(_):
        status = read_backlog(f"{checkpoint}/sources", "mq")
        if status is not None and not getattr(publish_when_subscribed, "done", False):
            time.sleep(1.0)  # the session's subscription is made right after its connection
            _mqtt_publish(f"{topic}/a", [json.dumps(record(i)).encode() for i in range(120)] + [BAD[0]])
            publish_when_subscribed.done = True
        table = memory_table("mqtt_out")
        return table is not None and table.num_rows >= 120

    p.run(checkpoint, spark=spark, duration=180, stop_when=publish_when_subscribed)
    assert sorted(memory_table("mqtt_out")["id"].to_pylist()) == list(range(120))

    # published while no pipeline runs: the broker keeps them for the session
    _mqtt_publish(f"{topic}/b", [json.dumps(record(i)).encode() for i in range(120, 200)] + [BAD[1]])
    run_until_rows(p, checkpoint, spark, "mqtt_out", 200)
    got = memory_table("mqtt_out")
    assert sorted(got["id"].to_pylist()) == list(range(200))  # each exactly once
    assert max(t.num_rows for t in memory_batches("mqtt_out").values()) <= 50
    assert sorted(r["record"] for r in memory_table("mqtt_dead").to_pylist()) == sorted(json.dumps(b.decode()) for b in BAD)


# --- sinks ------------------------------------------------------------------------------------------

ROWS = pa.table(
    {
        "k": ["a", "b", "a", "c"],
        "n": [1, 2, 3, 4],
        "at": pa.array([0, 1, 2, 3], pa.timestamp("us", tz="UTC")),
        "ok": [True, False, None, True],
    }
)


def test_postgres_sink_appends_once_per_batch_and_upserts_by_key(tmp_path):
    require("PostgreSQL")
    append, upsert = unique("app"), unique("ups")
    job = str(tmp_path / "ckpt")
    try:
        for batch in (0, 0, 1):  # batch 0 written twice: a replay
            connectors.write(sinks.postgres(PG_DSN, append), ROWS, batch, job)
        got = pg(f"SELECT k, n, extract(epoch FROM at) * 1000000, ok FROM {append} ORDER BY n")
        assert [(k, n, int(us), ok) for k, n, us, ok in got] == sorted(
            [(r["k"], r["n"], i, r["ok"]) for i, r in enumerate(ROWS.to_pylist())] * 2, key=lambda t: t[1]
        )
        assert pg("SELECT batch_id FROM sluice_batches WHERE sink = %s ORDER BY batch_id", (append,)) == [(0,), (1,)]

        spec = sinks.postgres(PG_DSN, upsert, key="k")
        connectors.write(spec, ROWS, 0, job)
        assert pg(f"SELECT k, n FROM {upsert} ORDER BY k") == [("a", 3), ("b", 2), ("c", 4)]
        connectors.write(spec, pa.table({"k": ["b"], "n": [20], "at": ROWS["at"][:1], "ok": [None]}), 1, job)
        assert pg(f"SELECT k, n FROM {upsert} ORDER BY k") == [("a", 3), ("b", 20), ("c", 4)]
        connectors.write(spec, ROWS, 0, job)  # replay of batch 0: a no-op
        assert pg(f"SELECT k, n FROM {upsert} ORDER BY k") == [("a", 3), ("b", 20), ("c", 4)]
    finally:
        for t in (append, upsert):
            pg(f"DROP TABLE IF EXISTS {t}")
        pg("DELETE FROM sluice_batches WHERE sink IN (%s, %s)", (append, upsert))


def test_redis_sink_stream_entries_and_hash_upserts_once_per_batch(tmp_path):
    require("Redis")
    r = redis_client()
    stream, prefix = unique("out"), unique("h")
    job = str(tmp_path / "ckpt")
    try:
        spec = sinks.redis(stream, url=REDIS_URL)
        for batch in (0, 1, 1):
            connectors.write(spec, ROWS, batch, job)
        entries = [{k.decode(): v.decode() for k, v in f.items()} for _, f in r.xrange(stream)]
        assert len(entries) == 8
        assert [e["n"] for e in entries] == ["1", "2", "3", "4"] * 2
        assert entries[1] == {"k": "b", "n": "2", "at": "1970-01-01 00:00:00.000001Z", "ok": "false"}
        assert "ok" not in entries[2]  # a null is left out

        hashes = sinks.redis(prefix, key="k", url=REDIS_URL)
        connectors.write(hashes, ROWS, 0, job)
        connectors.write(hashes, ROWS.slice(0, 1), 0, job)  # replay: nothing changes
        assert r.hgetall(f"{prefix}:a")[b"n"] == b"3"
        assert sorted(r.keys(f"{prefix}:*")) == [f"{prefix}:{k}".encode() for k in "abc"]
    finally:
        r.delete(stream, f"sluice:batches:{stream}", f"sluice:batches:{prefix}", *r.keys(f"{prefix}:*"))


def test_nats_sink_publishes_each_row_once_across_a_replay(tmp_path):
    require("NATS")
    stream = unique("out")
    nats_stream(stream)
    job = str(tmp_path / "ckpt")
    try:
        spec = sinks.nats(f"{stream}.rows", url=NATS_URL)
        for batch in (0, 1, 1, 0):
            connectors.write(spec, ROWS, batch, job)
        messages = nats_messages(stream)
        assert len(messages) == 8
        assert [json.loads(m.data)["n"] for m in messages] == [1, 2, 3, 4] * 2
        assert json.loads(messages[0].data) == {"k": "a", "n": 1, "at": "1970-01-01T00:00:00.000000Z", "ok": True}
        assert {m.headers["Nats-Msg-Id"] for m in messages} == {
            f"{connectors.job_id(job)}:{b}:{i}" for b in (0, 1) for i in range(4)
        }
    finally:
        nats_delete(stream)


def test_keyed_results_upserted_into_postgres_and_dead_letters_into_redis(spark, tmp_path):
    """A pipeline end to end: NATS in, a keyed count upserted into PostgreSQL, bad messages
    to a Redis stream as dead letters."""
    for service in ("NATS", "PostgreSQL", "Redis"):
        require(service)
    stream, table, dead = unique("e2e"), unique("counts"), unique("dead")
    nats_stream(stream)
    r = redis_client()
    try:
        messages = [json.dumps({"id": i, "name": f"k{i % 7}", "v": 1.0}).encode() for i in range(140)]
        nats_publish(stream, messages[:70] + [BAD[0]] + messages[70:])
        p = sluice.Pipeline("e2e")
        counts = (
            p.source(sources.nats(stream, SCHEMA, max_rows_per_batch=50))
            .key_by("name")
            .aggregate(n=agg.count(), total=agg.sum("v"))
        )
        counts.sink(sinks.postgres(PG_DSN, table, key="name"))
        p.dead_letter(sinks.redis(dead, url=REDIS_URL))

        def done(_):
            try:
                return pg(f"SELECT sum(n) FROM {table}")[0][0] == 140
            except Exception:
                return False

        p.run(str(tmp_path / "ckpt"), spark=spark, duration=180, stop_when=done)
        assert pg(f"SELECT name, n, total FROM {table} ORDER BY name") == [(f"k{k}", 20, 20.0) for k in range(7)]
        letters = [{k.decode(): v.decode() for k, v in f.items()} for _, f in r.xrange(dead)]
        assert [x["record"] for x in letters] == [json.dumps(BAD[0].decode())]
        assert letters[0]["operator"] == "source_1" and "not a JSON object" in letters[0]["error"]
    finally:
        nats_delete(stream)
        pg(f"DROP TABLE IF EXISTS {table}")
        r.delete(dead, f"sluice:batches:{dead}")


# --- a broker that is down ------------------------------------------------------------------------


DOWN = {
    "nats": lambda port: sources.nats("nothing", SCHEMA, url=f"nats://127.0.0.1:{port}", patience_s=1),
    "redis": lambda port: sources.redis("nothing", SCHEMA, url=f"redis://127.0.0.1:{port}/0", patience_s=1),
    "postgres": lambda port: sources.PostgresTableSource(
        f"postgresql://postgres@127.0.0.1:{port}/test", "nothing", "id", SCHEMA, patience_s=1
    ),
    "mqtt": lambda port: sources.mqtt("t", SCHEMA, client_id=unique("c"), port=port, patience_s=1),
}


@pytest.mark.parametrize("kind", sorted(DOWN))
def test_a_source_whose_broker_is_down_admits_nothing_then_fails_naming_it(tmp_path, kind):
    """While the broker is away the source plans no rows (and says why in its backlog file);
    after ``patience_s`` it raises an error that names the broker and its address."""
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from sluice.runtime.sources.datasource import reader_type, stream_schema

    port = free_port()  # nothing listens there
    spec = DOWN[kind](port)
    reader = reader_type(spec)(spec, "src", str(tmp_path), from_arrow_schema(stream_schema(spec)), 2)
    start = reader.initialOffset()
    deadline = time.time() + 60
    with pytest.raises(SluiceError) as error:
        while time.time() < deadline:
            assert reader.latestOffset(start, ReadMaxRows(100)) == start
            assert "unreachable" in read_backlog(str(tmp_path), "src")["error"]
            time.sleep(0.2)
    assert "unreachable" in str(error.value) and str(port) in str(error.value)
    assert spec.broker.split(" at ")[0] in str(error.value)


def test_a_job_whose_broker_is_down_stops_with_that_error(spark, tmp_path):
    port = free_port()
    p = sluice.Pipeline("down")
    p.source(DOWN["nats"](port)).sink(sinks.memory("down_out"))
    with pytest.raises(SluiceError, match=f"NATS JetStream at nats://127.0.0.1:{port}.*unreachable"):
        p.run(str(tmp_path / "ckpt"), spark=spark, duration=120)


@pytest.mark.parametrize(
    "spec",
    [
        lambda port: PostgresSink(dsn=f"postgresql://postgres@127.0.0.1:{port}/test", table="t", patience_s=1),
        lambda port: RedisSink(name="s", url=f"redis://127.0.0.1:{port}/0", patience_s=1),
        lambda port: NatsSink(subject="s.x", url=f"nats://127.0.0.1:{port}", patience_s=1),
    ],
    ids=["postgres", "redis", "nats"],
)
def test_a_sink_whose_broker_is_down_fails_naming_it_and_its_address(tmp_path, spec):
    port = free_port()
    with pytest.raises(SinkError, match=f"unreachable.*{port}|{port}.*unreachable"):
        connectors.write(spec(port), ROWS, 0, str(tmp_path))


def test_late_records_of_a_window_go_to_a_late_data_sink_in_redis(spark, tmp_path):
    """``Pipeline.late_data`` takes any sink: every record a window judged late is there, once,
    with the batch it arrived in (the checkpoint's own side output has the same records)."""
    from sluice import windows
    from sluice.runtime.side_outputs import read_side_output

    require("Redis")
    r = redis_client()
    late_key = unique("late")
    try:
        p = sluice.Pipeline("late_to_redis")
        readings = p.source(
            sources.generator(
                fields={"meter": sources.Keys(5, prefix="m"), "ts": sources.EventTime(jitter=2.0, step=0.002)},
                total_rows=4000,
                seed=3,
                start_time=1_700_000_000.0,
                max_rows_per_batch=1000,
                watermark_delay=0.2,
            )
        )
        readings.key_by("meter").window(windows.tumbling("1s")).aggregate(n=agg.count(), name="win").sink(
            sinks.memory("late_windows")
        )
        p.late_data(sinks.redis(late_key, url=REDIS_URL))
        checkpoint = str(tmp_path / "ckpt")
        p.run(checkpoint, spark=spark)
        kept = read_side_output(checkpoint, "side/win/late")
        sent = [{k.decode(): v.decode() for k, v in f.items()} for _, f in r.xrange(late_key)]
        assert len(kept) > 0
        assert sorted((x["batch_id"], x["record"]) for x in kept) == sorted((int(x["batch_id"]), x["record"]) for x in sent)
        assert {x["error"] for x in sent} == {"late"}
    finally:
        r.delete(late_key, f"sluice:batches:{late_key}")


def test_mqtt_batches_replay_from_the_journal_after_the_session_is_gone(tmp_path):
    """What the MQTT guarantee rests on, without Spark: a planned batch's messages are in the
    journal before the offset that admits them exists, so reading that batch again after the
    process (and its session) died gives the same rows; messages published meanwhile come
    from the broker to the next session and are journaled after them."""
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from sluice.runtime.connectors import mqtt as mqtt_connector
    from sluice.runtime.sources.datasource import stream_schema

    require("Mosquitto")
    topic, client_id = unique("journal"), unique("sluice")
    spec = sources.mqtt(topic, SCHEMA, client_id=client_id)
    controls = str(tmp_path / "sources")

    def new_reader():
        return mqtt_connector.MqttStreamReader(spec, "mq", controls, from_arrow_schema(stream_schema(spec)), 1)

    def plan_until(reader, start, rows, deadline_s=30):
        deadline = time.time() + deadline_s
        end = start
        while end["rows"] - start["rows"] < rows and time.time() < deadline:
            end = reader.latestOffset(start, ReadMaxRows(1000))
            time.sleep(0.1)
        return end

    def read(reader, start, end):
        span = reader.partitions(start, end)[0]
        return pa.Table.from_batches(list(reader.read(span)))

    reader = new_reader()
    start = reader.initialOffset()
    plan_until(reader, start, 0, deadline_s=2)  # opens the session
    deadline = time.time() + 10
    while not mqtt_connector.session_for(spec, mqtt_connector.journal_dir(controls, "mq")).connected:
        assert time.time() < deadline, "no session with the broker"
        time.sleep(0.1)
    time.sleep(0.5)
    _mqtt_publish(topic, [json.dumps(record(i)).encode() for i in range(30)])
    end = plan_until(reader, start, 30)
    first = read(reader, start, end)
    assert sorted(first["id"].to_pylist()) == list(range(30))

    # the process dies: its session object goes, the broker keeps the session
    session = mqtt_connector._SESSIONS.pop(next(iter(k for k in mqtt_connector._SESSIONS if client_id in k)))
    session.client.loop_stop()
    session.client.socket().close()
    _mqtt_publish(topic, [json.dumps(record(i)).encode() for i in range(30, 50)])

    again = new_reader()
    assert read(again, start, end).equals(first)  # the replayed batch reads the journal
    more = plan_until(again, end, 20)
    assert sorted(read(again, end, more)["id"].to_pylist()) == list(range(30, 50))
    again.commit(more)
    session = mqtt_connector._SESSIONS.pop(next(iter(k for k in mqtt_connector._SESSIONS if client_id in k)))
    session.client.disconnect()
    session.client.loop_stop()
