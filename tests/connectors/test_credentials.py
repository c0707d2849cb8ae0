"""Credentials never reach what Sluice prints or stores (errors, reprs, backlog files, the
dashboard), and connectors read them from the environment or a file when they connect."""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pytest

from connector_services import NATS_URL, free_port, require, unique
from sluice import sinks, sources
from sluice.credentials import redact, resolve
from sluice.errors import ConfigError, SinkError, SluiceError
from sluice.graph.connectors import MqttAuth, NatsAuth, PostgresSink, RedisSink
from sluice.runtime import connectors
from sluice.runtime.checkpoint import Checkpoint

SECRET = "hunter2-Zq9"
SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


@pytest.mark.parametrize(
    "text",
    [
        f"postgresql://app:{SECRET}@db.example:5432/energy",
        f"redis://:{SECRET}@127.0.0.1:6379/0",
        f"rediss://default:{SECRET}@cache:6380/1?ssl_cert_reqs=none",
        f"nats://{SECRET}@127.0.0.1:4222",
        f"host=db user=app password={SECRET} dbname=energy",
        f"host=db password='{SECRET} with space' dbname=energy",
        f"postgresql://db/energy?user=app&password={SECRET}&sslmode=require",
        f"cannot connect to 'postgresql://app:{SECRET}@db:1/x': connection refused",
        f"s3://bucket/ckpt?access_key=AKIA&secret_key={SECRET}",
        f"NatsAuth(user='app', password='{SECRET}', token='{SECRET}')",
        f"{{'user': 'app', 'password': '{SECRET}'}}",
        f'{{"sasl.password": "{SECRET}", "bootstrap.servers": "k:9092"}}',
        f"sasl.password={SECRET} security.protocol=SASL_SSL",
    ],
)
def test_redact_masks_every_kind_of_credential(text):
    out = redact(text)
    assert SECRET not in out and "***" in out


def test_redact_keeps_what_carries_no_secret():
    for text in (
        "postgresql://postgres@127.0.0.1:5432/test",
        "redis://127.0.0.1:6379/0",
        "nats://127.0.0.1:4222",
        "host=db user=app dbname=energy",
        "file:///tmp/ckpt",
        "a = b",
    ):
        assert redact(text) == text


def test_specs_show_their_address_but_never_their_password():
    url = f"redis://:{SECRET}@127.0.0.1:6379/0"
    dsn = f"postgresql://app:{SECRET}@127.0.0.1:5432/test"
    specs = [
        sources.redis("k", SCHEMA, url=url),
        sources.PostgresTableSource(dsn, "t", "id", SCHEMA),
        sources.nats("s", SCHEMA, url=f"nats://{SECRET}@127.0.0.1:4222", auth=NatsAuth(password=SECRET)),
        sources.mqtt("t", SCHEMA, client_id="c", auth=MqttAuth(username="u", password=SECRET)),
        PostgresSink(dsn=dsn, table="t"),
        RedisSink(name="s", url=url),
        sinks.nats("s", auth=NatsAuth(token=SECRET)),
    ]
    for spec in specs:
        shown = [repr(spec), str(spec), getattr(spec, "broker", ""), getattr(spec, "target", "")]
        assert all(SECRET not in text for text in shown), shown
    assert "127.0.0.1" in specs[0].broker and "127.0.0.1" in specs[1].broker


def test_a_checkpoint_with_credentials_is_shown_without_them(tmp_path):
    from sluice.ui.job_view import JobView

    assert SECRET not in repr(Checkpoint(f"s3://bucket/ckpt?secret_key={SECRET}"))
    view = JobView(str(tmp_path / f"password={SECRET}"))
    assert SECRET not in json.dumps(view.state(-1), default=str)


@pytest.mark.parametrize("kind", ["postgres", "redis", "nats"])
def test_an_unreachable_broker_is_named_without_its_password(tmp_path, kind):
    """The error the job fails with and the backlog file say where the broker is, not the
    password the address carried."""
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from sluice.runtime.sources.control import read_backlog
    from sluice.runtime.sources.datasource import reader_type, stream_schema

    port = free_port()  # nothing listens there
    spec = {
        "postgres": lambda: sources.PostgresTableSource(
            f"postgresql://postgres:{SECRET}@127.0.0.1:{port}/test", "t", "id", SCHEMA, patience_s=0.5
        ),
        "redis": lambda: sources.redis("k", SCHEMA, url=f"redis://:{SECRET}@127.0.0.1:{port}/0", patience_s=0.5),
        "nats": lambda: sources.nats("s", SCHEMA, url=f"nats://app:{SECRET}@127.0.0.1:{port}", patience_s=0.5),
    }[kind]()
    reader = reader_type(spec)(spec, "src", str(tmp_path), from_arrow_schema(stream_schema(spec)), 1)
    start = reader.initialOffset()
    backlogs = []
    with pytest.raises(SluiceError) as error:
        deadline = time.time() + 30
        while time.time() < deadline:
            reader.latestOffset(start, ReadMaxRows(10))
            backlogs.append(json.dumps(read_backlog(str(tmp_path), "src")))
            time.sleep(0.2)
    assert str(port) in str(error.value)
    assert SECRET not in str(error.value)
    assert backlogs and all(SECRET not in b for b in backlogs)
    written = "".join(p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file())
    assert SECRET not in written


def test_a_sink_error_names_the_sink_without_its_password(tmp_path):
    port = free_port()
    spec = PostgresSink(dsn=f"postgresql://postgres:{SECRET}@127.0.0.1:{port}/test", table="t", patience_s=0.5)
    with pytest.raises(SinkError) as error:
        connectors.write(spec, pa.table({"id": [1]}), 0, str(tmp_path))
    assert str(port) in str(error.value) and SECRET not in str(error.value)


def test_resolve_reads_secrets_from_the_environment_and_from_files(tmp_path, monkeypatch):
    monkeypatch.setenv("SLUICE_TEST_SECRET", SECRET)
    secret_file = tmp_path / "pw"
    secret_file.write_text(SECRET + "\n")
    assert resolve("redis://:${env:SLUICE_TEST_SECRET}@h/0") == f"redis://:{SECRET}@h/0"
    assert resolve(f"password=${{file:{secret_file}}} host=h") == f"password={SECRET} host=h"
    assert resolve("no placeholder") == "no placeholder"
    with pytest.raises(ConfigError, match="SLUICE_TEST_MISSING"):
        resolve("x=${env:SLUICE_TEST_MISSING}")
    with pytest.raises(ConfigError, match="nope"):
        resolve(f"x=${{file:{tmp_path / 'nope'}}}")


def test_connectors_connect_with_a_password_named_by_the_environment(tmp_path, monkeypatch):
    """The DSN in the spec holds the placeholder; the real connection gets the value."""
    require("PostgreSQL")
    from connector_services import pg
    from sluice.runtime.connectors.postgres import connect

    table = unique("creds")
    monkeypatch.setenv("SLUICE_TEST_PG_PASSWORD", SECRET)
    dsn = "host=127.0.0.1 port=5432 user=postgres dbname=test password=${env:SLUICE_TEST_PG_PASSWORD}"
    with connect(dsn) as conn:
        assert conn.info.password == SECRET
    spec = PostgresSink(dsn=dsn, table=table)
    try:
        connectors.write(spec, pa.table({"id": [1, 2]}), 0, str(tmp_path))
        assert pg(f"SELECT count(*) FROM {table}")[0][0] == 2
    finally:
        pg(f"DROP TABLE IF EXISTS {table}")
    assert SECRET not in repr(spec) and "${env:SLUICE_TEST_PG_PASSWORD}" in repr(spec)


def test_nats_auth_reaches_the_server(tmp_path, monkeypatch):
    """A token the server does not expect is refused only by a server that requires one; the
    shared server requires none, so a token from the environment connects, and a missing
    variable is a ConfigError naming it (not an outage retried for patience_s)."""
    require("NATS")
    from sluice.runtime.connectors.aio import shared_loop
    from sluice.runtime.connectors.nats import connect

    monkeypatch.setenv("SLUICE_TEST_NATS_TOKEN", SECRET)
    nc = shared_loop().run(connect(NATS_URL, NatsAuth(token="${env:SLUICE_TEST_NATS_TOKEN}")), 10)
    assert nc.is_connected
    shared_loop().run(nc.close(), 10)
    with pytest.raises(ConfigError, match="SLUICE_TEST_NATS_NOPE"):
        shared_loop().run(connect(NATS_URL, NatsAuth(token="${env:SLUICE_TEST_NATS_NOPE}")), 10)
