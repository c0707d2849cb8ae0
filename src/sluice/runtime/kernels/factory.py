"""Kernels made from operators: the factories ``graph.kinds`` names for each kind, and
:func:`keyed_kernel` / :func:`python_kernel`, the one place the runtime makes a kernel.

A kind's definition says where its factory is (``"module:function"``), so the pure graph
names the runtime's code without importing it. An operator may also carry a kernel of its
own in ``Operator.kernel`` (a kernel made by hand, in a test or an extension); it is used
as it is. Each factory reads the operator's typed spec (``graph.specs``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from functools import cache
from typing import Any

import pyarrow as pa

from sluice.graph.operators import Operator
from sluice.graph.specs import AggregateOp, DeduplicateOp, JoinOp, KeyedSpec, ProcessOp, ReduceOp, TopOp, WindowOp
from sluice.runtime.kernels.aggregate import AggregateKernel
from sluice.runtime.kernels.joins import join_kernel
from sluice.runtime.kernels.keyed import KeyedKernel
from sluice.runtime.kernels.process import ProcessKernel
from sluice.runtime.kernels.reduce import ReduceKernel
from sluice.runtime.kernels.stateless import Kernel
from sluice.runtime.kernels.ttl import TTLKernel
from sluice.runtime.kernels.windows import window_kernel


@cache
def _resolve(path: str) -> Callable[..., Any]:
    module, _, name = path.partition(":")
    target: Any = importlib.import_module(module)
    for part in name.split("."):
        target = getattr(target, part)
    return target


def keyed_kernel(op: Operator, inputs: list[pa.Schema | None] | None = None) -> KeyedKernel:
    """The kernel of a keyed operator; ``inputs``: its input schemas (a join needs both
    sides'). Each call makes a new kernel: the caller keeps it for the batch."""
    if op.kernel is not None:
        return op.kernel
    definition = op.definition
    if not op.is_keyed or definition.kernel is None:
        raise ValueError(f"no kernel for keyed operator kind {op.kind!r}")
    kernel = _resolve(definition.kernel)(op, inputs or [])
    ttl = op.spec_as(KeyedSpec).ttl
    return kernel if ttl is None else TTLKernel(kernel, ttl)  # state that expires (graph.ttl)


def python_kernel(op: Operator, in_schema: pa.Schema) -> Kernel:
    """The kernel of a stateless Python operator over records of ``in_schema``."""
    definition = op.definition
    if not op.is_python or definition.kernel is None:
        raise ValueError(f"no kernel for Python operator kind {op.kind!r}")
    return _resolve(definition.kernel)(op, in_schema, op.schema or in_schema)


# ---- the keyed kinds' factories (named in graph.kinds) ----------------------------------------
def aggregate_kernel(op: Operator, inputs: list[pa.Schema | None]) -> KeyedKernel:
    spec = op.spec_as(AggregateOp)
    return AggregateKernel(spec.keys, spec.aggregates)


def reduce_kernel(op: Operator, inputs: list[pa.Schema | None]) -> KeyedKernel:
    spec = op.spec_as(ReduceOp)
    return ReduceKernel(spec.keys, spec.fn)


def process_kernel(op: Operator, inputs: list[pa.Schema | None]) -> KeyedKernel:
    spec = op.spec_as(ProcessOp)
    return ProcessKernel(spec.keys, spec.fn, op.schema, spec.on_timer, spec.state_schema)


def window_kernel_of(op: Operator, inputs: list[pa.Schema | None]) -> KeyedKernel:
    spec = op.spec_as(WindowOp)
    return window_kernel(spec.keys, spec.queries, spec.emit_keys)


def join_kernel_of(op: Operator, inputs: list[pa.Schema | None]) -> KeyedKernel:
    left, right = [*inputs, None, None][:2]
    if left is None or right is None:
        raise ValueError(f"join {op.name!r}: the kernel needs both sides' schemas (validate the graph first)")
    return join_kernel(op.spec_as(JoinOp).join, left, right)


def deduplicate_kernel(op: Operator, inputs: list[pa.Schema | None]) -> KeyedKernel:
    from sluice.runtime.kernels.selection import DeduplicateKernel

    spec = op.spec_as(DeduplicateOp)
    return DeduplicateKernel(spec.keys, spec.within, spec.time)


def top_kernel(op: Operator, inputs: list[pa.Schema | None]) -> KeyedKernel:
    from sluice.runtime.kernels.selection import TopKernel

    spec = op.spec_as(TopOp)
    return TopKernel(spec.keys, spec.n, spec.by, spec.ascending)
