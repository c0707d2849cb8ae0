"""The exchange in front of a keyed stage: how a batch's rows reach the partition that owns
their key group's state.

One interface, :func:`exchange`, picks one of three ways, by what the kernel can do:

* **Spark combine** (``spark_combine``): a window kernel whose partials are all built-ins is
  pre-aggregated by Spark itself, per (key, pane, map task), around Spark's own hash
  exchange; the *salt* (``salt``) makes that hash send each row to its key group's partition.
* **Python combine** (``python_combine``): another :class:`~sluice.runtime.kernels.keyed.CombiningKernel`
  pre-aggregates each map task's records in one ``mapInArrow`` pass, then the rows are routed.
* **Routing** (``routing``): the rows themselves, with their key group and the partition the
  Plan's routing table gives it, exchanged by that partition (``repartitionById``). Rows a
  fused Python chain combined already (a running aggregate's partials, ``runtime.batch.compile``)
  are routed the same way.

A keyed operator collocated with the keyed operator before it (``plan.collocation``) needs no
exchange: :func:`collocated_input` only adds the key group (and combines a window's records
per task first).

The modules import each other one way only: routing and salt are leaves, the combines use
them, and this package's ``exchange`` chooses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import pyarrow as pa

from sluice.graph.operators import Operator
from sluice.plan.physical import KeyedStagePlan
from sluice.runtime.batch.task_env import TaskEnv
from sluice.runtime.batch.task_metrics import MetricKey
from sluice.runtime.exchange.python_combine import combine_stage
from sluice.runtime.exchange.routing import MAX_PACKED_PARALLELISM, route, with_key_group
from sluice.runtime.exchange.spark_combine import (
    native_combine,
    prepare_hash_exchange,
    supports_native_combine,
    write_late,
)
from sluice.runtime.kernels.keyed import CombiningKernel, KeyedKernel

__all__ = [
    "Exchanged",
    "collocated_input",
    "combined_by_spark",
    "exchange",
    "prepare_hash_exchange",
    "receives_records",
]


class Exchanged(NamedTuple):
    """A keyed stage's input, routed: what :func:`exchange` returns."""

    frame: object  # the pyspark DataFrame of the rows, each in its key group's partition
    schema: pa.Schema  # its rows' schema without the hidden columns (records or combined rows)
    # what the driver must do once the batch's job has run, if anything (Spark's combine
    # fetches the late records then): returns metrics of the operator to add
    finish: Callable[[], dict] | None
    # each row's key group column also holds its key group at the keyed operator before,
    # packed (``routing.with_key_group``): the keyed stage counts the traffic and unpacks it
    traffic: bool = False


def combined_by_spark(kernel: KeyedKernel, in_schema: pa.Schema) -> bool:
    """True when Spark itself combines the input of ``kernel`` (records of ``in_schema``)."""
    return supports_native_combine(kernel, in_schema)


def receives_records(kernel: KeyedKernel, in_schema: pa.Schema, event_time: str | None) -> bool:
    """True when the exchange before ``kernel`` sends the records of ``in_schema`` themselves,
    uncombined, with the ``event_time`` column among theirs (if there is one): the keyed
    stage can then measure the statistics of the source they come from as it receives them
    (``SourceStats.records``), instead of Spark observing them."""
    if supports_native_combine(kernel, in_schema) or isinstance(kernel, CombiningKernel):
        return False
    return event_time is None or event_time in kernel.input_columns(in_schema)


def exchange(
    df,
    op: Operator,
    kernel: KeyedKernel,
    in_schema: pa.Schema,
    stage: KeyedStagePlan,
    env: TaskEnv,
    upstream_keys: list[str] | None = None,
    precombined: bool = False,
) -> Exchanged:
    """Route ``df`` to the partitions of a keyed stage, combining first where the kernel can.

    ``env.source_stats``: the statistics of the source whose records ``df`` holds, to be
    measured on Spark's combined rows (:class:`SourceStats`), or by the keyed stage on the
    records when they cross uncombined (:func:`receives_records`).
    ``upstream_keys``: the key columns of the keyed operator before, whose key groups' traffic
    to this operator's is to be counted (``plan.collocation.traffic_source``): only where the
    records themselves cross the exchange (a combine sends partials, one per key and pane).
    ``precombined``: ``df`` holds rows the chain before combined already (``in_schema`` is theirs)."""
    context, max_parallelism = env.context, env.max_parallelism
    if precombined:
        return Exchanged(route(df, kernel.key_columns, stage, max_parallelism, in_schema.names), in_schema, None)
    if supports_native_combine(kernel, in_schema):
        combined = native_combine(df, op, kernel, in_schema, context, stage, max_parallelism, env.source_stats)

        def fetch_late() -> dict:
            if not env.accumulator.value.get(MetricKey(op.id, "late_seen")):
                return {}
            return {"side_late": write_late(combined, op, context, env.root)}

        return Exchanged(combined.frame, combined.schema, fetch_late)
    if isinstance(kernel, CombiningKernel):
        if env.source_stats is not None:
            raise ValueError(f"operator {op.name!r}: source statistics are measured on Spark's combine or the records")
        df, in_schema = combine_stage(df, op, kernel, in_schema, env)
        return Exchanged(route(df, kernel.key_columns, stage, max_parallelism, in_schema.names), in_schema, None)
    read = kernel.input_columns(in_schema)  # only these cross the exchange
    if max_parallelism > MAX_PACKED_PARALLELISM:
        upstream_keys = None  # two key groups would not fit the key group column
    return Exchanged(
        route(df, kernel.key_columns, stage, max_parallelism, read, upstream_keys),
        pa.schema([in_schema.field(c) for c in read]),
        None,
        bool(upstream_keys),
    )


def collocated_input(
    df,
    op: Operator,
    kernel: KeyedKernel,
    in_schema: pa.Schema,
    stage: KeyedStagePlan,
    env: TaskEnv,
):
    """The input of a keyed operator that shares the stage of the keyed operator before it
    (``plan.collocation``): no exchange, since every row is in the partition of its key group
    already. Each row gets its key group (native SQL: the same hash the exchange uses, which
    the keyed stage checks against the routing table), and a window's records are combined
    per task first, in Python (Spark's own combine would bring an exchange back).

    Returns (frame, schema of its rows without the hidden columns)."""
    if isinstance(kernel, CombiningKernel):
        df, in_schema = combine_stage(df, op, kernel, in_schema, env)
    else:  # as before an exchange: only the columns the kernel reads go on
        in_schema = pa.schema([in_schema.field(c) for c in kernel.input_columns(in_schema)])
    return with_key_group(df, kernel.key_columns, stage, env.max_parallelism, in_schema.names), in_schema
