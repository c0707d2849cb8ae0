"""The job graph: operators and the edges between them, and its validation.

Pure Python: building, checking and walking a dataflow needs no Spark. The runtime later
asks Spark only for what Spark alone knows (result types of SQL expressions), through the
``typer`` hook of :func:`JobGraph.validate`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sluice.errors import CycleError, PipelineError, SchemaError
from sluice.graph.constraints import validate_constraints
from sluice.graph.economics import Economics
from sluice.graph.expressions import output_name
from sluice.graph.kinds import ExpressionTyper
from sluice.graph.operators import Operator


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
        self.economics: Economics | None = None  # prices and break-even costs (None: the defaults)
        self.goals: Any = None  # control.goals.Goals: what the job must achieve (Pipeline.goals); None: none stated

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
        return [o for o in self._operators.values() if o.is_source]

    def sinks(self) -> list[Operator]:
        return [o for o in self._operators.values() if o.is_sink]

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
            if not op.is_source and not op.inputs:
                raise PipelineError("operator has no input", op.name, op.location)
            if not op.is_sink and not op.is_source and not self.consumers(op.id):
                raise PipelineError("this stream goes nowhere: add a sink or remove the operator", op.name, op.location)
            declared = op.schema
            culprit = next((assumed[i] for i in op.inputs if i in assumed), None)
            try:
                op.schema = _check(op, inputs, typer)
            except SchemaError as exc:
                if culprit is None:
                    raise
                raise _schema_probably_missing(culprit, exc) from None
            if op.definition.assumes_input_columns and declared is None:
                assumed[op.id] = op
            elif culprit is not None and op.definition.passes_schema:
                assumed[op.id] = culprit

        validate_constraints(self, self.constraints)


def _schema_probably_missing(culprit: Operator, error: SchemaError) -> SchemaError:
    """A column error downstream of a Python operator without ``schema=`` is most likely that
    operator's missing output schema (it was assumed to keep its input's columns): say so at
    that operator, and keep the downstream error as the evidence."""
    return SchemaError(
        f"{culprit.kind} has no schema=, so its output was assumed to have its input's columns, and a later "
        f"operator then failed: {error}. Its output schema is probably missing: pass schema={{'column': 'type', "
        f"...}} (or a pyarrow.Schema) to the {culprit.kind}",
        culprit.name,
        culprit.location,
    )


def _check(op: Operator, inputs: list[pa.Schema | None], typer: ExpressionTyper | None) -> pa.Schema | None:
    """Check one operator against its input schemas and return its output schema: the rule
    its kind registered (``graph.kinds``)."""
    return op.definition.check(op, inputs, typer)


def select_output_names(exprs: list[str]) -> list[str]:
    return [output_name(e) for e in exprs]
