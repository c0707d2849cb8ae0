"""Routing by key group: each row's key group and the partition the Plan's routing table
gives it, as native Spark SQL, and the exchange by that partition (``repartitionById``)."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import functions as F

from sluice.plan.physical import KeyedStagePlan
from sluice.runtime.schemas import INGEST, KEY_GROUP, PARTITION, quote


def key_group_sql(keys: list[str], max_parallelism: int) -> str:
    """SQL of the key group of the key columns ``keys``: Spark's xxhash64, stable across runs
    and machines, mod the max parallelism."""
    columns = ", ".join(quote(k) for k in keys)
    return f"CAST(pmod(xxhash64({columns}), {int(max_parallelism)}) AS INT)"


def routing_columns(keys: list[str], stage: KeyedStagePlan, max_parallelism: int) -> dict[str, str]:
    """SQL of the key group of each row and of the partition it is routed to.

    Both are native expressions: the hash is Spark's xxhash64 (stable across runs and
    machines), and the routing table is a literal indexed by key group. They are SQL text
    added in one projection: built from ``F.lit`` per key group and two ``withColumn`` calls,
    they cost a Py4J round trip per key group and two plan analyses on the driver, every
    batch (about 0.1 s for 128 key groups).

    The table is packed into 64-bit words, a few bits per key group (:func:`packed_routing`):
    a row's partition is then a shift and a mask. An array of one literal per key group took
    Spark twice as long to analyze, and a string of digits read with ``conv(substr(...))``
    cost some 0.3 us a row, as much as the rest of the routing.

    The partition is wrapped in ``IF(spark_partition_id() >= 0, ..., 0)`` (the condition
    always holds, but Spark cannot know it) to keep Spark from folding it into a constant when
    the key is one (a window over a whole stream): a constant grouping column is dropped from
    an aggregate, and an aggregate grouped by the partition would then ask for a second
    exchange, by hash, that scatters a key group over partitions (``exchange.spark_combine``).
    """
    kg = key_group_sql(keys, max_parallelism)
    return {KEY_GROUP: kg, PARTITION: partition_sql(kg, stage)}


def partition_sql(kg: str, stage: KeyedStagePlan) -> str:
    """SQL of the partition the routing table gives the key group ``kg`` (an SQL expression)."""
    words, bits = packed_routing(stage.routing, stage.partitions)
    per_word = 64 // bits
    table = "array(" + ", ".join(f"{w}L" for w in words) + ")"
    lookup = (
        f"CAST(shiftright(element_at({table}, CAST({kg} div {per_word} AS INT) + 1), "
        f"({kg} % {per_word}) * {bits}) & {(1 << bits) - 1} AS INT)"
    )
    return f"IF(spark_partition_id() >= 0, {lookup}, 0)"


def packed_routing(routing: Sequence[int], partitions: int) -> tuple[list[int], int]:
    """The routing table (partition per key group) packed into signed 64-bit words, and the
    bits per entry: entry ``kg`` is bits ``(kg % k) * bits`` and up of word ``kg // k``,
    ``k = 64 // bits``."""
    bits = max(1, (max(partitions, 1) - 1).bit_length())
    per_word = 64 // bits
    words = []
    for start in range(0, len(routing), per_word):
        word = 0
        for j, p in enumerate(routing[start : start + per_word]):
            if not 0 <= p < partitions:
                raise ValueError(f"routing table: key group {start + j} goes to partition {p}, not one of 0..{partitions - 1}")
            word |= int(p) << (j * bits)
        words.append(word - (1 << 64) if word >= 1 << 63 else word)
    return words, bits


MAX_PACKED_PARALLELISM = 46_340
"""The largest max parallelism K for which two key groups pack into one INT (K * K < 2^31)."""


def route(
    df, keys: list[str], stage: KeyedStagePlan, max_parallelism: int, columns: list[str], upstream_keys: list[str] | None = None
):
    """Keep ``columns`` and the ingest time, add the key group, and exchange
    by the partition the routing table gives it.

    One projection in SQL text (each transformation costs Spark an analysis on the driver,
    every batch). The partition is an expression of the exchange, not a column: it is
    computed from the key group column (one hash a row) and never shipped. Columns the
    kernel does not read are dropped before the exchange, not after it: every byte of a row
    is written to the shuffle, read back, and turned into Arrow for the keyed stage.

    ``upstream_keys``: the key columns of the keyed operator before (``plan.collocation.
    traffic_source``); the key group column then also holds the key group each row had
    there, packed as ``upstream * K + key group`` (see :func:`with_key_group`), so the keyed
    stage can count the traffic between the two operators' key groups. It costs a second hash
    a row on the map side and no byte in the shuffle."""
    routed = with_key_group(df, keys, stage, max_parallelism, columns, upstream_keys)
    kg = f"({KEY_GROUP} % {int(max_parallelism)})" if upstream_keys else KEY_GROUP
    return routed.repartitionById(stage.partitions, F.expr(partition_sql(kg, stage)))


def with_key_group(
    df, keys: list[str], stage: KeyedStagePlan, max_parallelism: int, columns: list[str], upstream_keys: list[str] | None = None
):
    """``columns`` and the ingest time, and the key group of each row (one projection).

    With ``upstream_keys`` (max parallelism at most ``MAX_PACKED_PARALLELISM``) the key group
    column is ``kg(upstream_keys) * K + kg(keys)``: both in one INT, which a shuffle stores in
    the same 8 bytes a row as the key group alone."""
    kept = [quote(c) for c in columns if c not in (INGEST, KEY_GROUP)]
    kg = key_group_sql(keys, max_parallelism)
    if upstream_keys:
        if max_parallelism > MAX_PACKED_PARALLELISM:
            raise ValueError(f"two key groups of max parallelism {max_parallelism} do not fit one INT")
        kg = f"({key_group_sql(upstream_keys, max_parallelism)} * {int(max_parallelism)} + {kg})"
    return df.selectExpr(*kept, INGEST, f"{kg} AS {KEY_GROUP}")
