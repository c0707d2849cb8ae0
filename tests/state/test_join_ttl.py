"""TTL on join buffers (``join(..., ttl=)``, ``lookup(..., ttl=)``): a key's buffered records
are dropped once no record of that key has come for the TTL, exactly at the boundary, and the
buffers stay bounded where the watermark never evicts them. Pure: no Spark."""

from __future__ import annotations

import pyarrow as pa
import pytest
from tests.joins_harness import canonical, tag

import sluice
from sluice import sinks, sources
from sluice.errors import PipelineError
from sluice.graph.joins import LEFT, RIGHT, JoinSides, StreamJoin, TableLookup
from sluice.graph.ttl import StateTTL
from sluice.runtime.kernels.factory import keyed_kernel
from sluice.runtime.kernels.joins import StreamJoinKernel, TableLookupKernel
from sluice.runtime.kernels.keyed import KEY_GROUP, BatchContext
from sluice.runtime.kernels.ttl import TTLKernel

LEFT_SCHEMA = pa.schema([("k", pa.string()), ("t", pa.int64()), ("v", pa.int64())])
RIGHT_SCHEMA = pa.schema([("key", pa.string()), ("t", pa.int64()), ("w", pa.int64())])
TICK = 1_000  # processing time between batches, microseconds


def drive(kernel: TTLKernel, batches: list[tuple[list[dict], list[dict]]], watermark=None):
    """Run the batches (processing time ``b * TICK``) through ``kernel``, keeping the state
    as the store does; returns (output rows, state size after each batch)."""
    inner = kernel.inner
    state: dict = {}
    state_schema = kernel.state_schema(inner.union).append(pa.field(KEY_GROUP, pa.int32()))
    output, sizes = [], []
    for b, (left, right) in enumerate(batches):
        rows = pa.concat_tables(
            [
                tag(inner, pa.Table.from_pylist(left, schema=LEFT_SCHEMA), LEFT),
                tag(inner, pa.Table.from_pylist(right, schema=RIGHT_SCHEMA), RIGHT),
            ]
        )
        rows = rows.append_column(KEY_GROUP, pa.array([0] * rows.num_rows, pa.int32()))
        result = kernel.process(
            rows, pa.Table.from_pylist(list(state.values()), schema=state_schema), BatchContext(b, 0, watermark, b * TICK)
        )
        if result.deletes is not None:
            for row in result.deletes.to_pylist():
                state.pop(tuple(canonical(row[c]) for c in kernel.key_columns), None)
        for row in result.upserts.to_pylist():
            state[tuple(canonical(row[c]) for c in kernel.key_columns)] = row
        output += result.output.to_pylist()
        sizes.append(len(state))
    return output, sizes


def delayed_pairs(n_batches: int, per_batch: int) -> tuple[list, dict[str, int]]:
    """Every key gets a left record in one batch and its right record ``delay`` batches
    later (1 to 4, by key), with equal event times; returns the batches and each key's delay."""
    batches: list[tuple[list[dict], list[dict]]] = [([], []) for _ in range(n_batches + 4)]
    delays = {}
    for b in range(n_batches):
        for i in range(per_batch):
            key, delay = f"k{b}-{i}", 1 + (b + i) % 4
            delays[key] = delay
            batches[b][0].append({"k": key, "t": 10 * b, "v": i})
            batches[b + delay][1].append({"key": key, "t": 10 * b, "w": i})
    return batches, delays


def interval_join(how: str = "inner") -> StreamJoinKernel:
    return StreamJoinKernel(StreamJoin(JoinSides(("k",), ("key",), "t", "t"), how, None, (-5, 5), 0), LEFT_SCHEMA, RIGHT_SCHEMA)


def test_interval_join_buffers_expire_by_processing_time_exactly_at_the_boundary():
    # the watermark never moves (one side idle): without a TTL nothing is ever evicted
    batches, delays = delayed_pairs(n_batches=30, per_batch=20)
    ttl = StateTTL(2 * TICK, "processing")  # written at b, alive while now < b + 2 ticks
    output, sizes = drive(TTLKernel(interval_join(), ttl), batches)
    matched = sorted(r["k"] for r in output)
    # a right record one batch later finds its left record; two batches later is the
    # boundary (stamp + ttl == now): gone
    assert matched == sorted(k for k, d in delays.items() if d == 1)
    assert max(sizes) <= 2 * (20 + 20)  # the keys two batches wrote (20 left, about 20 right each)
    _, unbounded = drive(TTLKernel(interval_join(), StateTTL(10**12, "processing")), batches)
    assert unbounded[-1] == len(delays) and unbounded == sorted(unbounded)


def test_event_time_ttl_counts_on_the_watermark():
    batches, delays = delayed_pairs(n_batches=10, per_batch=5)
    kernel = TTLKernel(interval_join(), StateTTL(1, "event"))
    # a watermark that stands still: nothing expires, every pair meets
    output, _ = drive(kernel, batches, watermark=-(10**9))
    assert sorted(r["k"] for r in output) == sorted(delays)


def test_lookup_forgets_table_rows_not_updated():
    spec = TableLookup(JoinSides(("k",), ("key",)), "w", "left", None)
    kernel = TTLKernel(TableLookupKernel(spec, LEFT_SCHEMA, RIGHT_SCHEMA), StateTTL(3 * TICK, "processing"))
    batches = [
        ([], [{"key": "a", "t": 0, "w": 1}, {"key": "b", "t": 0, "w": 1}]),
        ([{"k": "a", "t": 1, "v": 1}], []),  # a lookup does not renew the row
        ([], [{"key": "a", "t": 2, "w": 2}]),  # an update does
        ([{"k": "a", "t": 3, "v": 3}, {"k": "b", "t": 3, "v": 3}], []),  # b: 3 ticks after its row: gone
        ([{"k": "a", "t": 4, "v": 4}], []),
        ([{"k": "a", "t": 5, "v": 5}], []),  # a: 3 ticks after its update: gone
    ]
    output, sizes = drive(kernel, batches)
    got = [(r["k"], r["v"], r["w"]) for r in output]
    assert got == [("a", 1, 1), ("a", 3, 2), ("b", 3, None), ("a", 4, 2), ("a", 5, None)]
    assert sizes == [2, 2, 2, 1, 1, 0]


def test_join_and_lookup_take_a_ttl():
    p = sluice.Pipeline("join_ttl")
    gen = sources.generator(fields={"k": sources.Keys(10), "t": sources.EventTime()}, event_time="t")
    left, right = p.source(gen, name="l").key_by("k"), p.source(gen, name="r").key_by("k")
    joined = left.join(right, between=("-1m", "1m"), ttl="10m", ttl_time="processing")
    looked = left.lookup(right, version="t", ttl="1h")
    joined.sink(sinks.memory("join_ttl"))
    looked.sink(sinks.memory("lookup_ttl"))
    p.graph.validate()
    schema = p.graph[left.op.id].schema
    for op, ttl in [(joined.op, StateTTL(600_000_000, "processing")), (looked.op, StateTTL(3_600_000_000, "event"))]:
        kernel = keyed_kernel(op, [schema, schema])
        assert isinstance(kernel, TTLKernel) and kernel.ttl == ttl
    with pytest.raises(PipelineError, match="ttl_time"):
        left.join(right, between=("-1m", "1m"), ttl="1m", ttl_time="wall")


@pytest.mark.spark
def test_a_join_with_a_ttl_runs_on_spark_and_stamps_its_buffers(spark, tmp_path):
    """The wrapped join kernel through the planner and the keyed stage: a TTL longer than the
    streams changes no result (the brute-force join), and the buffers carry their stamps."""
    import pyarrow.compute as pc
    from tests.joins.test_joins_spark import write_side
    from tests.joins_harness import as_multiset, reference_join

    from sluice.graph.joins import LEFT, RIGHT
    from sluice.runtime.sinks import memory_table

    left_rows = write_side(tmp_path / "left.parquet", 1, 160, "v")
    right_rows = write_side(tmp_path / "right.parquet", 2, 160, "w")
    p = sluice.Pipeline("join_ttl_spark", partitions=2)

    def replay(name):
        spec = sources.ReplaySource(
            str(tmp_path / f"{name}.parquet"), format="parquet", event_time="ts", watermark_delay=0.05, max_rows_per_batch=80
        )
        return p.source(spec, name=name).key_by("k")

    left, right = replay("left"), replay("right")
    left.join(right, between=("-20ms", "+10ms"), how="inner", ttl="1d", name="ijoin").sink(sinks.memory("j_ttl"))
    checkpoint = str(tmp_path / "ckpt")
    state_seen = []
    p.run(checkpoint, spark=spark, on_batch=lambda m: state_seen.append(sluice.state.read(checkpoint, "ijoin")))
    got = memory_table("j_ttl")
    names = [n for n in got.column_names if not n.startswith("__")]
    rows = pa.table(
        {n: pc.cast(got[n], pa.int64()) if pa.types.is_timestamp(got.schema.field(n).type) else got[n] for n in names}
    ).to_pylist()
    spec = p.graph["ijoin"].spec.join
    lp = [f.name for f in spec.sides.payload(LEFT, p.graph["left"].schema)]
    rp = [f.name for f in spec.sides.payload(RIGHT, p.graph["right"].schema)]
    expected, _ = reference_join(spec, [(left_rows, right_rows)], [None], lp, rp, names)
    assert got.num_rows > 0 and as_multiset(rows, names) == expected
    buffered = [t for t in state_seen if t.num_rows]
    assert buffered and all("__ttl_ts" in t.column_names for t in buffered)
