"""Decimal columns end to end: read exactly from PostgreSQL numeric(p, s) and from JSON
lines, summed exactly by a keyed aggregate (no 57976.99999999999), written exactly to a
PostgreSQL numeric column and to Parquet files."""

from __future__ import annotations

import decimal

import pyarrow as pa
import pytest
from tests.connector_services import PG_DSN, pg, require, unique

import sluice
from sluice import agg, sinks, sources, testing


@pytest.mark.spark
def test_numeric_from_postgres_is_summed_and_written_back_exactly(spark, tmp_path):
    require("PostgreSQL")
    orders, totals = unique("orders"), unique("totals")
    pg(f"CREATE TABLE {orders} (id bigserial PRIMARY KEY, customer text, amount numeric(12, 2))")
    try:
        # amounts whose float sum is off by a cent fraction: 0.10 + 0.20 ... in binary floating point
        pg(
            f"INSERT INTO {orders} (customer, amount) SELECT 'c' || (g % 3), (g % 97) / 10.0 + 0.01 "
            f"FROM generate_series(1, 900) g"
        )
        spec = sources.postgres(PG_DSN, orders, "id", max_rows_per_batch=300)
        assert spec.schema().field("amount").type == pa.decimal128(12, 2)
        p = sluice.Pipeline("revenue")
        p.source(spec).key_by("customer").aggregate(
            revenue=agg.sum("amount"), biggest=agg.max("amount"), name="per_customer"
        ).sink(sinks.postgres(PG_DSN, totals, key="customer"))
        seen: list[int] = []
        p.run(
            str(tmp_path / "ckpt"),
            spark=spark,
            duration=180,
            on_batch=lambda m: seen.append(m.rows_in),
            stop_when=lambda _: sum(seen) >= 900,
        )
        got = dict((c, (r, b)) for c, r, b in pg(f"SELECT customer, revenue, biggest FROM {totals}"))
        want = dict((c, (r, b)) for c, r, b in pg(f"SELECT customer, sum(amount), max(amount) FROM {orders} GROUP BY 1"))
        assert got == want and all(isinstance(r, decimal.Decimal) for r, _ in got.values())
        column_type = pg(
            f"SELECT data_type FROM information_schema.columns WHERE table_name = '{totals}' AND column_name = 'revenue'"
        )
        assert column_type == [("numeric",)]
    finally:
        pg(f"DROP TABLE IF EXISTS {orders}")
        pg(f"DROP TABLE IF EXISTS {totals}")


@pytest.mark.spark
def test_decimals_from_given_batches_to_parquet_stay_exact(tmp_path):
    amounts = [decimal.Decimal(s) for s in ("0.10", "0.20", "0.30", "57976.99", "0.01")]
    source = testing.Source(
        [[{"k": "a", "amount": a} for a in amounts[:3]], [{"k": "a", "amount": a} for a in amounts[3:]]],
        schema={"k": "string", "amount": "decimal(12, 2)"},
    )
    p = sluice.Pipeline("exact")
    p.source(source.spec).key_by("k").aggregate(total=agg.sum("amount"), name="t").sink(sinks.files(str(tmp_path / "out")))
    testing.run(p, source, str(tmp_path / "ckpt"))
    latest = sinks.read_latest(str(tmp_path / "out"), keys="k").to_pylist()
    assert latest == [{"k": "a", "total": decimal.Decimal("57977.60")}]


@pytest.mark.spark
def test_window_sums_of_decimals_are_exact(tmp_path):
    import datetime

    t0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    rows = [
        {"k": "a", "amount": decimal.Decimal(a), "ts": t0 + datetime.timedelta(seconds=s)}
        for a, s in (("0.10", 1), ("0.20", 2), ("57976.99", 3), ("-0.30", 4), ("5.55", 70))
    ]
    source = testing.Source(
        [rows[:2], rows[2:]], schema={"k": "string", "amount": "decimal(12, 2)", "ts": "timestamp"}, event_time="ts"
    )
    out = testing.Sink()
    p = sluice.Pipeline("window_exact")
    p.source(source.spec).key_by("k").window(sluice.windows.tumbling("1m")).aggregate(
        total=agg.sum("amount"), low=agg.min("amount"), high=agg.max("amount"), avg=agg.mean("amount"), name="w"
    ).sink(out.spec)
    testing.run(p, source, str(tmp_path / "ckpt"))
    (first,) = [r for r in out.rows() if r["window_start"] == t0]  # the minute the watermark passed
    assert (first["total"], first["low"], first["high"]) == (
        decimal.Decimal("57976.99"),
        decimal.Decimal("-0.30"),
        decimal.Decimal("57976.99"),
    )
    assert out.table().schema.field("total").type == pa.decimal128(38, 2)
    assert first["avg"] == pytest.approx(57976.99 / 4)
