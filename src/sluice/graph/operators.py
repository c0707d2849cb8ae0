"""The nodes of a job graph: what each operator is, independent of how it runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa

from sluice.errors import PipelineError
from sluice.graph.kinds import KEYED, KINDS, NATIVE, PYTHON, SINK, SOURCE, OperatorKind, kind_of
from sluice.graph.specs import OperatorSpec, SinkOp, SourceOp

S = TypeVar("S", bound=OperatorSpec)


def id_problem(op_id: object) -> str | None:
    """Why ``op_id`` cannot name an operator, or None. An id names the operator's directories
    in the checkpoint (``state/<id>``, ``side/<id>``), so it must be one path component:
    no separators, not ``.`` or ``..``, no control characters."""
    if not isinstance(op_id, str) or not op_id:
        return "must be a non-empty string"
    if op_id in (".", ".."):
        return "cannot be '.' or '..' (it names a directory in the checkpoint)"
    if any(c in op_id for c in "/\\") or any(ord(c) < 32 for c in op_id):
        return "cannot contain '/', '\\' or control characters (it names a directory in the checkpoint)"
    return None


@dataclass
class Operator:
    """One logical operator of the dataflow.

    ``schema`` is the schema of the operator's output (user columns only; hidden columns
    such as ``__ingest_ts`` and ``__kg`` are the runtime's business). It may be ``None``
    until resolved, e.g. for Spark SQL expressions whose result types only Spark knows.

    ``spec`` holds the kind's parameters, an instance of the kind's class in ``graph.specs``
    (checked when the graph is validated); read them typed with :meth:`spec_as`.
    """

    id: str
    kind: str
    name: str
    inputs: tuple[str, ...] = ()
    spec: OperatorSpec | None = None
    schema: pa.Schema | None = None
    location: str | None = None  # "file.py:12", the user's line that created it
    selectivity: float = 1.0  # output rows per input row, measured or declared
    perf_model: str | None = None  # name or path of a performance model (sluice.models)
    threads: int = 1  # worker threads inside one task (for I/O-bound operators)
    chain: bool = True  # False: a Python operator always runs in a pass of its own (never fused)
    # what a checkpoint knows a stateful operator by (sluice.graph.identity); None: its id
    identity: str | None = None
    # a keyed kernel made by hand (a test or an extension): the runtime uses it as it is
    kernel: Any = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown operator kind {self.kind!r}")
        if self.spec is not None and self.spec.kind != self.kind:
            raise ValueError(f"operator {self.id!r} of kind {self.kind!r} has the spec of a {self.spec.kind!r}")
        problem = id_problem(self.id)
        if problem:
            raise PipelineError(f"operator name {self.id!r} {problem}", self.name, self.location)

    @property
    def definition(self) -> OperatorKind:
        """Its kind's definition (``graph.kinds``): spec class, schema rule, kernel factory."""
        return kind_of(self.kind)

    def spec_as(self, cls: type[S]) -> S:
        """Its spec, which must be a ``cls``: the typed parameters of its kind."""
        if not isinstance(self.spec, cls):
            got = "no spec" if self.spec is None else f"a {type(self.spec).__name__}"
            raise PipelineError(f"{self.kind} operator needs a {cls.__name__} spec, it has {got}", self.name, self.location)
        return self.spec

    @property
    def connector(self) -> Any:
        """A source's or sink's connector spec (``graph.sources``, ``graph.sinks``, a connector's)."""
        if isinstance(self.spec, (SourceOp, SinkOp)):
            return self.spec.connector
        raise PipelineError(f"{self.kind} operator has no connector: only sources and sinks do", self.name, self.location)

    @property
    def is_source(self) -> bool:
        return self.definition.family == SOURCE

    @property
    def is_sink(self) -> bool:
        return self.definition.family == SINK

    @property
    def is_native(self) -> bool:
        return self.definition.family == NATIVE

    @property
    def is_python(self) -> bool:
        return self.definition.family == PYTHON

    @property
    def is_keyed(self) -> bool:
        return self.definition.family == KEYED

    def describe(self) -> str:
        where = f" at {self.location}" if self.location else ""
        return f"{self.kind} {self.name!r}{where}"
