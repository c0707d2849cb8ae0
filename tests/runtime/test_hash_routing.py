"""The salt that steers a row through Spark's hash exchange to the partition of our choosing.

The pure half (Spark's murmur3 in Python, and its inverse) is checked against itself and
against values Spark computes; the SQL half against Spark's own exchange, for the key types
and partition counts a keyed stage meets.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.runtime.exchange.salt import SALT, murmur3_int, salt_for, salt_sql, salt_temporaries

INT32 = st.integers(-(2**31), 2**31 - 1)


@given(seed=INT32, partitions=st.integers(1, 1024), data=st.data())
def test_the_salt_hashes_to_the_partition(seed, partitions, data):
    partition = data.draw(st.integers(0, partitions - 1))
    salt = salt_for(seed, partition)
    assert -(2**31) <= salt < 2**31
    assert murmur3_int(salt, seed) % partitions == partition


@given(seed=INT32, a=INT32, b=INT32)
def test_different_salts_hash_differently(seed, a, b):
    """hashInt is a bijection for a fixed seed: exactly one salt per target."""
    assert (murmur3_int(a, seed) == murmur3_int(b, seed)) == (a == b)


def test_murmur3_matches_sparks_published_values():
    # SELECT hash(1), hash(0), hash(-1) on Spark: the seed is 42
    assert murmur3_int(1, 42) == -559580957
    assert murmur3_int(0, 42) == 933211791
    assert murmur3_int(-1, 42) == -1604776387


@pytest.mark.spark
def test_sparks_hash_agrees_with_murmur3_and_the_sql_salt_with_salt_for(spark):
    rows = (
        spark.range(-300, 300)
        .selectExpr("CAST(id * 7919 AS INT) AS v", "CAST(pmod(id, 5) AS INT) AS p")
        .selectExpr("*", "hash(v) AS h", *salt_sql(["v"], "p", 5))
        .collect()
    )
    for row in rows:
        assert row["h"] == murmur3_int(row["v"], 42)
        assert row[SALT] == salt_for(row["h"], row["p"])


def _keys_frame(spark, key_sql: list[str], rows: int = 3000):
    """Rows with keys of the given SQL expressions over ``id`` and a partition per key."""
    return spark.range(rows).selectExpr(*[f"{sql} AS k{i}" for i, sql in enumerate(key_sql)])


@pytest.mark.spark
@pytest.mark.parametrize("partitions", [1, 2, 3, 5])
@pytest.mark.parametrize(
    "key_sql",
    [
        ["concat('m', CAST(id % 97 AS STRING))"],
        ["CAST(id % 89 AS BIGINT)", "IF(id % 7 = 0, NULL, CAST(id % 3 AS INT))"],
        ["CAST(id % 13 AS DOUBLE) * IF(id % 2 = 0, -1.0, 1.0)"],  # -0.0 and 0.0: one group
        ["timestamp_micros(id % 50)"],
    ],
)
def test_grouped_rows_cross_the_exchange_to_their_partition(spark, partitions, key_sql):
    """Group by (keys, salt) with a partial aggregate before the exchange: every group ends in
    the partition routed to it, whatever the number of shuffle partitions (at least as many)."""
    from pyspark.sql import functions as F

    keys = [f"k{i}" for i in range(len(key_sql))]
    part = f"CAST(pmod(xxhash64({', '.join(keys)}), {partitions}) AS INT)"
    df = _keys_frame(spark, key_sql).repartition(3).selectExpr("*", f"{part} AS p", *salt_sql(keys + ["p"], "p", partitions))
    shuffle = spark.conf.get("spark.sql.shuffle.partitions")
    try:
        spark.conf.set("spark.sql.shuffle.partitions", str(partitions + 1))
        grouped = df.groupBy(*keys, "p", SALT).agg(F.count(F.lit(1)).alias("n"))
        plan = grouped._jdf.queryExecution().executedPlan().toString()
        placed = grouped.select("p", F.spark_partition_id().alias("actual"), "n").collect()
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", shuffle)
    assert "partial_count" in plan.split("hashpartitioning")[1], plan
    assert sum(r["n"] for r in placed) == 3000
    assert all(r["p"] == r["actual"] for r in placed), "a group crossed to a partition it is not routed to"
    assert {r["actual"] for r in placed} == set(range(partitions))


def test_temporaries_are_named_after_the_prefix():
    items = salt_sql(["a"], "p", 2, prefix="__x")
    assert [item.rsplit(" AS ", 1)[1] for item in items] == [*salt_temporaries("__x"), "__x"]
