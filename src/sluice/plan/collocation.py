"""Which consecutive keyed operators can share one stage, with no exchange between them.

A keyed operator's output leaves its stage partitioned by its routing table: partition p
holds the rows of the key groups routed to p. When the next keyed operator is keyed on the
same columns, with the same types, and the first one emits each row with the key values of
the records it came from, the rows' key groups are the same under both operators: routed by
the same table they are already where they must go. The exchange before the second operator
can go (ALBIC's collocation, section 4.3.2, in its simplest case: every key group of the
one operator talks only to its twin of the next, so collocating twins removes all the
traffic between them).

The condition, per pair ``up -> key_by -> down``:

- ``up`` keeps the key values (``aggregate``, ``reduce``, ``window``: they emit the key
  columns of their records; a ``process`` function may emit any key, and a ``join`` has
  two inputs);
- ``down`` is keyed on exactly ``up``'s key columns, in the same order, of the same types
  (the key group is ``xxhash64`` over those columns, so both must hash the same values);
- nothing else reads ``up``'s output or the ``key_by`` (a fan-out keeps its exchange);
- ``down`` is not a join.

A Plan keeps collocated operators in groups (``Plan.collocated``, head first): they share one
routing table and partition count, and a routing or partitions change of one applies to all
(``Plan.with_routing``). The runtime exchanges before the head only (``runtime.batch.executor``).

Pure: no Spark.
"""

from __future__ import annotations

from sluice.graph import JobGraph
from sluice.graph.operators import Operator
from sluice.graph.specs import JoinOp, KeyByOp, KeyedSpec, ProcessOp, UnionOp


def _keys(op: Operator) -> list[str]:
    """A keyed operator's key columns ([] for any other)."""
    return list(op.spec.keys) if isinstance(op.spec, KeyedSpec) else []


def collocated_after(graph: JobGraph, op_id: str) -> str | None:
    """The keyed operator ``op_id`` can run in the same stage with, without an exchange
    between them, or None."""
    op = graph[op_id]
    if not op.is_keyed or isinstance(op.spec, JoinOp) or len(op.inputs) != 1:
        return None
    key_by = graph[op.inputs[0]]
    if not isinstance(key_by.spec, KeyByOp) or len(key_by.inputs) != 1:
        return None
    up = graph[key_by.inputs[0]]
    if not up.definition.key_preserving or len(up.inputs) != 1:
        return None
    if [c.id for c in graph.consumers(up.id)] != [key_by.id] or [c.id for c in graph.consumers(key_by.id)] != [op.id]:
        return None
    keys, up_keys = _keys(op), _keys(up)
    if not keys or keys != up_keys:
        return None
    up_input = graph[up.inputs[0]]
    if up_input.schema is None or key_by.schema is None:
        return None
    try:
        same_types = all(up_input.schema.field(k).type == key_by.schema.field(k).type for k in keys)
    except KeyError:
        return None
    return up.id if same_types else None


def collocation_groups(graph: JobGraph) -> tuple[tuple[str, ...], ...]:
    """Maximal runs of keyed operators that can share one stage, head first (runs of one
    operator are left out)."""
    follows = {}
    for op in graph.topological_order():
        up = collocated_after(graph, op.id)
        if up is not None:
            follows[up] = op.id
    heads = [op_id for op_id in follows if op_id not in follows.values()]
    groups = []
    for head in heads:
        group = [head]
        while group[-1] in follows:
            group.append(follows[group[-1]])
        groups.append(tuple(group))
    return tuple(groups)


def traffic_source(graph: JobGraph, op_id: str) -> tuple[str, list[str]] | None:
    """The keyed operator whose key groups send ``op_id``'s key groups their rows, and its
    key columns, when the traffic between them can be measured at ``op_id``'s exchange:
    (upstream id, its keys), or None.

    ALBIC collocates communicating key groups of consecutive keyed operators whose keys
    differ (section 4.3.2). The pair is ``up -> (forward row-wise operators) -> key_by ->
    op_id``: ``up`` keeps its key values in its output rows (its kind is ``key_preserving``), every
    operator between has one input (filters, selects, column additions, Python passes), and
    ``up``'s key columns reach ``op_id``'s key_by unchanged in name and type, so the hash that
    routed a row to ``up``'s key group can be computed again beside ``op_id``'s own. A
    ``process`` counts too: its rows are attributed to the key group of the key they carry,
    exact when it emits rows under the key of the records it processed (an enrichment)."""
    op = graph[op_id]
    if not op.is_keyed or isinstance(op.spec, JoinOp) or len(op.inputs) != 1:
        return None
    key_by = graph[op.inputs[0]]
    if not isinstance(key_by.spec, KeyByOp) or len(key_by.inputs) != 1 or key_by.schema is None:
        return None
    up = graph[key_by.inputs[0]]
    while not up.is_keyed:
        if up.is_source or isinstance(up.spec, (KeyByOp, UnionOp)) or len(up.inputs) != 1:
            return None
        up = graph[up.inputs[0]]
    if not (up.definition.key_preserving or isinstance(up.spec, ProcessOp)) or len(up.inputs) != 1:
        return None
    up_keys = _keys(up)
    up_input = graph[up.inputs[0]].schema
    if not up_keys or up_input is None:
        return None
    try:
        same = all(up_input.field(k).type == key_by.schema.field(k).type for k in up_keys)
    except KeyError:
        return None
    return (up.id, up_keys) if same else None
