"""Orders from a Kafka topic, revenue per product written to another topic, exactly once.

    # a topic with three partitions, and a few orders (confluent-kafka; or kafka-console-producer)
    python - <<'PY'
    import json
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": "127.0.0.1:9092"})
    admin.create_topics([NewTopic("orders", 3, 1)])["orders"].result()
    p = Producer({"bootstrap.servers": "127.0.0.1:9092"})
    for i in range(1000):
        p.produce("orders", json.dumps({"order": i, "product": f"p{i % 7}", "amount": 9.5}), key=f"p{i % 7}")
    p.produce("orders", b"not an order")
    p.flush()
    PY
    sluice run examples/connectors/kafka_to_kafka.py --checkpoint /tmp/ckpt-kafka-orders
    # read what is committed (kafka-console-consumer --isolation-level read_committed, or:)
    python -c "
    from confluent_kafka import Consumer
    c = Consumer({'bootstrap.servers': '127.0.0.1:9092', 'group.id': 'look', 'auto.offset.reset': 'earliest',
                  'isolation.level': 'read_committed'})
    c.subscribe(['revenue_per_product'])
    for m in c.consume(100, 5): print(m.key(), m.value())"

Offsets are per topic-partition in Spark's offset log and every output batch is one Kafka
transaction that also records the batch id: kill the run at any moment and start it again, a
read_committed consumer sees each update once. The record that is not an order goes to the
dead letters (a topic of their own) with its topic, partition and offset.
"""

import pyarrow as pa

import sluice
from sluice import agg, sinks, sources

BOOTSTRAP = "127.0.0.1:9092"
ORDER = pa.schema([("order", pa.int64()), ("product", pa.string()), ("amount", pa.float64())])

pipeline = sluice.Pipeline("kafka_orders")
orders = pipeline.source(
    sources.kafka("orders", ORDER, bootstrap=BOOTSTRAP, max_rows_per_batch=10_000, metadata=("timestamp",)), name="orders"
)
orders.key_by("product").aggregate(orders=agg.count(), revenue=agg.sum("amount")).sink(
    sinks.kafka("revenue_per_product", bootstrap=BOOTSTRAP, key="product")
)
pipeline.dead_letter(sinks.kafka("orders_dead_letters", bootstrap=BOOTSTRAP))
