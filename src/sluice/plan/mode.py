"""Which execution mode a job runs in: Spark micro-batches, or Spark's real-time mode.

A micro-batch has a fixed cost (trigger, offset log, planning, task launch, state commit,
the sink's commit, Sluice's own records): on a small machine its latency cannot go below
a floor whatever the rate (``docs/latency.md`` measures it). Spark's real-time mode (Spark
4.1+, ``trigger(realTime=...)``) runs long-lived tasks that process each record as it
arrives, with no per-batch commit on the record's path: its latency is tens of
milliseconds. It runs only some pipelines: a Kafka source, stateless operators and Spark's
own aggregation or deduplication, in update mode, into a Kafka or ``foreach`` sink; no
``foreachBatch`` (so not Sluice's per-batch protocol), no Python operators.

``choose_mode`` decides from the job's latency goal and the pipeline's shape alone: a
goal below the micro-batch floor and a pipeline that fits runs in real-time mode; a goal
the micro-batches can reach, or a pipeline that does not fit, runs in micro-batches, with
the reasons. Pure: no Spark.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from sluice.errors import ConfigError
from sluice.graph import JobGraph
from sluice.graph.aggregates import UserAggregate
from sluice.graph.kafka import KafkaSink, KafkaSource
from sluice.graph.kinds import KEYED, NATIVE, PYTHON, SINK, SOURCE
from sluice.graph.specs import AggregateOp, SinkOp, SourceOp

MICRO_BATCH = "micro-batch"
REAL_TIME = "real-time"

MICROBATCH_FLOOR_S = 1.0
"""The lowest p95 latency Sluice's micro-batches reach on the reference 2-core machine for
a small keyed aggregation over Kafka (``docs/latency.md``): a goal below it needs real-time
mode. ``SLUICE_MICROBATCH_FLOOR_S`` overrides it (another machine, another floor)."""

REAL_TIME_BATCH = "5 seconds"
"""Spark's real-time batch duration: how often it checkpoints offsets and state (Spark's
minimum), not a latency. A crash replays at most this much input."""

SPARK_KAFKA_PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"
"""Spark's JVM Kafka connector, which real-time mode reads and writes Kafka through (Maven
Central has no 4.3 build; the 4.2.0 one runs on PySpark 4.3.0)."""

RT_AGGREGATES = {"count", "sum", "min", "max", "mean"}

GUARANTEE_REAL_TIME = (
    "state exactly once (Spark's state store checkpointed with the source offsets every batch "
    "duration; a crash replays the input since the last checkpoint into the restored state); "
    "the Kafka sink at least once (records written since the last checkpoint are written again "
    "after a crash: an aggregate's update carries its key and running value, so a reader keeping "
    "the latest value per key sees no double count)"
)
GUARANTEE_MICRO_BATCH = "exactly once end to end (state, sinks and Sluice's batch records commit per batch)"


@dataclass(frozen=True)
class MicroBatchConfig:
    """The micro-batch settings that give the lowest latency Sluice reaches."""

    trigger_interval_s: float = 0.0  # the next batch starts as soon as one commits
    max_rows_per_batch: int | None = None  # admission left to the autopilot
    async_records: bool = True  # metrics and decisions written off the batch's path


@dataclass(frozen=True)
class ModeDecision:
    """The mode a job runs in, why, and what it guarantees there."""

    mode: str  # MICRO_BATCH or REAL_TIME
    reasons: tuple[str, ...]
    guarantee: str
    floor_s: float
    goal_s: float | None = None
    real_time_batch: str | None = None  # REAL_TIME only: Spark's checkpoint interval
    micro_batch: MicroBatchConfig | None = None  # MICRO_BATCH only
    packages: tuple[str, ...] = field(default=())  # Spark packages the mode needs

    @property
    def real_time(self) -> bool:
        return self.mode == REAL_TIME

    def describe(self) -> str:
        return f"{self.mode}: " + "; ".join(self.reasons)

    def record(self) -> dict:
        """The decision as one record of the job's decision log (``control.decisions``)."""
        return {
            "type": "mode",
            "mode": self.mode,
            "reason": "; ".join(self.reasons),
            "guarantee": self.guarantee,
            "floor_s": self.floor_s,
            "goal_s": self.goal_s,
            "real_time_batch": self.real_time_batch,
        }


def microbatch_floor_s() -> float:
    value = os.environ.get("SLUICE_MICROBATCH_FLOOR_S")
    if value is None:
        return MICROBATCH_FLOOR_S
    try:
        floor = float(value)
    except ValueError:
        floor = -1.0
    if floor <= 0:
        raise ConfigError(f"SLUICE_MICROBATCH_FLOOR_S must be a positive number of seconds, got {value!r}")
    return floor


def real_time_misfits(graph: JobGraph) -> list[str]:
    """Why ``graph`` cannot run in Spark's real-time mode ([] when it can), one reason per
    operator that does not fit."""
    reasons = []
    for op in graph.operators:
        family = op.definition.family
        if family == SOURCE:
            spec = op.spec_as(SourceOp).connector
            if not isinstance(spec, KafkaSource):
                reasons.append(f"source {op.name!r} is {type(spec).__name__}: real-time mode reads only Kafka")
            elif spec.format not in ("json", "raw"):
                reasons.append(f"source {op.name!r} reads {spec.format}: real-time mode here decodes JSON or raw values")
            elif spec.event_time is not None:
                reasons.append(f"source {op.name!r} has event time: Sluice's watermarks and windows run in micro-batches")
        elif family == SINK:
            spec = op.spec_as(SinkOp).connector
            if not isinstance(spec, KafkaSink):
                reasons.append(f"sink {op.name!r} is {type(spec).__name__}: real-time mode writes to Kafka or foreach sinks only")
            elif spec.format != "json" or spec.headers:
                reasons.append(
                    f"sink {op.name!r} writes {spec.format} with headers {list(spec.headers)}: real-time "
                    f"mode here writes JSON values without headers"
                )
        elif family == PYTHON:
            reasons.append(
                f"{op.kind} {op.name!r} is a Python operator: real-time mode runs Spark's own operators only (no mapInArrow)"
            )
        elif family == NATIVE and not op.definition.real_time:
            reasons.append(f"{op.kind} {op.name!r} has no real-time equivalent")
        elif family == KEYED:
            if not isinstance(op.spec, AggregateOp):
                reasons.append(
                    f"{op.kind} {op.name!r}: real-time mode runs Spark's aggregation only; "
                    f"{op.kind} needs Sluice's key-group state (micro-batches)"
                )
                continue
            if op.spec.ttl is not None:
                reasons.append(f"aggregate {op.name!r} has a ttl: Spark's aggregation keeps every key")
            for out, agg in op.spec.aggregates.items():
                if isinstance(agg, UserAggregate) or agg.kind not in RT_AGGREGATES:
                    reasons.append(
                        f"aggregate {op.name!r}: {out} = {agg.kind} is not one of Spark's aggregates {sorted(RT_AGGREGATES)}"
                    )
    keyed = [op for op in graph.operators if op.is_keyed]
    if len(keyed) > 1:
        reasons.append(
            f"{len(keyed)} stateful operators ({', '.join(op.name for op in keyed)}): real-time mode here runs one aggregation"
        )
    return reasons


def choose_mode(graph: JobGraph, floor_s: float | None = None) -> ModeDecision:
    """The mode ``graph`` runs in, from its latency goal and its shape (module docstring)."""
    floor = microbatch_floor_s() if floor_s is None else floor_s
    goals = getattr(graph, "goals", None)
    goal = None if goals is None else goals.latency_s
    best = MicroBatchConfig()
    if goal is None:
        return ModeDecision(
            MICRO_BATCH, ("no latency goal: micro-batches, exactly once",), GUARANTEE_MICRO_BATCH, floor, None, micro_batch=best
        )
    if goal >= floor:
        return ModeDecision(
            MICRO_BATCH,
            (
                f"the latency goal {goal * 1000:.0f} ms is within reach of micro-batches "
                f"(floor {floor * 1000:.0f} ms): exactly once",
            ),
            GUARANTEE_MICRO_BATCH,
            floor,
            goal,
            micro_batch=best,
        )
    misfits = real_time_misfits(graph)
    if misfits:
        return ModeDecision(
            MICRO_BATCH,
            (
                f"the latency goal {goal * 1000:.0f} ms is below the micro-batch floor "
                f"{floor * 1000:.0f} ms, but the pipeline cannot run in real-time mode",
                *misfits,
                "running the fastest micro-batches instead (trigger 0, records "
                "written off the batch's path); the goal will likely be missed",
            ),
            GUARANTEE_MICRO_BATCH,
            floor,
            goal,
            micro_batch=best,
        )
    return ModeDecision(
        REAL_TIME,
        (
            f"the latency goal {goal * 1000:.0f} ms is below the micro-batch floor "
            f"{floor * 1000:.0f} ms and the pipeline fits Spark's real-time mode "
            f"(Kafka source, Spark's own operators, Kafka sink)",
        ),
        GUARANTEE_REAL_TIME,
        floor,
        goal,
        real_time_batch=REAL_TIME_BATCH,
        packages=(SPARK_KAFKA_PACKAGE,),
    )
