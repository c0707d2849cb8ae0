"""The typed parameters of each kind of operator: one frozen dataclass per kind.

An operator of the job graph (``graph.operators.Operator``) is a kind plus its spec, an
instance of the kind's class here (``Filter(expr="kwh > 0")``, ``Aggregate(keys=["meter"],
aggregates={...})``). The kind registry (``graph.kinds``) names the spec class of every kind
and checks an operator's spec against it, so code that reads an operator's parameters reads
typed fields (``op.spec_as(WindowSpec).queries``), never entries of a dict.

Fields keep the types the fluent API has always given them (lists of key columns, the
aggregates' dict), so kernels and the identity record (``pipeline.json``) see the same
values. Pure Python: no Spark.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pyarrow as pa

from sluice.graph.aggregates import Aggregate
from sluice.graph.joins import StreamJoin, TableLookup
from sluice.graph.ttl import StateTTL
from sluice.graph.windows import TimeDomain, WindowQuery


@dataclass(frozen=True, kw_only=True)
class OperatorSpec:
    """What every kind's spec is: ``kind`` names the kind (``graph.kinds``) it belongs to."""

    kind: ClassVar[str] = ""


# ---- sources and sinks -----------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class SourceOp(OperatorSpec):
    kind: ClassVar[str] = "source"
    connector: Any  # a graph.sources.SourceSpec (or a connector's spec)
    idle_timeout_us: int | None = None  # a source silent this long holds no watermark back


@dataclass(frozen=True, kw_only=True)
class SinkOp(OperatorSpec):
    kind: ClassVar[str] = "sink"
    connector: Any  # a graph.sinks.SinkSpec (or a connector's spec)


# ---- native: Spark expressions ---------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class UnionOp(OperatorSpec):
    kind: ClassVar[str] = "union"


@dataclass(frozen=True, kw_only=True)
class FilterExprOp(OperatorSpec):
    kind: ClassVar[str] = "filter_expr"
    expr: str  # a Spark SQL condition


@dataclass(frozen=True, kw_only=True)
class SelectOp(OperatorSpec):
    kind: ClassVar[str] = "select"
    exprs: list[str]  # Spark SQL expressions, one per output column


@dataclass(frozen=True, kw_only=True)
class WithColumnsOp(OperatorSpec):
    kind: ClassVar[str] = "with_columns"
    columns: dict[str, str]  # output column -> Spark SQL expression


@dataclass(frozen=True, kw_only=True)
class KeyByOp(OperatorSpec):
    kind: ClassVar[str] = "key_by"
    keys: list[str]


# ---- Python functions ------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class FunctionSpec(OperatorSpec):
    """An operator that runs a user's function, which may have alternates
    (``graph.alternates``): ``fn`` is then the function of ``active``, the default one."""

    fn: Callable[..., Any]
    alternates: dict[str, Any] = field(default_factory=dict)  # name -> graph.alternates.Alt
    active: str | None = None


@dataclass(frozen=True, kw_only=True)
class MapBatchesOp(FunctionSpec):
    kind: ClassVar[str] = "map_batches"
    format: str = "arrow"  # what fn takes and returns: "arrow" or "pandas"


@dataclass(frozen=True, kw_only=True)
class MapOp(FunctionSpec):
    kind: ClassVar[str] = "map"


@dataclass(frozen=True, kw_only=True)
class FlatMapOp(FunctionSpec):
    kind: ClassVar[str] = "flat_map"


@dataclass(frozen=True, kw_only=True)
class FilterFnOp(OperatorSpec):
    kind: ClassVar[str] = "filter_fn"
    fn: Callable[..., Any]


# ---- keyed: state per key --------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class KeyedSpec(OperatorSpec):
    """A stateful operator: its key columns, and how long an idle key's state lives."""

    keys: list[str]
    ttl: StateTTL | None = None


@dataclass(frozen=True, kw_only=True)
class AggregateOp(KeyedSpec):
    kind: ClassVar[str] = "aggregate"
    aggregates: dict[str, Aggregate]  # output column -> aggregate
    initial_state: Any = None  # a table of each key's values before the first batch (runtime.state.initial)


@dataclass(frozen=True, kw_only=True)
class ReduceOp(KeyedSpec, FunctionSpec):
    kind: ClassVar[str] = "reduce"


@dataclass(frozen=True, kw_only=True)
class ProcessOp(KeyedSpec, FunctionSpec):
    kind: ClassVar[str] = "process"
    on_timer: Callable[..., Any] | None = None
    state_schema: pa.Schema | None = None  # typed state, one column per field (graph.state_schema)
    initial_state: Any = None  # a table of each key's state before the first batch (runtime.state.initial)


@dataclass(frozen=True, kw_only=True)
class WindowOp(KeyedSpec):
    kind: ClassVar[str] = "window"
    queries: list[WindowQuery]  # sharing one set of panes
    emit_keys: bool = True


@dataclass(frozen=True, kw_only=True)
class DeduplicateOp(KeyedSpec):
    kind: ClassVar[str] = "deduplicate"
    within: int  # microseconds
    time: TimeDomain


@dataclass(frozen=True, kw_only=True)
class TopOp(KeyedSpec):
    kind: ClassVar[str] = "top"
    n: int
    by: list[str]
    ascending: bool = False


@dataclass(frozen=True, kw_only=True)
class JoinOp(KeyedSpec):
    """Two inputs, the keyed streams of its two sides (``graph.joins``)."""

    kind: ClassVar[str] = "join"
    join: StreamJoin | TableLookup
