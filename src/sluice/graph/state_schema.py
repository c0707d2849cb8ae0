"""The shape of typed ``process`` state, and which changes of it a restart can migrate (pure).

``process(fn, state_schema={"count": "int", "last_seen": "timestamp"})`` keeps each key's
state as a record of those fields, one column per field in the key-group store, and the
pipeline record (``pipeline.json``) holds the fields as ``"count int64"``. A restart
compares the recorded fields with the pipeline's:

* a field **added** is compatible when it is nullable: the state written before reads it as
  null (every stored field is nullable, so ``fn`` must expect None for it);
* a field **removed** is compatible: its stored values are no longer read;
* a field **added as not null**, a field that **became not null**, a field whose **type
  changed**, or a change between pickled values (no ``state_schema``) and typed ones, is
  not: the restart stops with the pipeline-change message, and
  ``reset_state=[...]`` or a new checkpoint is the way on.
"""

from __future__ import annotations

import pyarrow as pa

from sluice.errors import PipelineError
from sluice.graph.schemas import as_schema

RESERVED_PREFIX = "__"  # the store's and the kernels' own columns
NOT_NULL = " not null"


def parse_state_schema(value, keys: list[str], where: str) -> pa.Schema | None:
    """``value`` (a dict of field name to type name, or a ``pyarrow.Schema``) as the state's
    schema; None stays None (pickled state)."""
    if value is None:
        return None
    schema = as_schema(value, f"{where}: state_schema ")
    if schema is None or len(schema) == 0:
        raise PipelineError(f"{where}: state_schema needs at least one field, got {value!r}")
    clash = [f.name for f in schema if f.name in keys or f.name.startswith(RESERVED_PREFIX)]
    if clash:
        raise PipelineError(
            f"{where}: state_schema fields {clash} clash with the key columns {keys} or start with {RESERVED_PREFIX!r}"
        )
    return schema


def describe_fields(schema: pa.Schema) -> list[str]:
    """The fields as the pipeline record keeps them: ``["count int64", "last timestamp[us]"]``,
    ``"id string not null"`` for a field declared not nullable."""
    return [f"{f.name} {f.type}{'' if f.nullable else NOT_NULL}" for f in schema]


def _fields(described: list[str] | None) -> dict[str, tuple[str, bool]]:
    """name -> (type, declared not null)."""
    out = {}
    for d in described or []:
        name, kind = d.split(" ", 1)
        out[name] = (kind.removesuffix(NOT_NULL), kind.endswith(NOT_NULL))
    return out


def state_differences(old: list[str] | None, new: list[str] | None) -> list[str]:
    """What makes state recorded with fields ``old`` unreadable with fields ``new`` (None:
    pickled state), in words; empty when the state migrates."""
    if old is None and new is None:
        return []
    if old is None:
        return [f"its state changed from pickled values to typed fields ({', '.join(new or [])})"]
    if new is None:
        return [f"its state changed from typed fields ({', '.join(old)}) to pickled values"]
    was, now = _fields(old), _fields(new)
    out = []
    for name, (kind, not_null) in now.items():
        if name not in was:
            if not_null:
                out.append(f"state field {name!r} was added as not null: the state written before has no value for it")
        elif was[name][0] != kind:
            out.append(f"state field {name!r} changed type from {was[name][0]} to {kind}")
        elif not_null and not was[name][1]:
            out.append(f"state field {name!r} became not null: the state written before may have none")
    return out
