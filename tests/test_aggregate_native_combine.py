"""Running aggregates combined by Spark before the exchange give what the records give.

Spark's partial aggregate turns a batch's records into one row of partials per (key, map
task) (``exchange.spark_combine``); the aggregate kernel merges those partials into the
keys' state. Fed either, the kernel must emit the same rows and write the same state: NULL
keys (also as one part of a two-column key), unicode keys, integer and float columns with
NULLs, a key whose values are all NULL, and an empty batch. Float values are multiples of
1/4, so sums are exact in any order and the comparison can be exact.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from sluice import agg
from sluice.graph.operators import Operator
from sluice.plan.physical import KeyedStagePlan
from sluice.runtime.exchange.spark_combine import native_combine, supports_native_combine
from sluice.runtime.kernels.aggregate import AggregateKernel
from sluice.runtime.kernels.keyed import KEY_GROUP, BatchContext
from sluice.runtime.schemas import INGEST, to_spark

pytestmark = pytest.mark.spark

KEYS = ["meter", "zone"]
METERS = ["m1", "zähler-ü", "電表", "🔌", None]
AGGREGATES = {"n": agg.count(), "nk": agg.count("kwh"), "total": agg.sum("wh"), "kwh": agg.sum("kwh"),
              "avg": agg.mean("kwh"), "low": agg.min("wh"), "high": agg.max("wh")}


def _records(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    meters = [METERS[i] for i in rng.integers(0, len(METERS), n)]
    zone = rng.integers(0, 3, n)
    wh_null = rng.random(n) < 0.1
    wh_null[[i for i, m in enumerate(meters) if m == "🔌"]] = True  # a key whose values are all NULL
    return pa.table({
        "meter": pa.array(meters, pa.string()),
        "zone": pa.array(zone, pa.int32(), mask=rng.random(n) < 0.15),
        "kwh": pa.array(rng.integers(-40, 40, n) / 4, mask=rng.random(n) < 0.1),
        "wh": pa.array(rng.integers(-1000, 1000, n), pa.int64(), mask=wh_null),
        INGEST: pa.array(np.arange(n), pa.timestamp("us", tz="UTC")),
    })


def _spark_partials(spark, kernel: AggregateKernel, records: pa.Table, ctx: BatchContext) -> tuple[pa.Table, str]:
    """The rows of partials Spark's combine makes of ``records`` (over 3 map tasks), as the
    keyed stage receives them, and the executed plan."""
    schema = pa.schema([f for f in records.schema if f.name != INGEST])
    df = spark.createDataFrame(records.to_pandas(), to_spark(records.schema)).repartition(3)
    stage = KeyedStagePlan(partitions=2, routing=(0, 1, 1, 0))
    combine = native_combine(df, Operator(id="a", kind="aggregate", name="a"), kernel, schema, ctx, stage,
                             max_parallelism=4)
    plan = combine.frame._jdf.queryExecution().executedPlan().toString()
    routed = combine.schema.append(pa.field(KEY_GROUP, pa.int32()))
    rows = combine.frame.toArrow().select(routed.names).cast(routed)
    return _one_key_group(rows), plan


def _one_key_group(rows: pa.Table) -> pa.Table:
    """Every row in key group 0, as a stage owning them all would see them."""
    return rows.set_column(rows.schema.get_field_index(KEY_GROUP), KEY_GROUP,
                           pa.array(np.zeros(rows.num_rows, np.int32)))


def _raw(records: pa.Table) -> pa.Table:
    return _one_key_group(records.drop_columns([INGEST]).append_column(KEY_GROUP, pa.array(np.zeros(records.num_rows, np.int32))))


def _sorted(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: (r["meter"] is None, r["meter"] or "", r["zone"] is None, r["zone"] or 0))


def test_spark_partials_give_the_records_output_and_state(spark):
    kernel = AggregateKernel(KEYS, AGGREGATES)
    first, second = _records(300, seed=3), _records(200, seed=4)
    schema = pa.schema([f for f in first.schema if f.name != INGEST])
    assert supports_native_combine(kernel, schema)
    state_schema = kernel.state_schema(schema).append(pa.field(KEY_GROUP, pa.int32()))

    # batch 1 from no state, batch 2 over the state batch 1 left (written from the records)
    want1 = kernel.process(_raw(first), state_schema.empty_table(), BatchContext(1, 0))
    partials, plan = _spark_partials(spark, kernel, first, BatchContext(1, 0))
    assert partials.num_rows < first.num_rows, "one row per (key, map task), not per record"
    got1 = kernel.process(partials, state_schema.empty_table(), BatchContext(1, 0))
    assert _sorted(got1.output) == _sorted(want1.output)
    assert _sorted(got1.upserts) == _sorted(want1.upserts)
    assert any(r["meter"] is None for r in want1.output.to_pylist()), "a NULL key was aggregated"
    assert any(r["meter"] == "🔌" and r["total"] == 0 and r["low"] is None for r in want1.output.to_pylist())

    state = want1.upserts
    want2 = kernel.process(_raw(second), state, BatchContext(2, 0))
    got2 = kernel.process(_spark_partials(spark, kernel, second, BatchContext(2, 0))[0], state, BatchContext(2, 0))
    assert _sorted(got2.output) == _sorted(want2.output)
    assert _sorted(got2.upserts) == _sorted(want2.upserts)

    # Spark's partial aggregate runs before its one hash exchange (the round robin is the test's)
    exchanges = [line for line in plan.splitlines() if "Exchange" in line]
    assert len(exchanges) == 2 and "hashpartitioning" in exchanges[0], plan
    assert "partial_sum" in plan[plan.index(exchanges[0]):], plan

    empty, _ = _spark_partials(spark, kernel, first.slice(0, 0), BatchContext(3, 0))
    assert empty.num_rows == 0
    result = kernel.process(empty, state, BatchContext(3, 0))
    assert result.output.num_rows == 0 and result.upserts.num_rows == 0


def test_only_aggregates_spark_computes_exactly_are_combined_by_it():
    schema = pa.schema([("meter", pa.string()), ("x", pa.float64()), ("i", pa.int64()), ("on", pa.bool_())])
    assert supports_native_combine(AggregateKernel(["meter"], {"n": agg.count(), "s": agg.sum("x"),
                                                               "m": agg.max("i"), "a": agg.mean("i")}), schema)
    user = agg.udaf("x", lambda: 0, lambda a, v: a, lambda a, b: a, lambda a: a)
    for aggregate in (agg.min("x"), agg.max("meter"), agg.sum("on"), user):
        assert not supports_native_combine(AggregateKernel(["meter"], {"v": aggregate}), schema), aggregate
    assert not supports_native_combine(AggregateKernel(["x"], {"n": agg.count()}), schema), "a float key"
