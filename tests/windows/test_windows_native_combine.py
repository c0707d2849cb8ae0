"""The combine Spark runs for windows of built-in aggregates equals the Python combine.

Both turn one batch of records into pane partials and late records; the kernel then
processes either. Fed the same records and watermark, the two must give the same window
results and the same late records, and Spark must do it with one exchange.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from sluice import agg
from sluice.graph.operators import Operator
from sluice.graph.windows import EventTime, ProcessingTime, Sliding, WindowQuery
from sluice.plan.physical import KeyedStagePlan
from sluice.runtime.exchange.spark_combine import late_records, native_combine, supports_native_combine
from sluice.runtime.kernels.keyed import KEY_GROUP, BatchContext
from sluice.runtime.kernels.windows import WindowAggregateKernel
from sluice.runtime.schemas import INGEST, to_spark
from windows_harness import assert_rows_equal

pytestmark = pytest.mark.spark

S = 1_000_000  # microseconds in a second
T0 = 1_700_000_000 * S


def _records(n: int = 400, seed: int = 5) -> pa.Table:
    rng = np.random.default_rng(seed)
    ts = T0 + rng.integers(0, 20 * S, n)
    ts_null = rng.random(n) < 0.03
    value = rng.normal(1.0, 2.0, n)
    value_null = rng.random(n) < 0.1
    return pa.table(
        {
            "meter": pa.array([f"m{k}" for k in rng.integers(0, 6, n)]),
            "kwh": pa.array(value, mask=value_null),
            "level": pa.array(rng.integers(-50, 50, n), pa.int64()),
            "on": pa.array(rng.random(n) < 0.5),
            "ts": pa.array(ts, pa.timestamp("us", tz="UTC"), mask=ts_null),
            INGEST: pa.array(T0 + rng.integers(0, 5 * S, n), pa.timestamp("us", tz="UTC")),
        }
    )


def _queries(time=EventTime("ts")) -> list[WindowQuery]:
    aggs = (
        ("n", agg.count()),
        ("avg", agg.mean("kwh")),
        ("top", agg.max("kwh")),
        ("low", agg.min("level")),
        ("total", agg.sum("level")),
        ("ons", agg.sum("on")),
        ("nk", agg.count("kwh")),
        ("last", agg.max("ts")),
    )
    return [
        WindowQuery(Sliding(4 * S, 1 * S), aggs, time, allowed_lateness=0, mode="update", name="4s"),
        WindowQuery(Sliding(6 * S, 2 * S), aggs[:3], time, allowed_lateness=3 * S, mode="update", name="6s"),
    ]


def _with_key_groups(rows: pa.Table) -> pa.Table:
    return rows.append_column(KEY_GROUP, pa.array(np.zeros(rows.num_rows, np.int32)))


def _outputs(kernel, rows: pa.Table, ctx: BatchContext):
    schema = kernel.state_schema(rows.schema).append(pa.field(KEY_GROUP, pa.int32()))
    result = kernel.process(rows, schema.empty_table(), ctx)
    late = result.side_outputs["late"]
    return result.output.to_pylist(), late.to_pylist()


def _python_combined(kernel, records: pa.Table, ctx: BatchContext, tasks: int = 2):
    cut = records.num_rows // tasks
    parts, lates = [], []
    for task in range(tasks):
        part, late, _ = kernel.combine(
            records.slice(task * cut, cut if task < tasks - 1 else None),
            BatchContext(ctx.batch_id, task, ctx.watermark, ctx.processing_time),
        )
        parts.append(part)
        lates.append(late)
    return pa.concat_tables(parts), pa.concat_tables(lates).to_pylist()


def _native_combined(spark, kernel, records: pa.Table, ctx: BatchContext, df=None):
    """(combined rows, late records, executed plan) of Spark's combine over ``records``."""
    schema = pa.schema([f for f in records.schema if f.name != INGEST])
    if df is None:
        df = spark.createDataFrame(records.to_pandas(), to_spark(records.schema)).repartition(2)
    stage = KeyedStagePlan(partitions=2, routing=(0, 1, 1, 0))
    combine = native_combine(df, Operator(id="w", kind="window", name="w"), kernel, schema, ctx, stage, max_parallelism=4)
    plan = combine.frame._jdf.queryExecution().executedPlan().toString()
    _assert_in_routed_partitions(combine.frame, stage.routing)
    rows = combine.frame.toArrow()
    rows = rows.select(combine.schema.names + [KEY_GROUP]).cast(combine.schema.append(pa.field(KEY_GROUP, pa.int32())))
    late = late_records(combine, ctx)
    return rows, (pa.concat_tables(late).to_pylist() if late else []), plan


@pytest.mark.parametrize("watermark_s", [None, 8, 12])
def test_spark_combine_gives_the_python_combines_windows_and_late_records(spark, watermark_s):
    records = _records()
    kernel = WindowAggregateKernel(["meter"], _queries())
    schema = pa.schema([f for f in records.schema if f.name != INGEST])
    assert supports_native_combine(kernel, schema)
    ctx = BatchContext(7, 0, None if watermark_s is None else T0 + watermark_s * S, T0 + 30 * S)

    kernel.bind(schema)
    python_rows, python_late = _python_combined(kernel, records, ctx)
    native_rows, native_late, plan = _native_combined(spark, kernel, records, ctx)
    _assert_partials_cross_one_exchange(plan)

    want_out, want_late = _outputs(kernel, _with_key_groups(python_rows), ctx)
    got_out, got_late = _outputs(kernel, native_rows, ctx)
    assert want_out, "windows were emitted"
    assert_rows_equal(got_out, want_out, "window results")
    assert want_late == got_late == []  # both combines sorted the late records out
    assert_rows_equal(native_late, python_late, "late records")
    if watermark_s is not None:
        assert python_late, "some records were late"
        assert len({r["late_for"] for r in python_late}) == 2, "late for one query, accepted by the other"


def _assert_partials_cross_one_exchange(plan: str) -> None:
    """Spark's partial aggregate runs before its one exchange by hash (the round robin is
    the test's), and nothing is exchanged again after it."""
    exchanges = [line for line in plan.splitlines() if "Exchange" in line]
    assert len(exchanges) == 2 and "hashpartitioning" in exchanges[0] and "RoundRobin" in exchanges[1], plan
    below = plan[plan.index(exchanges[0]) :]
    assert "partial_count" in below and "partial_count" not in plan[: plan.index(exchanges[0])], plan


def _assert_in_routed_partitions(frame, routing: tuple[int, ...]) -> None:
    from pyspark.sql import functions as F

    placed = frame.select(F.col(KEY_GROUP), F.spark_partition_id().alias("actual")).distinct().collect()
    assert placed and all(routing[row[KEY_GROUP]] == row["actual"] for row in placed), placed


def test_processing_time_windows_combine_in_spark(spark):
    records = _records(seed=9)
    kernel = WindowAggregateKernel(["meter"], _queries(ProcessingTime())[:1])
    ctx = BatchContext(3, 0, None, T0 + 30 * S + 123)
    kernel.bind(pa.schema([f for f in records.schema if f.name != INGEST]))
    python_rows, _ = _python_combined(kernel, records, ctx)
    native_rows, _, _ = _native_combined(spark, kernel, records, ctx)
    assert_rows_equal(_outputs(kernel, native_rows, ctx)[0], _outputs(kernel, _with_key_groups(python_rows), ctx)[0])


def test_udafs_and_naive_timestamps_stay_in_python():
    schema = pa.schema([("meter", pa.string()), ("kwh", pa.float64()), ("ts", pa.timestamp("us", tz="UTC"))])
    spread = agg.udaf(
        create=lambda: 0.0,
        add=lambda acc, values: acc + float(len(values)),
        merge=lambda a, b: a + b,
        result=lambda acc: acc,
        column="kwh",
    )
    udaf_query = WindowQuery(Sliding(S, S), (("s", spread),), EventTime("ts"))
    assert not supports_native_combine(WindowAggregateKernel(["meter"], [udaf_query]), schema)
    naive = pa.schema([("meter", pa.string()), ("kwh", pa.float64()), ("ts", pa.timestamp("us"))])
    builtin = WindowAggregateKernel(["meter"], [WindowQuery(Sliding(S, S), (("n", agg.count()),), EventTime("ts"))])
    assert supports_native_combine(builtin, schema)
    assert not supports_native_combine(builtin, naive)


def test_a_constant_key_stays_with_its_partition(spark):
    """A window over a whole stream keys every record by one constant: Spark must not fold
    the key or the partition into a constant, or it drops them from the grouping and so from
    the exchange's hash, and the salt no longer steers the rows to their key group's
    partition (the keyed stage would refuse them)."""
    from pyspark.sql import functions as F

    records = _records(seed=4)
    kernel = WindowAggregateKernel(
        ["_all"], [WindowQuery(Sliding(S, S), (("n", agg.count()),), EventTime("ts"))], emit_keys=False
    )
    schema = pa.schema([f for f in records.schema if f.name != INGEST] + [pa.field("_all", pa.int32())])
    df = spark.createDataFrame(records.to_pandas(), to_spark(records.schema)).repartition(2).select("*", F.expr("0 AS _all"))
    ctx = BatchContext(1, 0, T0 + 5 * S, T0)
    stage = KeyedStagePlan(2, (0, 1, 1, 0))
    combine = native_combine(df, Operator(id="w", kind="window", name="w"), kernel, schema, ctx, stage, max_parallelism=4)
    _assert_partials_cross_one_exchange(combine.frame._jdf.queryExecution().executedPlan().toString())
    _assert_in_routed_partitions(combine.frame, stage.routing)


def _counting_pipeline(tag: str, spark_combines: bool):
    """Per meter, tumbling 1 s counts over a finite event-time source; with a UDAF (counting
    too) the window combines in Python and the source is observed on every record."""
    from sluice import Pipeline, sinks, sources
    from sluice import windows as W

    spec = sources.generator(
        fields={
            "meter": sources.Keys(7, prefix="m"),
            "kwh": sources.Uniform(0.0, 2.0),
            "ts": sources.EventTime(jitter=0.5, step=0.001),
        },
        total_rows=3_000,
        seed=3,
        start_time=1_700_000_000.0,
        max_rows_per_batch=1_000,
        watermark_delay=0.2,
    )
    counted = (
        agg.count()
        if spark_combines
        else agg.udaf(
            create=lambda: 0,
            add=lambda acc, values: acc + len(values),
            merge=lambda a, b: a + b,
            result=lambda acc: acc,
            column="kwh",
        )
    )
    p = Pipeline(f"stats_{tag}", partitions=2)
    p.source(spec, name="readings").key_by("meter").window(W.tumbling("1s")).aggregate(n=counted, name="counts").sink(
        sinks.memory(f"stats_{tag}")
    )
    return p


def test_a_source_feeding_spark_combine_is_measured_on_the_combined_rows(spark, tmp_path):
    """The source's rows and latest event time, measured by the keyed stage on Spark's
    combined rows, are the ones an observation of every record gives: same rows per batch,
    same watermarks, same windows."""
    import json

    from sluice.runtime.batch.compile import combined_directly
    from sluice.runtime.sinks import clear_memory, memory_table

    runs = {}
    shuffle = spark.conf.get("spark.sql.shuffle.partitions")
    for combines in (True, False):
        tag = "spark" if combines else "python"
        clear_memory(f"stats_{tag}")
        p = _counting_pipeline(tag, combines)
        checkpoint = tmp_path / tag
        result = p.run(str(checkpoint), spark=spark)
        # (the graph knows its schemas once validated, by the run)
        assert combined_directly(p.graph, p.graph["readings"]) == ("counts" if combines else None)
        done = sorted((checkpoint / "batches").glob("*.done.json"))
        runs[tag] = {
            "rows": [m.rows_in for m in result.metrics],
            "watermarks": [m.watermark for m in result.metrics],
            "max_event_us": [json.loads(f.read_text())["max_event_us"] for f in done],
            "windows": sorted(tuple(r.values()) for r in memory_table(f"stats_{tag}").to_pylist()),
        }
    # the executor sets the shuffle partitions on the query's own session, not the caller's
    assert spark.conf.get("spark.sql.shuffle.partitions") == shuffle != "2"
    assert runs["spark"]["rows"][:3] == [1_000, 1_000, 1_000]
    assert runs["spark"]["max_event_us"][0]["readings"] > 0
    assert runs["spark"] == runs["python"]


def test_a_window_kernel_shipped_to_a_worker_still_finds_its_udafs():
    """A layout keys its UDAF fields by the aggregates' identity: unpickled in a worker, with
    new objects, it must key them again (it failed there with a KeyError)."""
    import pickle

    from pyspark import cloudpickle

    schema = pa.schema([("meter", pa.string()), ("kwh", pa.float64()), ("ts", pa.timestamp("us", tz="UTC"))])
    spread = agg.udaf(
        create=lambda: 0.0,
        add=lambda acc, values: acc + float(len(values)),
        merge=lambda a, b: a + b,
        result=lambda acc: acc,
        column="kwh",
    )
    kernel = WindowAggregateKernel(["meter"], [WindowQuery(Sliding(S, S), (("s", spread),), EventTime("ts"))])
    kernel.layout(schema)  # cached, and shipped with the kernel
    shipped = pickle.loads(cloudpickle.dumps(kernel))
    ((_, shipped_udaf),) = shipped.queries[0].aggregates
    assert shipped_udaf is not spread
    assert shipped.layout(schema).udaf_field == {id(shipped_udaf): "udaf:0:kwh"}


def test_a_keyed_stage_refuses_rows_of_key_groups_routed_elsewhere(spark, tmp_path):
    """State is owned by one partition per key group: rows of a key group that reach another
    partition (here: combined for one routing table, run with another) fail the batch rather
    than split the key group's state."""
    from sluice.runtime.batch.stages import keyed_stage
    from sluice.runtime.batch.task_env import TaskEnv

    records = _records(seed=2)
    kernel = WindowAggregateKernel(["meter"], _queries()[:1])
    schema = pa.schema([f for f in records.schema if f.name != INGEST])
    op = Operator(id="w", kind="window", name="w", kernel=kernel)
    ctx = BatchContext(1, 0, None, T0 + 30 * S)
    df = spark.createDataFrame(records.to_pandas(), to_spark(records.schema)).repartition(2)
    combine = native_combine(df, op, kernel, schema, ctx, KeyedStagePlan(2, (0, 1, 1, 0)), max_parallelism=4)
    other = KeyedStagePlan(2, (1, 0, 0, 1))
    env = TaskEnv(ctx, str(tmp_path), None, max_parallelism=4)
    frame = keyed_stage(combine.frame, op, combine.schema, other, (str(tmp_path), op.id, ["meter"]), None, env)
    with pytest.raises(Exception, match="routed to other partitions"):
        frame.collect()
