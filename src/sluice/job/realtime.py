"""A pipeline in Spark's real-time mode (``plan.mode``): one Spark query, no per-batch protocol.

The pipeline's graph becomes Spark's own operators: Spark's Kafka source (``from_json`` of
the values with the source's schema, its metadata columns as Sluice names them), native
filters and projections, Spark's ``groupBy().agg()`` for the one aggregation, and Spark's
Kafka sink (the row as a JSON value, the key columns as the record key), in update mode
with ``trigger(realTime=...)``. Spark checkpoints offsets and state under
``<checkpoint>/realtime`` every batch duration; what that guarantees is
``plan.mode.GUARANTEE_REAL_TIME``. Needs Spark's JVM Kafka connector on the session
(``plan.mode.SPARK_KAFKA_PACKAGE`` in ``spark.jars.packages``).
"""

from __future__ import annotations

import os
import time
from typing import Any

from sluice.core.decisions import DecisionLog
from sluice.errors import ConfigError
from sluice.graph import JobGraph
from sluice.graph.kafka import METADATA
from sluice.graph.specs import AggregateOp, FilterExprOp, KeyByOp, SelectOp, SinkOp, SourceOp, UnionOp, WithColumnsOp
from sluice.job.options import RunOptions
from sluice.job.result import JobResult
from sluice.plan.mode import REAL_TIME_BATCH, SPARK_KAFKA_PACKAGE, ModeDecision, real_time_misfits
from sluice.runtime.checkpoint import Checkpoint
from sluice.runtime.lease import Lease
from sluice.runtime.session import spark_session

REALTIME_DIR = "realtime"


def _aggregate(agg, F):
    column = agg.column
    if agg.kind == "count":
        return F.count(F.lit(1)) if column is None else F.count(F.col(column))
    return {"sum": F.sum, "min": F.min, "max": F.max, "mean": F.avg}[agg.kind](F.col(column))


def _source_frame(spark, spec):
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", spec.bootstrap)
        .option("subscribe", ",".join(spec.topics))
        .option("startingOffsets", spec.starting_offsets)
    )
    for key, value in spec.config:  # the client's own settings (security, ...)
        reader = reader.option(f"kafka.{key}", value)
    raw = reader.load()
    if spec.format == "raw":
        columns = [F.col("value")]
    else:
        assert spec.value_schema is not None  # set by KafkaSource
        parsed = F.from_json(F.col("value").cast("string"), from_arrow_schema(spec.value_schema))
        columns = [parsed.getField(name).alias(name) for name in spec.value_schema.names]
    for name in spec.metadata:
        columns.append(F.col(name).alias(METADATA[name].name))
    return raw.select(*columns)


def build_query(spark, graph: JobGraph, checkpoint: str | Checkpoint, batch: str = REAL_TIME_BATCH):
    """The pipeline as one started Spark query in real-time mode (raises ConfigError naming
    what does not fit)."""
    from pyspark.sql import functions as F

    misfits = real_time_misfits(graph)
    if misfits:
        raise ConfigError("the pipeline cannot run in real-time mode: " + "; ".join(misfits))
    sinks = graph.sinks()
    if len(sinks) != 1:
        raise ConfigError(f"real-time mode runs one query with one sink; the pipeline has {len(sinks)}")
    frames: dict[str, Any] = {}
    for op in graph.topological_order():
        inputs = [frames[i] for i in op.inputs]
        match op.spec:
            case SourceOp(connector=connector):
                frames[op.id] = _source_frame(spark, connector)
            case FilterExprOp(expr=expr):
                frames[op.id] = inputs[0].filter(expr)
            case SelectOp(exprs=exprs):
                frames[op.id] = inputs[0].selectExpr(*exprs)
            case WithColumnsOp(columns=columns):
                frames[op.id] = inputs[0].withColumns({n: F.expr(e) for n, e in columns.items()})
            case KeyByOp() | SinkOp():
                frames[op.id] = inputs[0]
            case UnionOp():
                out = inputs[0]
                for other in inputs[1:]:
                    out = out.unionByName(other)
                frames[op.id] = out
            case AggregateOp(keys=keys, aggregates=aggregates):
                aggs = [_aggregate(a, F).alias(name) for name, a in aggregates.items()]
                frames[op.id] = inputs[0].groupBy(*keys).agg(*aggs)
    sink = sinks[0]
    spec = sink.connector
    frame = frames[sink.id]
    key = None
    if len(spec.key) == 1:
        key = F.col(spec.key[0]).cast("string")
    elif spec.key:
        key = F.to_json(F.array(*[F.col(c).cast("string") for c in spec.key]))
    out = frame.select(
        *([key.alias("key")] if key is not None else []), F.to_json(F.struct(*[F.col(c) for c in frame.columns])).alias("value")
    )
    location = Checkpoint.of(checkpoint).location(REALTIME_DIR)
    writer = (
        out.writeStream.format("kafka")
        .option("kafka.bootstrap.servers", spec.bootstrap)
        .option("topic", spec.topic)
        .option("checkpointLocation", location)
        .outputMode("update")
    )
    for k, v in spec.config:
        writer = writer.option(f"kafka.{k}", v)
    return writer.queryName(f"sluice_rt_{graph.name}_{int(time.time() * 1000)}").trigger(realTime=batch).start()


def has_kafka_connector(spark) -> bool:
    """Whether the session can load Spark's Kafka source (its jar is on the classpath)."""
    jvm = spark.sparkContext._jvm
    try:
        jvm.java.lang.Class.forName(
            "org.apache.spark.sql.kafka010.KafkaSourceProvider", True, jvm.Thread.currentThread().getContextClassLoader()
        )
        return True
    except Exception:  # py4j wraps the ClassNotFoundException
        return False


def run_realtime(pipeline, checkpoint: str | Checkpoint, decision: ModeDecision, options: RunOptions) -> JobResult:
    """Run ``pipeline`` in real-time mode until ``options.duration`` passes or
    ``options.stop_when(query)`` says so, holding the checkpoint's lease (``runtime.lease``)
    as a micro-batch run does.
    The decision goes to the job's decision log first. Returns a ``JobResult`` (no
    per-batch metrics: real-time mode has no Sluice batches)."""
    checkpoint = Checkpoint.of(checkpoint)
    lease = Lease(checkpoint)
    lease.acquire(wait=True, timeout_s=lease.ttl + lease.grace + 1.0)
    lease.start_heartbeat()
    spark, master, duration, stop_when = options.spark, options.master, options.duration, options.stop_when
    try:
        if spark is None:
            conf = dict(options.spark_conf or {})
            packages = [p for p in conf.get("spark.jars.packages", "").split(",") if p]
            conf["spark.jars.packages"] = ",".join(dict.fromkeys([*packages, *decision.packages]))
            # every source partition and every shuffle partition holds a task slot for the
            # whole batch duration (Spark refuses the query with fewer): task threads, not cores
            cores = os.cpu_count() or 2
            conf.setdefault("spark.sql.shuffle.partitions", str(cores))
            spark = spark_session(master=master or os.environ.get("SLUICE_MASTER", f"local[{2 * cores}]"), conf=conf)
        if not has_kafka_connector(spark):
            raise ConfigError(
                f"real-time mode needs Spark's Kafka connector on the session: create it with "
                f"spark.jars.packages={SPARK_KAFKA_PACKAGE} (sluice run --packages)"
            )
        DecisionLog(checkpoint).append({**decision.record(), "batch_id": -1, "time": time.time()})
        print(f"sluice: {decision.describe()}", flush=True)
        started = time.time()
        query = build_query(spark, pipeline.graph, checkpoint, decision.real_time_batch or REAL_TIME_BATCH)
        try:
            while query.isActive and query.exception() is None:
                if duration is not None and time.time() - started >= duration:
                    break
                if stop_when is not None and stop_when(query):
                    break
                lease.check()
                time.sleep(0.1)
        finally:
            error = query.exception()
            rows = sum(int(p.get("numInputRows", 0)) for p in query.recentProgress or [])
            query.stop()
    finally:
        lease.release()
    if error is not None:
        raise ConfigError(f"the real-time query failed: {str(error).splitlines()[0]}")
    return JobResult(checkpoint.uri, 0, rows, time.time() - started)
