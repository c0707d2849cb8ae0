"""The routing table in Spark: every row goes to the partition the plan gives its key group,
for any number of partitions (the table is packed into 64-bit words, a few bits per entry)."""

from __future__ import annotations

import random

import pytest

from sluice.plan.physical import KeyedStagePlan
from sluice.runtime.exchange.routing import packed_routing, routing_columns
from sluice.runtime.kernels.keyed import KEY_GROUP
from sluice.runtime.schemas import PARTITION


@pytest.mark.parametrize("partitions, max_parallelism", [(1, 128), (2, 128), (3, 128), (5, 100), (37, 128), (300, 512)])
def test_packed_routing_gives_each_key_group_its_partition(partitions, max_parallelism):
    rng = random.Random(partitions)
    routing = [rng.randrange(partitions) for _ in range(max_parallelism)]
    routing[0], routing[-1] = partitions - 1, partitions - 1  # the highest bits of a word too
    words, bits = packed_routing(routing, partitions)
    per_word = 64 // bits
    unpacked = [
        ((words[kg // per_word] & ((1 << 64) - 1)) >> ((kg % per_word) * bits)) & ((1 << bits) - 1)
        for kg in range(max_parallelism)
    ]
    assert unpacked == routing
    assert all(-(1 << 63) <= w < (1 << 63) for w in words)  # Spark's BIGINT


def test_a_routing_table_naming_a_missing_partition_is_refused():
    with pytest.raises(ValueError, match="key group 1 goes to partition 2"):
        packed_routing([0, 2], 2)


@pytest.mark.spark
@pytest.mark.parametrize("partitions", [2, 3, 37])
def test_spark_routes_every_row_by_the_table(spark, partitions):
    rng = random.Random(7)
    routing = tuple(rng.randrange(partitions) for _ in range(128))
    stage = KeyedStagePlan(partitions, routing)
    columns = routing_columns(["k"], stage, 128)
    rows = (
        spark.range(5_000)
        .selectExpr("concat('key-', CAST(id AS STRING)) AS k")
        .selectExpr("k", f"{columns[KEY_GROUP]} AS kg", f"{columns[PARTITION]} AS p")
        .collect()
    )
    assert len({r.kg for r in rows}) == 128
    assert all(r.p == routing[r.kg] for r in rows)


@pytest.mark.spark
def test_route_exchanges_by_the_table_and_ships_only_the_columns_asked_for(spark):
    """After the exchange every row is in the partition of its key group, and the columns the
    keyed stage does not read never crossed it (nor the partition: an expression only)."""
    from sluice.runtime.exchange.routing import route
    from sluice.runtime.schemas import INGEST

    routing = tuple(random.Random(3).randrange(3) for _ in range(128))
    frame = spark.range(3_000).selectExpr(
        "concat('key-', CAST(id % 500 AS STRING)) AS k", "id * 2.0 AS v", "'unused' AS note", f"current_timestamp() AS {INGEST}"
    )
    routed = route(frame, ["k"], KeyedStagePlan(3, routing), 128, ["k", "v"])
    assert routed.columns == ["k", "v", INGEST, KEY_GROUP]
    rows = routed.selectExpr("spark_partition_id() AS p", KEY_GROUP).collect()
    assert len(rows) == 3_000 and all(r.p == routing[r[KEY_GROUP]] for r in rows)


def test_an_aggregate_reads_only_its_keys_and_aggregated_columns():
    import pyarrow as pa

    from sluice import agg
    from sluice.runtime.kernels.aggregate import AggregateKernel

    schema = pa.schema([("kwh", pa.float64()), ("meter", pa.string()), ("wh", pa.float64()), ("site", pa.string())])
    kernel = AggregateKernel(["meter"], {"n": agg.count(), "total": agg.sum("wh"), "top": agg.max("wh")})
    assert kernel.input_columns(schema) == ["meter", "wh"]
    assert AggregateKernel(["site", "meter"], {"n": agg.count("kwh")}).input_columns(schema) == ["kwh", "meter", "site"]
