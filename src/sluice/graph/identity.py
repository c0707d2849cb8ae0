"""What a checkpoint knows a stateful operator by, and what its state looks like.

A keyed operator's state lives under its id in the checkpoint, so the id must not change
when the user changes an unrelated part of the pipeline. Like Flink's operator uids:

* ``name=`` on an operator pins its identity to that name, whatever else changes;
* otherwise the id is derived from what the state depends on: the operator's kind, its key
  columns, the stateful operators and sources upstream of it (stateless operators in
  between, a filter added or a map changed, do not count), and its rank among operators
  alike in all that. Adding a filter before an aggregate keeps the aggregate's id, and so
  does adding an aggregate by another key anywhere; adding a stateful operator before it
  gives it a new id (its state was built from other input), and so does defining another
  operator of its kind by the same key on the same upstream before it (``name=`` keeps
  both apart).

The :func:`state_record` of an operator is what its state depends on besides its identity:
key columns and types, aggregates with their input columns and types, the record of a
reduce, the window queries. A restart compares the records in the checkpoint with the
pipeline's (:func:`differences`) before it runs anything.

Pure Python: no Spark.
"""

from __future__ import annotations

import hashlib
from copy import copy as shallow_copy
from dataclasses import replace
from typing import Any

import pyarrow as pa

from sluice.graph.aggregates import UserAggregate
from sluice.graph.operators import Operator
from sluice.graph.specs import AggregateOp, DeduplicateOp, JoinOp, KeyedSpec, ProcessOp, ReduceOp, TopOp, WindowOp
from sluice.graph.state_schema import describe_fields, state_differences
from sluice.graph.windows import EventTime

NAMED = "name:"  # identity of an operator the user named


def auto_identity(graph, kind: str, inputs: tuple[str, ...], keys: list[str]) -> tuple[str, str]:
    """(id, identity) of a new stateful operator of ``kind`` by ``keys`` fed by ``inputs``."""
    stem = f"{kind}({','.join(keys)})<-{'+'.join(stateful_upstream(graph, inputs))}"
    rank = 1 + sum(1 for op in graph.operators if op.identity and op.identity.rsplit("#", 1)[0] == stem)
    identity = f"{stem}#{rank}"
    op_id = f"{kind}_{hashlib.sha1(identity.encode()).hexdigest()[:8]}"
    while op_id in graph:  # a user name that happens to look like an auto id
        op_id = f"{kind}_{hashlib.sha1(op_id.encode()).hexdigest()[:8]}"
    return op_id, identity


def stateful_upstream(graph, inputs: tuple[str, ...]) -> tuple[str, ...]:
    """Identities of the nearest sources and stateful operators upstream of ``inputs``,
    looking through stateless operators."""
    found, seen, todo = set(), set(), list(inputs)
    while todo:
        op = graph[todo.pop()]
        if op.id in seen:
            continue
        seen.add(op.id)
        if op.is_source or op.is_keyed:
            found.add(identity_of(op))
        else:
            todo.extend(op.inputs)
    return tuple(sorted(found))


def identity_of(op: Operator) -> str:
    return op.identity or f"id:{op.id}"


def legacy_ids(graph) -> dict[str, str]:
    """The ids Sluice gave operators before stable identities (``<kind>_<n>``, numbered
    in order of definition), for the operators named automatically: checkpoints written
    then keep their state under those ids."""
    taken: set[str] = set()
    per_kind: dict[str, int] = {}
    out = {}
    for op in graph.operators:  # in order of definition
        per_kind[op.kind] = per_kind.get(op.kind, 0) + 1
        if op.is_keyed and op.identity and not op.identity.startswith(NAMED):
            n = per_kind[op.kind]
            while f"{op.kind}_{n}" in taken:
                n += 1
            out[op.id] = f"{op.kind}_{n}"
            taken.add(out[op.id])
        else:
            taken.add(op.id)
    return out


def with_ids(graph, ids: dict[str, str]):
    """A copy of ``graph`` in which operator ``old`` is called ``ids[old]`` (inputs follow;
    an operator named after its old id takes the new one as its name)."""
    if not ids:
        return graph
    copy = shallow_copy(graph)  # whatever else the graph holds comes along
    copy._operators = {}
    for op in graph.operators:
        new_id = ids.get(op.id, op.id)
        copy.add(
            replace(op, id=new_id, name=new_id if op.name == op.id else op.name, inputs=tuple(ids.get(i, i) for i in op.inputs))
        )
    return copy


# ---- what the state depends on --------------------------------------------------------------


def state_record(graph, op: Operator) -> dict[str, Any]:
    """What ``op``'s state depends on, as JSON (after validation, when schemas are known)."""
    upstream = graph[op.inputs[0]].schema
    spec = op.spec_as(KeyedSpec)
    record: dict[str, Any] = {
        "kind": op.kind,
        "identity": identity_of(op),
        "name": op.name,
        "location": op.location,
        "keys": [_typed(upstream, k) for k in spec.keys],
        "upstream": list(stateful_upstream(graph, op.inputs)),
    }
    record.update(_state_detail(graph, op, spec, upstream))
    if isinstance(spec, ProcessOp) and spec.state_schema is not None:  # typed state (graph.state_schema)
        record["state"] = describe_fields(spec.state_schema)
    if spec.ttl is not None:  # the state carries each key's last write, on this clock
        record["ttl"] = f"last write in {spec.ttl.time} time"  # the duration may change
    return record


def _state_detail(graph, op: Operator, spec: KeyedSpec, upstream: pa.Schema | None) -> dict[str, Any]:
    """The entries of the state record that depend on the kind of the stateful operator."""
    record = [_typed(upstream, f.name) for f in upstream] if upstream is not None else None
    match spec:
        case AggregateOp():
            return {"aggregates": {out: describe_aggregate(a, upstream) for out, a in spec.aggregates.items()}}
        case ReduceOp():  # the state is a record of the input
            return {"record": record}
        case WindowOp():
            return {"windows": [describe_query(q, upstream) for q in spec.queries]}
        case JoinOp():  # both sides' buffered records are the state: their columns count
            sides = [graph[i].schema for i in op.inputs]
            columns = ["; ".join(f"{f.name} {f.type}" for f in s) if s is not None else "?" for s in sides]
            return {"join": f"{spec.join.describe()}; left ({columns[0]}); right ({columns[1]})"}
        case ProcessOp() if spec.on_timer is not None:
            return {"timers": "event and processing time"}  # the state rows carry the timer lists
        case DeduplicateOp():
            time = spec.time
            return {"deduplicate": f"on {'event time ' + time.column if isinstance(time, EventTime) else 'processing time'}"}
        case TopOp():  # the kept records are the state: their columns count
            return {"top": {"n": spec.n, "by": list(spec.by), "ascending": spec.ascending, "record": record}}
    return {}


def describe_aggregate(agg, schema: pa.Schema | None) -> str:
    """``sum(kwh double)``, ``count(*)``, ``udaf(kwh double, create=f)``."""
    column = "*" if agg.column is None else _typed(schema, agg.column)
    if isinstance(agg, UserAggregate) and agg.kind != "udaf":  # a built-in on the UDAF machinery
        by = f", by {_typed(schema, agg.by)}" if agg.by else ""
        return f"{agg.kind}({column}{by}, create={_qualname(agg.create)})"
    if isinstance(agg, UserAggregate):
        return f"udaf({column}, create={_qualname(agg.create)}, result={agg.result_type or 'double'})"
    return f"{agg.kind}({column})"


def describe_query(query, schema: pa.Schema | None) -> str:
    time = f"event time {query.time.column}" if query.event_time_column else "processing time"
    aggs = ", ".join(f"{name}={describe_aggregate(a, schema)}" for name, a in query.aggregates)
    lateness = f", allowed lateness {query.allowed_lateness}us" if query.allowed_lateness else ""
    label = f"{query.name!r}: " if query.name else ""
    return f"{label}{query.window.label} on {time}, {query.mode} mode{lateness}: {aggs}"


def _typed(schema: pa.Schema | None, column: str) -> str:
    if schema is None or column not in schema.names:
        return column
    return f"{column} {schema.field(column).type}"


def _qualname(fn) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def describe(record: dict[str, Any]) -> str:
    """One line: ``aggregate 'counts' by meter string (n=count(*)), defined at p.py:12``."""
    keys = ", ".join(record.get("keys") or [])
    detail = ""
    if "aggregates" in record:
        detail = " (" + ", ".join(f"{k}={v}" for k, v in record["aggregates"].items()) + ")"
    elif record.get("windows"):
        detail = " (" + "; ".join(record["windows"]) + ")"
    elif record.get("join"):
        detail = f" ({record['join']})"
    where = f", defined at {record['location']}" if record.get("location") else ""
    return f"{record['kind']} {record['name']!r} by {keys or '-'}{detail}{where}"


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What changed between the state record in a checkpoint and the pipeline's, in words;
    empty when the state carries over."""
    if old["kind"] != new["kind"]:
        return [f"it was a {old['kind']}, it is now a {new['kind']}"]
    out = []
    if old.get("keys") != new.get("keys"):
        out.append(f"key changed from ({', '.join(old['keys'])}) to ({', '.join(new['keys'])})")
    if "aggregates" in old or "aggregates" in new:
        out += _aggregate_differences(old.get("aggregates") or {}, new.get("aggregates") or {})
    if old.get("record") != new.get("record"):
        out.append(f"its record changed from {old.get('record')} to {new.get('record')}")
    if old.get("join") != new.get("join"):
        out.append(f"join changed from [{old.get('join')}] to [{new.get('join')}]")
    if old["kind"] == "process":  # typed state migrates added and removed fields
        out += state_differences(old.get("state"), new.get("state"))
    if old.get("windows") != new.get("windows"):
        was, now = old.get("windows") or [], new.get("windows") or []
        out.append(f"window changed from [{'; '.join(was)}] to [{'; '.join(now)}]")
    return out


def _aggregate_differences(old: dict[str, str], new: dict[str, str]) -> list[str]:
    gone = {k: v for k, v in old.items() if k not in new}
    added = {k: v for k, v in new.items() if k not in old}
    out = [f"aggregate {k!r} changed from {old[k]} to {new[k]}" for k in old if k in new and old[k] != new[k]]
    for name, spec in list(gone.items()):
        renamed = next((k for k, v in added.items() if v == spec), None)
        if renamed is not None:
            out.append(f"aggregate {name!r} was renamed to {renamed!r} ({spec})")
            del added[renamed]
        else:
            out.append(f"aggregate {name!r} ({spec}) was removed")
    out += [f"aggregate {k!r} ({v}) was added: it has no state for the keys seen so far" for k, v in added.items()]
    return out
