"""The job graph: operators and the edges between them, and its validation.

Pure Python: building, checking and walking a dataflow needs no Spark. The runtime later
asks Spark only for what Spark alone knows (result types of SQL expressions), through the
``typer`` hook of :func:`JobGraph.validate`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa

from sluice.errors import CycleError, PipelineError, SchemaError
from sluice.graph.expressions import output_name, referenced_columns
from sluice.graph.operators import Operator

# (operator, input schema) -> output schema, or raises SchemaError. Supplied by the runtime.
ExpressionTyper = Callable[[Operator, pa.Schema], pa.Schema]

NUMERIC_AGGREGATES = ("sum", "mean")


@dataclass(frozen=True)
class Edge:
    upstream: str
    downstream: str
    # how records travel: "forward" (fused, same task) or "key" (exchange by key group)
    partitioning: str = "forward"


class JobGraph:
    """A directed acyclic graph of :class:`Operator` s."""

    def __init__(self, name: str = "pipeline", max_parallelism: int = 128):
        self.name = name
        self.max_parallelism = max_parallelism
        self._operators: dict[str, Operator] = {}
        self.constraints: list = []  # LatencyConstraint s (graph.constraints), checked by validate
        self.economics = None  # graph.economics.Economics: prices and break-even costs (None: the defaults)

    # ---- building -------------------------------------------------------------------------
    def add(self, op: Operator) -> Operator:
        if op.id in self._operators:
            raise PipelineError(f"duplicate operator id {op.id!r}", op.name, op.location)
        for upstream in op.inputs:
            if upstream not in self._operators:
                raise PipelineError(f"input {upstream!r} is not an operator of this pipeline", op.name, op.location)
        self._operators[op.id] = op
        return op

    def new_id(self, kind: str) -> str:
        n = sum(1 for o in self._operators.values() if o.kind == kind) + 1
        candidate = f"{kind}_{n}"
        while candidate in self._operators:
            n += 1
            candidate = f"{kind}_{n}"
        return candidate

    # ---- reading --------------------------------------------------------------------------
    @property
    def operators(self) -> list[Operator]:
        return list(self._operators.values())

    def __getitem__(self, op_id: str) -> Operator:
        return self._operators[op_id]

    def __contains__(self, op_id: str) -> bool:
        return op_id in self._operators

    @property
    def edges(self) -> list[Edge]:
        out = []
        for op in self._operators.values():
            for upstream in op.inputs:
                kind = "key" if op.is_keyed else "forward"
                out.append(Edge(upstream, op.id, kind))
        return out

    def consumers(self, op_id: str) -> list[Operator]:
        return [o for o in self._operators.values() if op_id in o.inputs]

    def sources(self) -> list[Operator]:
        return [o for o in self._operators.values() if o.kind == "source"]

    def sinks(self) -> list[Operator]:
        return [o for o in self._operators.values() if o.kind == "sink"]

    def topological_order(self) -> list[Operator]:
        """Operators with every input before its consumers; raises CycleError on a cycle."""
        indegree = {oid: len(op.inputs) for oid, op in self._operators.items()}
        ready = [oid for oid, d in indegree.items() if d == 0]
        order: list[Operator] = []
        while ready:
            oid = ready.pop(0)
            order.append(self._operators[oid])
            for consumer in self.consumers(oid):
                indegree[consumer.id] -= consumer.inputs.count(oid)
                if indegree[consumer.id] == 0:
                    ready.append(consumer.id)
        if len(order) != len(self._operators):
            stuck = next(o for o in self._operators.values() if indegree[o.id] > 0)
            raise CycleError("the dataflow has a cycle through this operator", stuck.name, stuck.location)
        return order

    def __iter__(self) -> Iterator[Operator]:
        return iter(self.topological_order())

    # ---- validation -----------------------------------------------------------------------
    def validate(self, typer: ExpressionTyper | None = None) -> None:
        """Check the graph before anything runs, and fill in every operator's schema.

        Raises a :class:`PipelineError` subclass naming the operator and the user's line.
        """
        order = self.topological_order()
        if not self.sources():
            raise PipelineError("the pipeline has no source")
        if not self.sinks():
            raise PipelineError("the pipeline has no sink: nothing would be written (use .sink(...))")
        assumed: dict[str, Operator] = {}  # operator id -> the Python operator whose schema it assumes
        for op in order:
            inputs = [self._operators[i].schema for i in op.inputs]
            if op.kind != "source" and not op.inputs:
                raise PipelineError("operator has no input", op.name, op.location)
            if op.kind not in ("sink",) and op.kind != "source" and not self.consumers(op.id):
                raise PipelineError(
                    "this stream goes nowhere: add a sink or remove the operator", op.name, op.location
                )
            declared = op.schema
            culprit = next((assumed[i] for i in op.inputs if i in assumed), None)
            try:
                op.schema = _check(op, inputs, typer)
            except SchemaError as exc:
                if culprit is None:
                    raise
                raise _schema_probably_missing(culprit, exc) from None
            if op.kind in ("map_batches", "map", "flat_map") and declared is None:
                assumed[op.id] = op
            elif culprit is not None and op.kind in _SCHEMA_PASSING:
                assumed[op.id] = culprit

        from sluice.graph.constraints import validate_constraints

        validate_constraints(self, self.constraints)


# operators whose output columns are their input's: an assumed schema flows through them
_SCHEMA_PASSING = frozenset({"filter_expr", "filter_fn", "key_by", "union", "reduce", "sink"})


def _schema_probably_missing(culprit: Operator, error: SchemaError) -> SchemaError:
    """A column error downstream of a Python operator without ``schema=`` is most likely that
    operator's missing output schema (it was assumed to keep its input's columns): say so at
    that operator, and keep the downstream error as the evidence."""
    return SchemaError(
        f"{culprit.kind} has no schema=, so its output was assumed to have its input's columns, and a later "
        f"operator then failed: {error}. Its output schema is probably missing: pass schema={{'column': 'type', "
        f"...}} (or a pyarrow.Schema) to the {culprit.kind}",
        culprit.name, culprit.location)


def _fail(op: Operator, message: str, cls: type[PipelineError] = SchemaError) -> PipelineError:
    return cls(message, op.name, op.location)


def _require_columns(op: Operator, schema: pa.Schema | None, columns, what: str) -> None:
    if schema is None:
        return
    missing = [c for c in columns if c not in schema.names]
    if missing:
        raise _fail(op, f"{what} uses unknown column(s) {missing}; available: {schema.names}")


def _check(op: Operator, inputs: list[pa.Schema | None], typer: ExpressionTyper | None) -> pa.Schema | None:
    """Check one operator against its input schemas and return its output schema."""
    schema = inputs[0] if inputs else None
    kind = op.kind
    if kind == "source":
        return op.schema
    if kind == "sink":
        return schema
    if kind == "union":
        for other in inputs[1:]:
            if schema is not None and other is not None and not _same_columns(schema, other):
                raise _fail(op, f"union of streams with different schemas: {schema} vs {other}")
        return schema
    if kind == "filter_expr":
        _require_columns(op, schema, referenced_columns(op.params["expr"]), f"filter {op.params['expr']!r}")
        return typer(op, schema) if typer and schema is not None else schema
    if kind in ("select", "with_columns"):
        exprs = op.params["exprs"] if kind == "select" else list(op.params["columns"].values())
        for e in exprs:
            _require_columns(op, schema, referenced_columns(e), f"expression {e!r}")
        if typer and schema is not None:
            return typer(op, schema)
        if kind == "select":
            return None  # names known, types only Spark knows
        return None
    if kind == "key_by":
        _require_columns(op, schema, op.params["keys"], "key_by")
        return schema
    if kind in ("map_batches", "map", "flat_map"):
        return op.schema if op.schema is not None else schema
    if kind == "filter_fn":
        return schema
    if kind == "aggregate":
        return _aggregate_schema(op, schema)
    if kind in ("reduce",):
        return schema
    if kind == "join":  # both sides' schemas: the binder checks them and makes the kernel
        try:
            return op.params["check"](*inputs)
        except PipelineError as exc:
            raise _fail(op, str(exc), type(exc)) from None
    if kind in ("process", "window"):
        check = op.params.get("check")
        if check is not None and schema is not None:
            try:
                return check(schema)
            except PipelineError as exc:
                raise _fail(op, str(exc), type(exc)) from None
        return op.schema if op.schema is not None else schema
    raise _fail(op, f"no validation rule for {kind}", PipelineError)  # pragma: no cover


def _same_columns(a: pa.Schema, b: pa.Schema) -> bool:
    return [(f.name, f.type) for f in a] == [(f.name, f.type) for f in b]


def _aggregate_schema(op: Operator, schema: pa.Schema | None) -> pa.Schema | None:
    keys = op.params["keys"]
    aggs = op.params["aggregates"]
    if schema is None:
        return None
    fields = [schema.field(k) for k in keys]
    for name, agg in aggs.items():
        if agg.column is not None:
            _require_columns(op, schema, [agg.column], f"aggregate {name!r}")
            col_type = schema.field(agg.column).type
        else:
            col_type = None
        if agg.kind in (*NUMERIC_AGGREGATES, "min", "max") and col_type is not None:
            numeric = pa.types.is_integer(col_type) or pa.types.is_floating(col_type) or pa.types.is_decimal(col_type)
            orderable = numeric or pa.types.is_timestamp(col_type) or pa.types.is_string(col_type)
            if agg.kind in NUMERIC_AGGREGATES and not numeric:
                raise _fail(op, f"aggregate {name!r}: {agg.kind} needs a numeric column, {agg.column!r} is {col_type}")
            if not orderable:
                raise _fail(op, f"aggregate {name!r}: {agg.kind} cannot order {agg.column!r} of type {col_type}")
        if agg.kind == "count":
            out_type = pa.int64()
        elif agg.kind == "mean":
            out_type = pa.float64()
        elif agg.kind == "sum":
            out_type = pa.int64() if pa.types.is_integer(col_type) else pa.float64()
        elif agg.kind in ("min", "max"):
            out_type = col_type
        else:
            out_type = agg.result_type or pa.float64()
        fields.append(pa.field(name, out_type))
    return pa.schema(fields)


def select_output_names(exprs: list[str]) -> list[str]:
    return [output_name(e) for e in exprs]
