"""Telemetry from MQTT topics, the latest value per device kept in Redis hashes.

    mosquitto_pub -q 1 -t devices/d1/telemetry -m '{"device": "d1", "battery": 0.93}'
    sluice run examples/connectors/mqtt_to_redis.py --checkpoint /tmp/ckpt-devices
    redis-cli HGETALL device:d1

MQTT cannot replay, so the source journals every message under the checkpoint before it
acknowledges it (QoS 1, persistent session "sluice-devices"): the broker keeps what is
published while the pipeline is down, and a batch replayed after a crash reads the journal.
A message journaled but not yet acknowledged when the process dies is sent again by the
broker: between broker and journal the guarantee is at least once (see
``sluice/runtime/connectors/mqtt.py``).
"""

import pyarrow as pa

import sluice
from sluice import sinks, sources

TELEMETRY = pa.schema([("device", pa.string()), ("battery", pa.float64())])

pipeline = sluice.Pipeline("mqtt_devices")
telemetry = pipeline.source(sources.mqtt("devices/+/telemetry", TELEMETRY, client_id="sluice-devices"), name="telemetry")
# the latest reading per device: each new one replaces the one before (a keyed reduce)
telemetry.key_by("device").reduce(lambda before, latest: latest).sink(sinks.redis("device", key="device"))
