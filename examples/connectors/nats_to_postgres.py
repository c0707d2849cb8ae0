"""Orders from a NATS JetStream stream, revenue per product upserted into PostgreSQL.

    # a stream, and a few orders (nats-py; or the `nats` CLI: nats stream add / nats pub)
    python - <<'PY'
    import asyncio, json, nats
    async def main():
        nc = await nats.connect("nats://127.0.0.1:4222"); js = nc.jetstream()
        await js.add_stream(name="orders", subjects=["orders.>"])
        for i in range(1000):
            await js.publish("orders.new", json.dumps({"order": i, "product": f"p{i % 7}", "amount": 9.5}).encode())
        await nc.close()
    asyncio.run(main())
    PY
    sluice run examples/connectors/nats_to_postgres.py --checkpoint /tmp/ckpt-orders
    psql -h 127.0.0.1 -U postgres test -c 'SELECT * FROM revenue_per_product ORDER BY product'

Offsets are JetStream sequence numbers: kill the run at any moment and start it again, the
table ends as if it had never stopped. A message that is not an order (not JSON, a text
amount) goes to the dead letters, here a PostgreSQL table of its own.
"""

import pyarrow as pa

import sluice
from sluice import agg, sinks, sources

DSN = "postgresql://postgres@127.0.0.1:5432/test"
ORDER = pa.schema([("order", pa.int64()), ("product", pa.string()), ("amount", pa.float64())])

pipeline = sluice.Pipeline("nats_orders")
orders = pipeline.source(sources.nats("orders", ORDER, max_rows_per_batch=10_000), name="orders")
orders.key_by("product").aggregate(orders=agg.count(), revenue=agg.sum("amount")).sink(
    sinks.postgres(DSN, "revenue_per_product", key="product")
)
pipeline.dead_letter(sinks.postgres(DSN, "orders_dead_letters"))
