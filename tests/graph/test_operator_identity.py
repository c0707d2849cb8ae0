"""Stable identities of stateful operators, their state records, and fitting a plan to a
changed graph (pure: no Spark)."""

from __future__ import annotations

import sluice
from sluice import agg, sinks, sources
from sluice.graph.identity import differences, legacy_ids, state_record
from sluice.plan.physical import adapted_plan, initial_plan


def pipeline(before=None, extra_aggregate_first=False, name=None, aggregates=None):
    p = sluice.Pipeline("ids")
    s = p.source(sources.generator(fields={"k": sources.Keys(5), "v": sources.Uniform(0, 1)}, total_rows=10))
    if extra_aggregate_first:
        s.filter("v > 0.5").key_by("k").aggregate(m=agg.count()).sink(sinks.memory("x"))
    if before is not None:
        s = before(s)
    s.key_by("k").aggregate(name=name, **(aggregates or {"n": agg.count()})).sink(sinks.memory("y"))
    p.graph.validate()
    return p


def aggregate_ids(p) -> list[str]:
    return [op.id for op in p.graph.operators if op.kind == "aggregate"]


def test_stateless_operators_upstream_do_not_change_a_stateful_operators_id():
    plain = aggregate_ids(pipeline())
    assert aggregate_ids(pipeline(before=lambda s: s.filter("v > 0.1"))) == plain
    assert aggregate_ids(pipeline(before=lambda s: s.map(lambda r: r).with_columns(w="v * 2"))) == plain


def test_a_stateful_operator_upstream_changes_the_id_and_a_name_pins_it():
    plain = aggregate_ids(pipeline())[0]
    behind = pipeline(before=lambda s: s.key_by("k").reduce(lambda a, b: a))
    assert plain not in aggregate_ids(behind)
    named = pipeline(name="counts", before=lambda s: s.key_by("k").reduce(lambda a, b: a))
    assert aggregate_ids(named) == ["counts"]


def test_a_stateful_operator_added_downstream_keeps_the_upstream_ones_id():
    plain = aggregate_ids(pipeline())[0]
    p = pipeline()
    counted = p.graph.operators[-2]  # the aggregate
    from sluice.api.stream import Stream

    Stream(p, counted).key_by("n").aggregate(c=agg.count()).sink(sinks.memory("z"))
    assert aggregate_ids(p)[0] == plain and len(set(aggregate_ids(p))) == 2


def test_legacy_ids_number_operators_of_a_kind_in_order_of_definition():
    p = pipeline(extra_aggregate_first=True)
    assert sorted(legacy_ids(p.graph).values()) == ["aggregate_1", "aggregate_2"]
    named_first = sluice.Pipeline("legacy")
    s = named_first.source(sources.generator(fields={"k": sources.Keys(5)}, total_rows=10))
    s.key_by("k").aggregate(name="aggregate_1", n=agg.count()).sink(sinks.memory("a"))
    s.key_by("k").aggregate(n=agg.count()).sink(sinks.memory("b"))
    assert list(legacy_ids(named_first.graph).values()) == ["aggregate_2"]


def test_differences_name_what_changed():
    graph = pipeline(aggregates={"n": agg.count(), "total": agg.sum("v")}).graph
    old = state_record(graph, next(op for op in graph.operators if op.kind == "aggregate"))
    graph2 = pipeline(aggregates={"m": agg.count(), "total": agg.max("v")}).graph
    new = state_record(graph2, next(op for op in graph2.operators if op.kind == "aggregate"))
    assert differences(old, old) == []
    assert differences(old, new) == [
        "aggregate 'total' changed from sum(v double) to max(v double)",
        "aggregate 'n' was renamed to 'm' (count(*))",
    ]


def test_adapted_plan_keeps_routing_of_kept_operators_and_plans_new_ones():
    old = pipeline().graph
    plan = initial_plan(old, 2)
    kept = aggregate_ids(pipeline())[0]
    plan = plan.with_routing(3, kept, [1] * old.max_parallelism)
    new = pipeline(extra_aggregate_first=True, before=lambda s: s.map(lambda r: r)).graph
    fitted = adapted_plan(plan, new, 4, 7)
    assert fitted.version == 7 and set(fitted.keyed) == {op.id for op in new.operators if op.is_keyed}
    assert fitted.keyed[kept] == plan.keyed[kept]
    fresh = next(k for k in fitted.keyed if k != kept)
    assert fitted.keyed[fresh].partitions == 4
    assert [op for chain in fitted.chains for op in chain] == [op.id for op in new.operators if op.is_python]
    assert adapted_plan(fitted, new, 4, 7) == fitted  # a plan that fits stays as it is
