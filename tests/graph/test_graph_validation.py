"""The job graph is validated before anything runs; errors name the operator and the line."""

from __future__ import annotations

import pyarrow as pa
import pytest

import sluice
from sluice import agg, sinks, sources
from sluice.errors import CycleError, PipelineError, SchemaError
from sluice.graph import JobGraph, Operator
from sluice.graph.expressions import output_name, referenced_columns
from sluice.graph.specs import FilterExprOp, MapBatchesOp
from sluice.plan.physical import fused_chains, initial_plan, range_routing


def readings(p: sluice.Pipeline):
    return p.source(
        sources.generator(fields={"meter": sources.Keys(10, prefix="m"), "kwh": sources.Uniform(0, 1)}, total_rows=10)
    )


def test_unknown_column_in_filter_names_operator_and_line():
    p = sluice.Pipeline()
    readings(p).filter("watts > 3", name="too_high").sink(sinks.memory("x"))
    with pytest.raises(SchemaError) as err:
        p.graph.validate()
    assert "watts" in str(err.value) and "too_high" in str(err.value)
    assert "test_graph_validation.py:" in str(err.value)


def test_unknown_key_column():
    p = sluice.Pipeline()
    readings(p).key_by("house").aggregate(n=agg.count()).sink(sinks.memory("x"))
    with pytest.raises(SchemaError, match="house"):
        p.graph.validate()


def test_sum_over_string_is_a_type_mismatch():
    p = sluice.Pipeline()
    readings(p).key_by("kwh").aggregate(total=agg.sum("meter")).sink(sinks.memory("x"))
    with pytest.raises(SchemaError, match="numeric"):
        p.graph.validate()


def test_union_of_different_schemas():
    p = sluice.Pipeline()
    a = readings(p)
    b = a.map(lambda r: {"x": 1}, schema={"x": "int64"})
    a.union(b).sink(sinks.memory("x"))
    with pytest.raises(SchemaError, match="union"):
        p.graph.validate()


def test_no_sink_and_dangling_operator():
    p = sluice.Pipeline()
    readings(p).filter("kwh > 0")
    with pytest.raises(PipelineError, match="no sink"):
        p.graph.validate()
    s = readings(p)
    s.sink(sinks.memory("x"))
    s.filter("kwh > 0", name="dangling")
    with pytest.raises(PipelineError, match="goes nowhere"):
        p.graph.validate()


def test_misuse_is_caught_where_it_happens():
    p = sluice.Pipeline()
    s = readings(p)
    with pytest.raises(PipelineError, match="needs a function"):
        s.map(42)
    with pytest.raises(PipelineError, match="at least one aggregate"):
        s.key_by("meter").aggregate()
    with pytest.raises(PipelineError, match="unknown function"):
        s.key_by("meter").aggregate(x=("median", "kwh"))
    with pytest.raises(PipelineError, match="sink spec"):
        s.sink("stdout")
    with pytest.raises(PipelineError, match="same pipeline"):
        s.union(readings(sluice.Pipeline()))
    with pytest.raises(PipelineError, match="partitions"):
        sluice.Pipeline(partitions=0)


def test_cycle_is_detected():
    g = JobGraph()
    g.add(Operator("a", "source", "a", schema=pa.schema([("x", pa.int64())])))
    g.add(Operator("b", "filter_expr", "b", inputs=("a",), spec=FilterExprOp(expr="x > 0")))
    g.add(Operator("c", "filter_expr", "c", inputs=("b",), spec=FilterExprOp(expr="x > 1")))
    g["b"].inputs = ("a", "c")  # close a loop b -> c -> b
    with pytest.raises(CycleError):
        g.topological_order()


def test_output_schemas_are_derived():
    p = sluice.Pipeline()
    out = readings(p).key_by("meter").aggregate(n=agg.count(), avg=agg.mean("kwh"), top=agg.max("kwh"))
    out.sink(sinks.memory("x"))
    p.graph.validate()
    assert out.schema == pa.schema([("meter", pa.string()), ("n", pa.int64()), ("avg", pa.float64()), ("top", pa.float64())])


def test_expression_columns():
    assert referenced_columns("kwh * 1000 > limit AND upper(meter) = 'X'") == {"kwh", "limit", "meter"}
    assert referenced_columns("cast(a AS double) + `weird col`") == {"a", "weird col"}
    assert output_name("kwh * 1000 AS wh") == "wh"
    assert output_name("meter") == "meter"


def test_chaining_fuses_consecutive_python_operators_but_not_across_fan_out():
    p = sluice.Pipeline()
    s = readings(p)
    a = s.map(lambda r: r, name="a").map_batches(lambda b: b, name="b").filter(lambda r: True, name="c")
    a.sink(sinks.memory("x"))
    d = s.filter("kwh > 0").map(lambda r: r, name="d")
    e = d.map(lambda r: r, name="e")
    f = d.map(lambda r: r, name="f")
    e.sink(sinks.memory("y"))
    f.sink(sinks.memory("z"))
    p.graph.validate()
    chains = fused_chains(p.graph)
    assert ("a", "b", "c") in chains
    assert ("d",) in chains and ("e",) in chains and ("f",) in chains


def test_initial_plan_routes_every_key_group_to_one_partition():
    assert range_routing(8, 3) == [0, 0, 0, 1, 1, 1, 2, 2]
    p = sluice.Pipeline(max_parallelism=16, partitions=4)
    readings(p).key_by("meter").aggregate(n=agg.count(), name="agg").sink(sinks.memory("x"))
    plan = initial_plan(p.graph, 4)
    assert len(plan.keyed["agg"].routing) == 16 and set(plan.keyed["agg"].routing) == {0, 1, 2, 3}
    moved = plan.with_routing(5, "agg", [3] * 16)
    assert moved.version == 5 and moved.keyed["agg"].key_groups_of(3) == list(range(16))
    assert plan.from_json(moved.to_json()) == moved
    with pytest.raises(sluice.SluiceError):
        plan.with_routing(1, "agg", [0] * 3)


def test_plan_threads_round_trip_and_run_a_kernel_on_a_pool():
    import threading

    from sluice.graph.operators import Operator
    from sluice.runtime.kernels.stateless import KernelContext, MapBatchesKernel
    from sluice.runtime.side_outputs import SideOutputWriter

    p = sluice.Pipeline()
    readings(p).map_batches(lambda b: b, name="io").sink(sinks.memory("x"))
    plan = initial_plan(p.graph, 2)
    planned = type(plan).from_json(plan.to_json().replace('"threads": {}', '"threads": {"io": 4}'))
    assert planned.threads == {"io": 4}
    with pytest.raises(sluice.SluiceError):
        type(plan)(version=0, max_parallelism=8, threads={"io": 0})

    seen = set()

    def slow_identity(batch):
        seen.add(threading.get_ident())
        threading.Event().wait(0.02)
        return batch

    schema = pa.schema([("x", pa.int64())])
    op = Operator("io", "map_batches", "io", spec=MapBatchesOp(fn=slow_identity, format="arrow"), threads=4)
    kernel = MapBatchesKernel(op, schema, schema)
    batch = pa.RecordBatch.from_pydict({"x": list(range(100))}, schema=schema)
    ingest = pa.array([0] * 100, pa.timestamp("us", tz="UTC"))
    out, _ = kernel.apply(batch, ingest, KernelContext(SideOutputWriter("/tmp", "dl", 0, "s", 0), None))
    assert out.column("x").to_pylist() == list(range(100))  # order kept across threads
    assert len(seen) == 4
