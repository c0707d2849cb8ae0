"""The nodes of a job graph: what each operator is, independent of how it runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from sluice.errors import PipelineError
from sluice.graph.kinds import KEYED, KINDS, NATIVE, PYTHON, OperatorKind, kind_of, names_of

# Operators Spark runs natively (no Python): they become DataFrame expressions.
NATIVE_KINDS = names_of(NATIVE)
# Stateless Python operators: consecutive ones are fused into one mapInArrow pass.
PYTHON_KINDS = names_of(PYTHON)
# Stateful keyed operators: run after an exchange by key group, with state in the store.
# A "join" has two inputs, the keyed streams of its two sides (sluice.graph.joins).
KEYED_KINDS = names_of(KEYED)


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
    """

    id: str
    kind: str
    name: str
    inputs: tuple[str, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)
    schema: pa.Schema | None = None
    location: str | None = None  # "file.py:12", the user's line that created it
    selectivity: float = 1.0  # output rows per input row, measured or declared
    perf_model: str | None = None  # name or path of a performance model (sluice.models)
    threads: int = 1  # worker threads inside one task (for I/O-bound operators)
    chain: bool = True  # False: a Python operator always runs in a pass of its own (never fused)
    # what a checkpoint knows a stateful operator by (sluice.graph.identity); None: its id
    identity: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown operator kind {self.kind!r}")
        problem = id_problem(self.id)
        if problem:
            raise PipelineError(f"operator name {self.id!r} {problem}", self.name, self.location)

    @property
    def definition(self) -> OperatorKind:
        """Its kind's definition (``graph.kinds``): params, schema rule, kernel factory."""
        return kind_of(self.kind)

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
