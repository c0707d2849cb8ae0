"""An MQTT source whose journal cannot be written says so: it admits nothing, its backlog
file names the error, the job fails after its patience, and once the journal is writable
again the messages kept meanwhile are journaled (real Mosquitto on loopback, no Spark)."""

from __future__ import annotations

import json
import os
import shutil
import time

import paho.mqtt.client as mqtt
import pyarrow as pa
import pytest

from connector_services import MQTT_HOST, MQTT_PORT, require, unique
from sluice import sources
from sluice.errors import SourceError
from sluice.runtime.connectors import mqtt as mqtt_connector
from sluice.runtime.sources.control import read_backlog

SCHEMA = pa.schema([("id", pa.int64())])


def _publish(topic: str, payloads: list[bytes]) -> None:
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    client.connect(MQTT_HOST, MQTT_PORT)
    client.loop_start()
    for info in [client.publish(topic, p, qos=1) for p in payloads]:
        info.wait_for_publish(10)
    client.loop_stop()
    client.disconnect()


def test_a_journal_that_cannot_be_written_is_reported_then_fails_the_job_then_recovers(tmp_path):
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from sluice.runtime.sources.datasource import stream_schema

    require("Mosquitto")
    topic, client_id = unique("journal_io"), unique("sluice")
    spec = sources.mqtt(topic, SCHEMA, client_id=client_id, patience_s=2)
    controls = str(tmp_path / "sources")
    reader = mqtt_connector.MqttStreamReader(spec, "mq", controls, from_arrow_schema(stream_schema(spec)), 1)
    start = reader.initialOffset()
    journal = mqtt_connector.journal_dir(controls, "mq")
    session = mqtt_connector.session_for(spec, journal)
    try:
        deadline = time.time() + 10
        while not session.connected:
            assert time.time() < deadline, "no session with the broker"
            time.sleep(0.1)
        # the journal's directory becomes unwritable: a file stands where it was
        shutil.rmtree(journal, ignore_errors=True)
        os.makedirs(controls, exist_ok=True)
        with open(journal, "w") as f:
            f.write("in the way")
        _publish(topic, [json.dumps({"id": i}).encode() for i in range(5)])
        deadline = time.time() + 10
        while session.journal_error is None:
            assert time.time() < deadline, "the failed journal write went unnoticed"
            time.sleep(0.05)
        assert reader.latestOffset(start, ReadMaxRows(100)) == start  # admits nothing
        backlog = read_backlog(controls, "mq")
        assert "journal" in backlog["error"] and journal in backlog["error"]
        with pytest.raises(SourceError, match="cannot write its journal"):
            deadline = time.time() + 30
            while time.time() < deadline:
                reader.latestOffset(start, ReadMaxRows(100))
                time.sleep(0.2)
        # writable again: the messages held meanwhile are journaled, in order, once
        os.remove(journal)
        deadline = time.time() + 10
        while session.journal_error is not None or session.next_index < 5:
            assert time.time() < deadline, "the journal did not recover"
            time.sleep(0.05)
        end = reader.latestOffset(start, ReadMaxRows(100))
        assert end["rows"] == 5
        table = pa.Table.from_batches(list(reader.read(reader.partitions(start, end)[0])))
        assert table["id"].to_pylist() == [0, 1, 2, 3, 4]
    finally:
        mqtt_connector._SESSIONS.pop(next(k for k in mqtt_connector._SESSIONS if client_id in k), None)
        session.client.loop_stop()
        session.client.disconnect()
