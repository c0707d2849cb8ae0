"""Silver: revenue per product from the bronze Delta table, upserted into another Delta table.

    sluice run examples/connectors/delta_bronze.py --checkpoint /tmp/ckpt-bronze   # first
    sluice run examples/connectors/delta_silver.py --checkpoint /tmp/ckpt-silver
    python -c "
    import duckdb
    from deltalake import DeltaTable
    files = DeltaTable('/tmp/lake/revenue_per_product').file_uris()
    print(duckdb.sql(f'SELECT * FROM read_parquet({files!r}) ORDER BY product'))"

The Delta source reads the rows each new version of the bronze table adds (the files its
commit adds, never the whole table), at most 50,000 rows per batch; its offsets are table
versions (and files within one) in Spark's offset log, so a restarted job goes on from the
version it had reached. Each batch MERGEs the new totals on `product` in one Delta commit
with its application transaction: a replayed batch is skipped.
"""

import sluice
from sluice import agg, sinks, sources

pipeline = sluice.Pipeline("orders_silver")
pipeline.source(sources.delta("/tmp/lake/orders_bronze", max_rows_per_batch=50_000), name="bronze").key_by("product").aggregate(
    orders=agg.count(), revenue=agg.sum("amount")
).sink(sinks.delta("/tmp/lake/revenue_per_product", mode="upsert", key="product"))
