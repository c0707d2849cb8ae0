"""Readings from a Redis stream, the high ones published to NATS JetStream.

    redis-cli XADD readings '*' sensor s1 celsius 21.5
    redis-cli XADD readings '*' sensor s2 celsius 48.0
    # a JetStream stream that takes the alerts: the `nats` CLI, or js.add_stream(...) in nats-py
    nats stream add alerts --subjects 'alerts.>' --defaults
    sluice run examples/connectors/redis_to_nats.py --checkpoint /tmp/ckpt-readings

Offsets are Redis entry IDs (each batch reads ``XRANGE (last-id end-id``). Each alert is
published with ``Nats-Msg-Id: <job>:<batch>:<row>``, so a batch replayed after a crash adds
no second copy (within the stream's duplicate window, 2 minutes by default).
"""

import pyarrow as pa

import sluice
from sluice import sinks, sources

READING = pa.schema([("sensor", pa.string()), ("celsius", pa.float64())])

pipeline = sluice.Pipeline("redis_readings")
readings = pipeline.source(sources.redis("readings", READING), name="readings")
readings.filter("celsius > 40").sink(sinks.nats("alerts.hot"))
