"""Expiry records (``ttl=sluice.state.ttl(..., on_expiry="expired")``): every key a TTL
expires goes, with its last state, to the operator's side output of that name, in the batch
that expires it; without ``on_expiry`` nothing does. Pure: no Spark."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pytest
from tests.state.test_state_ttl import drive

import sluice
from sluice import agg, sinks, sources
from sluice.errors import PipelineError
from sluice.graph.ttl import StateTTL, ttl
from sluice.runtime.kernels.aggregate import AggregateKernel
from sluice.runtime.kernels.keyed import KEY_GROUP, BatchContext
from sluice.runtime.kernels.ttl import TTLKernel


def at(micros: int) -> datetime:
    return datetime.fromtimestamp(micros / 1e6, UTC)


def test_expired_keys_go_to_the_side_output_with_their_last_state():
    kernel = TTLKernel(AggregateKernel(["k"], {"n": agg.count(), "s": agg.sum("v")}), ttl(0.00005, on_expiry="expired"))
    assert kernel.ttl == StateTTL(50, "event", "expired")
    state_schema = kernel.state_schema(pa.schema([("k", pa.string()), ("v", pa.int64())])).append(pa.field(KEY_GROUP, pa.int32()))
    batches = [
        (pa.table({"k": ["a", "b", "a"], "v": [1, 2, 3]}), 100),
        (pa.table({"k": ["b"], "v": [4]}), 140),  # renews b
        (pa.table({"k": ["a"], "v": [5]}), 150),  # a expires (written at 100), then starts again
        (pa.table({"k": pa.array([], pa.string()), "v": pa.array([], pa.int64())}), 190),  # b expires (140)
    ]
    state: dict = {}
    expired = []
    for b, (rows, wm) in enumerate(batches):
        rows = rows.append_column(KEY_GROUP, pa.array(np.zeros(rows.num_rows, np.int32)))
        table = pa.Table.from_pylist(list(state.values()), schema=state_schema)
        result = kernel.process(rows, table, BatchContext(b, 0, wm, 0))
        for row in result.deletes.to_pylist() if result.deletes is not None else []:
            state.pop(row["k"], None)
        for row in result.upserts.to_pylist():
            state[row["k"]] = row
        side = result.side_outputs.get("expired")
        expired.append(side.to_pylist() if side is not None else [])
    assert expired == [
        [],
        [],
        [{"k": "a", "n": 2, "s": 4, "last_write": at(100), "expired_at": at(150)}],
        [{"k": "b", "n": 2, "s": 6, "last_write": at(140), "expired_at": at(190)}],
    ]
    assert state["a"]["n"] == 1 and "b" not in state


def test_without_on_expiry_nothing_is_emitted():
    kernel = TTLKernel(AggregateKernel(["k"], {"n": agg.count()}), StateTTL(50))
    one = pa.table({"k": ["a"], "v": [1]})
    outputs, state = drive(kernel, [one, one.slice(0, 0)], [(100, 0), (150, 0)])
    assert state == {}
    result = kernel.process(
        one.append_column(KEY_GROUP, pa.array([0], pa.int32())),
        kernel.state_schema(one.schema).append(pa.field(KEY_GROUP, pa.int32())).empty_table(),
        BatchContext(0, 0, 0, 0),
    )
    assert result.side_outputs == {}


def test_the_api_takes_a_ttl_with_options():
    p = sluice.Pipeline("expiry")
    keyed = p.source(sources.generator(fields={"k": sources.Keys(5), "v": sources.Sequence()}), name="raw").key_by("k")
    out = keyed.aggregate(n=agg.count(), ttl=sluice.state.ttl("1d", time="processing", on_expiry="idle_users"), name="n")
    out.sink(sinks.memory("expiry"))
    p.graph.validate()
    from sluice.runtime.kernels.factory import keyed_kernel

    kernel = keyed_kernel(out.op, [p.graph[out.op.inputs[0]].schema])
    assert isinstance(kernel, TTLKernel) and kernel.ttl == StateTTL(86_400_000_000, "processing", "idle_users")
    with pytest.raises(PipelineError, match="on_expiry must name a side output"):
        ttl("1d", on_expiry="no spaces allowed")


def test_the_end_of_input_expires_every_key_with_no_expiry_time():
    from sluice.runtime.kernels.panes import END_OF_TIME

    kernel = TTLKernel(AggregateKernel(["k"], {"n": agg.count()}), ttl("1h", on_expiry="expired"))
    rows = pa.table({"k": ["a"], "v": [1]}).append_column(KEY_GROUP, pa.array([0], pa.int32()))
    state_schema = kernel.state_schema(rows.schema).append(pa.field(KEY_GROUP, pa.int32()))
    first = kernel.process(rows, state_schema.empty_table(), BatchContext(0, 0, 100, 0))
    last = kernel.process(rows.slice(0, 0), first.upserts.select(state_schema.names), BatchContext(1, 0, END_OF_TIME, 0))
    assert last.side_outputs["expired"].to_pylist() == [{"k": "a", "n": 1, "last_write": at(100), "expired_at": None}]
