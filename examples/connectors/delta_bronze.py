"""Bronze: orders from a Kafka topic appended to a Delta table, exactly once.

    # a topic and a few orders: see examples/connectors/kafka_to_kafka.py
    sluice run examples/connectors/delta_bronze.py --checkpoint /tmp/ckpt-bronze
    python -c "
    from deltalake import DeltaTable
    t = DeltaTable('/tmp/lake/orders_bronze'); print(t.version(), t.to_pyarrow_table().num_rows)"

Every batch is one Delta commit carrying the application transaction (job, batch id): kill
the run at any moment and start it again, the table holds each order once. The Delta table
feeds examples/connectors/delta_silver.py, a second job that streams what each new version
adds. A record that is not an order goes to the dead letters (a Delta table of their own).
"""

import pyarrow as pa

import sluice
from sluice import sinks, sources

ORDER = pa.schema([("order", pa.int64()), ("product", pa.string()), ("amount", pa.float64())])

pipeline = sluice.Pipeline("orders_bronze")
pipeline.source(sources.kafka("orders", ORDER, bootstrap="127.0.0.1:9092", max_rows_per_batch=20_000), name="orders").sink(
    sinks.delta("/tmp/lake/orders_bronze")
)
pipeline.dead_letter(sinks.delta("/tmp/lake/orders_dead_letters"))
