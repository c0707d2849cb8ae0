"""Meter readings as Avro records on Kafka, event time from the Kafka timestamp, kWh per meter
per minute as Avro records on another topic.

    # readings in Avro binary (no schema-registry header), the schema the source declares
    python - <<'PY'
    import io, fastavro, random
    from confluent_kafka import Producer
    schema = fastavro.parse_schema({"type": "record", "name": "reading", "fields": [
        {"name": "meter", "type": ["null", "string"]}, {"name": "kwh", "type": ["null", "double"]}]})
    p = Producer({"bootstrap.servers": "127.0.0.1:9092"})
    for i in range(5000):
        out = io.BytesIO()
        fastavro.schemaless_writer(out, schema, {"meter": f"m{i % 20}", "kwh": random.random()})
        p.produce("readings_avro", out.getvalue())
    p.flush()
    PY
    sluice run examples/connectors/kafka_avro.py --checkpoint /tmp/ckpt-kafka-avro

The source's watermark is the latest Kafka timestamp it has delivered minus 10 s, over all
partitions: an idle partition does not hold the minute windows open (docs/connectors.md).
"""

import pyarrow as pa

import sluice
from sluice import agg, sinks, sources, windows

BOOTSTRAP = "127.0.0.1:9092"
READING = pa.schema([("meter", pa.string()), ("kwh", pa.float64())])

pipeline = sluice.Pipeline("kafka_avro_meters")
readings = pipeline.source(
    sources.kafka(
        "readings_avro",
        READING,
        format="avro",
        bootstrap=BOOTSTRAP,
        metadata=("timestamp",),
        event_time="kafka_timestamp",
        watermark_delay=10.0,
    ),
    name="readings",
)
readings.key_by("meter").window(windows.tumbling("1m")).aggregate(kwh=agg.sum("kwh"), n=agg.count()).sink(
    sinks.kafka("kwh_per_minute", bootstrap=BOOTSTRAP, key="meter", format="avro")
)
