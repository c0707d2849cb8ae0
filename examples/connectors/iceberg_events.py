"""Orders from a NATS JetStream stream into an Iceberg table, and revenue per product upserted
into a second one; the catalog is PostgreSQL (a SQLite file works the same way).

    # a stream and a few orders: see examples/connectors/nats_to_postgres.py
    sluice run examples/connectors/iceberg_events.py --checkpoint /tmp/ckpt-iceberg
    python -c "
    from pyiceberg.catalog.sql import SqlCatalog
    c = SqlCatalog('sluice', uri='postgresql+psycopg://postgres@127.0.0.1:5432/test',
                   warehouse='file:///tmp/lake/warehouse')
    print(c.load_table('shop.revenue').scan().to_arrow().to_pandas())"

Each batch is one Iceberg commit whose snapshot summary records the job and the batch id
(`sluice.job`, `sluice.batch`); a batch the table already has is skipped on a replay. The
tables are created from the first batch's columns. Spark, Trino or DuckDB read them from the
same catalog (for Spark, Iceberg's JDBC catalog on the same database).
"""

import pyarrow as pa

import sluice
from sluice import agg, sinks, sources

CATALOG = "postgresql://postgres@127.0.0.1:5432/test"
WAREHOUSE = "file:///tmp/lake/warehouse"
ORDER = pa.schema([("order", pa.int64()), ("product", pa.string()), ("amount", pa.float64())])

pipeline = sluice.Pipeline("iceberg_orders")
orders = pipeline.source(sources.nats("orders", ORDER, max_rows_per_batch=10_000), name="orders")
orders.sink(sinks.iceberg(CATALOG, "shop.orders", warehouse=WAREHOUSE))
orders.key_by("product").aggregate(orders=agg.count(), revenue=agg.sum("amount")).sink(
    sinks.iceberg(CATALOG, "shop.revenue", warehouse=WAREHOUSE, key="product")
)
