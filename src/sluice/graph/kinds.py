"""One definition per operator kind: its family, its parameters, its schema rule (which also
validates the operator against its inputs) and where the runtime finds its kernel.

An operator of the job graph is a kind name plus its typed spec (``graph.operators.Operator``,
``graph.specs``). Everything that depends on the kind is registered here, once, in an
:class:`OperatorKind`, so no code elsewhere compares kind names:

* ``spec``: the frozen dataclass of the kind's parameters (``graph.specs``), which also names
  the kind;
* ``family``: how it runs. ``native`` (a Spark expression), ``python`` (fused into a
  ``mapInArrow`` chain), ``keyed`` (after an exchange by key group, with state), ``source``,
  ``sink``;
* ``output_schema``: the rule giving the output schema from the input schemas, raising a
  :class:`~sluice.errors.PipelineError` naming the operator when the inputs do not fit;
* ``kernel``: for ``python`` and ``keyed`` kinds, the runtime's factory of the kernel, as
  ``"module:function"`` (the graph is pure and never imports the runtime; the runtime
  resolves the name, ``runtime.kernels.factory``);
* what the rest of Sluice asks of a kind instead of comparing names: ``passes_schema``,
  ``assumes_input_columns`` (validation), ``processing_element`` (``graph.alternates``),
  ``real_time`` (``plan.mode``), ``key_preserving`` (``plan.collocation``) and
  ``default_model`` (``plan.from_graph``).

Code that reads an operator's parameters reads its spec's typed fields
(``op.spec_as(AggregateOp).aggregates``), or dispatches on the spec's type.

The fluent API (``sluice.api``) builds operators, that is kinds and specs; it never
builds kernels. Pure Python: no Spark.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sluice.errors import PipelineError, SchemaError
from sluice.graph.aggregates import NUMERIC_AGGREGATES, Aggregate, UserAggregate
from sluice.graph.expressions import referenced_columns
from sluice.graph.specs import (
    AggregateOp,
    DeduplicateOp,
    FilterExprOp,
    FilterFnOp,
    FlatMapOp,
    JoinOp,
    KeyByOp,
    MapBatchesOp,
    MapOp,
    OperatorSpec,
    ProcessOp,
    ReduceOp,
    SelectOp,
    SinkOp,
    SourceOp,
    TopOp,
    UnionOp,
    WindowOp,
    WithColumnsOp,
)
from sluice.graph.windows import window_output_schema

if TYPE_CHECKING:
    from sluice.graph.operators import Operator

# (operator, input schema) -> output schema, or raises SchemaError. Supplied by the runtime.
ExpressionTyper = Callable[["Operator", pa.Schema], pa.Schema]
# (operator, its input schemas, the typer if any) -> its output schema (None: unknown yet)
SchemaRule = Callable[["Operator", list[pa.Schema | None], ExpressionTyper | None], pa.Schema | None]

SOURCE, SINK, NATIVE, PYTHON, KEYED = "source", "sink", "native", "python", "keyed"
FAMILIES = (SOURCE, SINK, NATIVE, PYTHON, KEYED)


@dataclass(frozen=True)
class OperatorKind:
    """What one kind of operator is, in one place."""

    spec: type[OperatorSpec]  # the kind's parameters; ``spec.kind`` is the kind's name
    family: str  # one of FAMILIES
    output_schema: SchemaRule
    # the runtime's kernel factory ("module:function") of a python or keyed kind: called with
    # (operator, input schema, output schema) for python kinds, (operator, input schemas) for
    # keyed ones
    kernel: str | None = None
    # its output columns are its input's: a schema assumed upstream flows through it
    passes_schema: bool = False
    # a Python operator whose output schema the user declares (schema=); without it, its output
    # is assumed to have its input's columns (a later column error then points back at it)
    assumes_input_columns: bool = False
    # it processes records (the application value averages over these, graph.alternates);
    # sources, sinks, key_by and union only move them
    processing_element: bool = True
    # Spark's real-time mode has an equivalent (plan.mode); the operator may still not fit
    real_time: bool = False
    # a keyed kind whose output rows carry the key values of the records they came from
    # (plan.collocation: its key groups can feed the next keyed operator's without an exchange)
    key_preserving: bool = False
    # the performance model (sluice.models) the planner uses when the operator names none
    default_model: str | None = None

    @property
    def name(self) -> str:
        return self.spec.kind

    def check(self, op: Operator, inputs: list[pa.Schema | None], typer: ExpressionTyper | None) -> pa.Schema | None:
        """Validate ``op`` against its input schemas; return its output schema."""
        if not isinstance(op.spec, self.spec):
            got = "none" if op.spec is None else type(op.spec).__name__
            raise fail(op, f"{self.name} operator without its parameters ({self.spec.__name__}, got {got})", PipelineError)
        return self.output_schema(op, inputs, typer)


KINDS: dict[str, OperatorKind] = {}


def register(kind: OperatorKind) -> OperatorKind:
    """Add a kind (a name may be registered once)."""
    if kind.family not in FAMILIES:
        raise ValueError(f"operator kind {kind.name!r}: family must be one of {FAMILIES}, got {kind.family!r}")
    if kind.name in KINDS and KINDS[kind.name] != kind:
        raise ValueError(f"operator kind {kind.name!r} is registered already")
    KINDS[kind.name] = kind
    return kind


def kind_of(name: str) -> OperatorKind:
    """The definition of the kind called ``name``."""
    try:
        return KINDS[name]
    except KeyError:
        raise ValueError(f"unknown operator kind {name!r}; known: {sorted(KINDS)}") from None


# ---- shared pieces of the rules ----------------------------------------------------------------
def fail(op: Operator, message: str, cls: type[PipelineError] = SchemaError) -> PipelineError:
    """An error of ``cls`` at the operator (its name and the user's line)."""
    return cls(message, op.name, op.location)


def require_columns(op: Operator, schema: pa.Schema | None, columns, what: str) -> None:
    if schema is None:
        return
    missing = [c for c in columns if c not in schema.names]
    if missing:
        raise fail(op, f"{what} uses unknown column(s) {missing}; available: {schema.names}")


def _first(inputs: list[pa.Schema | None]) -> pa.Schema | None:
    return inputs[0] if inputs else None


def _same_columns(a: pa.Schema, b: pa.Schema) -> bool:
    return [(f.name, f.type) for f in a] == [(f.name, f.type) for f in b]


def _orderable(dtype: pa.DataType) -> bool:
    return (
        pa.types.is_integer(dtype)
        or pa.types.is_floating(dtype)
        or pa.types.is_decimal(dtype)
        or pa.types.is_timestamp(dtype)
        or pa.types.is_date(dtype)
        or pa.types.is_string(dtype)
    )


def sum_type(col_type: pa.DataType | None) -> pa.DataType:
    """A sum's type: int64 over integers, a decimal of the column's scale and the widest
    precision over decimals (exact: money stays cents), float64 otherwise."""
    if col_type is not None and pa.types.is_integer(col_type):
        return pa.int64()
    if col_type is not None and pa.types.is_decimal(col_type):
        return pa.decimal128(38, col_type.scale)
    return pa.float64()


def aggregate_output_schema(
    keys: list[str], aggregates: dict[str, Aggregate], schema: pa.Schema | None, op: Any = None
) -> pa.Schema | None:
    """Keys, then one column per aggregate, typed from its input column; ``op`` names the
    operator in errors."""
    if schema is None:
        return None

    def error(message: str) -> PipelineError:
        return fail(op, message) if op is not None else SchemaError(message)

    fields = [schema.field(k) for k in keys]
    for name, agg in aggregates.items():
        if agg.column is not None:
            if agg.column not in schema.names:
                raise error(f"aggregate {name!r} uses unknown column(s) {[agg.column]}; available: {schema.names}")
            col_type = schema.field(agg.column).type
        else:
            col_type = None
        by = getattr(agg, "by", None)
        if by is not None and by not in schema.names:
            raise error(f"aggregate {name!r}: {agg.kind} by unknown column {by!r}; available: {schema.names}")
        if by is not None and not _orderable(schema.field(by).type):
            raise error(f"aggregate {name!r}: {agg.kind} cannot order by {by!r} of type {schema.field(by).type}")
        if agg.kind in (*NUMERIC_AGGREGATES, "min", "max") and col_type is not None:
            numeric = pa.types.is_integer(col_type) or pa.types.is_floating(col_type) or pa.types.is_decimal(col_type)
            orderable = numeric or pa.types.is_timestamp(col_type) or pa.types.is_string(col_type)
            if agg.kind in NUMERIC_AGGREGATES and not numeric:
                raise error(f"aggregate {name!r}: {agg.kind} needs a numeric column, {agg.column!r} is {col_type}")
            if not orderable:
                raise error(f"aggregate {name!r}: {agg.kind} cannot order {agg.column!r} of type {col_type}")
        if isinstance(agg, UserAggregate):
            out_type = agg.output_type(col_type)
        elif agg.kind == "count":
            out_type = pa.int64()
        elif agg.kind == "mean":
            out_type = pa.float64()
        elif agg.kind == "sum":
            out_type = sum_type(col_type)
        else:  # min, max
            out_type = col_type
        fields.append(pa.field(name, out_type))
    return pa.schema(fields)


# ---- the rules ---------------------------------------------------------------------------------
def _source(op, inputs, typer):
    return op.schema


def _same_as_input(op, inputs, typer):
    return _first(inputs)


def _union(op, inputs, typer):
    schema = _first(inputs)
    for other in inputs[1:]:
        if schema is not None and other is not None and not _same_columns(schema, other):
            raise fail(op, f"union of streams with different schemas: {schema} vs {other}")
    return schema


def _filter_expr(op, inputs, typer):
    schema = _first(inputs)
    require_columns(op, schema, referenced_columns(op.spec.expr), f"filter {op.spec.expr!r}")
    return typer(op, schema) if typer and schema is not None else schema


def _expressions(exprs_of: Callable[[Any], list[str]]) -> SchemaRule:
    def rule(op, inputs, typer):
        schema = _first(inputs)
        for e in exprs_of(op):
            require_columns(op, schema, referenced_columns(e), f"expression {e!r}")
        if typer and schema is not None:
            return typer(op, schema)
        return None  # names known, types only Spark knows

    return rule


def _key_by(op, inputs, typer):
    schema = _first(inputs)
    require_columns(op, schema, op.spec.keys, "key_by")
    return schema


def _declared_or_input(op, inputs, typer):
    return op.schema if op.schema is not None else _first(inputs)


def _aggregate(op, inputs, typer):
    return aggregate_output_schema(op.spec.keys, op.spec.aggregates, _first(inputs), op)


def _window(op, inputs, typer):
    schema = _first(inputs)
    if schema is None:
        return op.schema
    try:
        return window_output_schema(op.spec.keys, op.spec.queries, schema, op.spec.emit_keys)
    except PipelineError as exc:
        raise fail(op, str(exc), type(exc)) from None


def _join(op, inputs, typer):
    left, right = [*inputs, None, None][:2]
    if left is None or right is None:
        raise fail(
            op,
            "join: the schemas of both sides must be known; give schema= to the Python "
            "operators before it (a select's types come from Spark's analyzer)",
            PipelineError,
        )
    try:
        return op.spec.join.output_schema(left, right)
    except PipelineError as exc:
        raise fail(op, str(exc), type(exc)) from None


def _top(op, inputs, typer):
    schema = _first(inputs)
    if schema is None:
        return None
    require_columns(op, schema, op.spec.by, "top(by=...)")
    if "rank" in schema.names:
        raise fail(op, "top: the input has a column 'rank', the name of the rank it emits; rename it first")
    return schema.append(pa.field("rank", pa.int32()))


_STATELESS = "sluice.runtime.kernels.stateless"
_FACTORY = "sluice.runtime.kernels.factory"

for _kind in (
    OperatorKind(SourceOp, SOURCE, _source, processing_element=False, real_time=True),
    OperatorKind(SinkOp, SINK, _same_as_input, passes_schema=True, processing_element=False, real_time=True),
    OperatorKind(UnionOp, NATIVE, _union, passes_schema=True, processing_element=False, real_time=True),
    OperatorKind(FilterExprOp, NATIVE, _filter_expr, passes_schema=True, real_time=True),
    OperatorKind(SelectOp, NATIVE, _expressions(lambda op: op.spec.exprs), real_time=True),
    OperatorKind(WithColumnsOp, NATIVE, _expressions(lambda op: list(op.spec.columns.values())), real_time=True),
    OperatorKind(KeyByOp, NATIVE, _key_by, passes_schema=True, processing_element=False, real_time=True),
    OperatorKind(MapBatchesOp, PYTHON, _declared_or_input, kernel=f"{_STATELESS}:MapBatchesKernel", assumes_input_columns=True),
    OperatorKind(MapOp, PYTHON, _declared_or_input, kernel=f"{_STATELESS}:RecordKernel", assumes_input_columns=True),
    OperatorKind(FlatMapOp, PYTHON, _declared_or_input, kernel=f"{_STATELESS}:RecordKernel", assumes_input_columns=True),
    OperatorKind(FilterFnOp, PYTHON, _same_as_input, kernel=f"{_STATELESS}:RecordKernel", passes_schema=True),
    OperatorKind(
        AggregateOp,
        KEYED,
        _aggregate,
        kernel=f"{_FACTORY}:aggregate_kernel",
        real_time=True,
        key_preserving=True,
        default_model="builtin_aggregate",
    ),
    OperatorKind(ReduceOp, KEYED, _same_as_input, kernel=f"{_FACTORY}:reduce_kernel", passes_schema=True, key_preserving=True),
    OperatorKind(ProcessOp, KEYED, _declared_or_input, kernel=f"{_FACTORY}:process_kernel"),
    OperatorKind(
        WindowOp, KEYED, _window, kernel=f"{_FACTORY}:window_kernel_of", key_preserving=True, default_model="builtin_window"
    ),
    OperatorKind(DeduplicateOp, KEYED, _same_as_input, kernel=f"{_FACTORY}:deduplicate_kernel", passes_schema=True),
    OperatorKind(TopOp, KEYED, _top, kernel=f"{_FACTORY}:top_kernel"),
    # two inputs, the keyed streams of its two sides (sluice.graph.joins)
    OperatorKind(JoinOp, KEYED, _join, kernel=f"{_FACTORY}:join_kernel_of", default_model="builtin_join"),
):
    register(_kind)
