"""Every operator on local Spark, checked against a plain-Python reference over the same input.

One pipeline exercises them all (so the suite starts one streaming query, not ten): native
filter/select/with_columns, a fused Python chain (arrow and pandas map_batches, map, filter,
flat_map), union, fan-out, keyed aggregate (built-ins and a UDAF), reduce and process with
state across batches, and the dead-letter path.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import sluice
from sluice import agg, sinks, sources
from sluice.runtime.batch import metrics as metrics_log
from sluice.runtime.side_outputs import DEAD_LETTER, read_side_output
from sluice.runtime.sinks import clear_memory, memory_batches, memory_table

pytestmark = pytest.mark.spark

ROWS, PER_BATCH = 3000, 1000


def final_per_key(name: str, keys: list[str]) -> dict:
    """Running (update-mode) output: the last row emitted for each key."""
    out = {}
    batches = memory_batches(name)
    for b in sorted(batches):
        for row in batches[b].to_pylist():
            out[tuple(row[k] for k in keys)] = row
    return out


def double_kwh(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch.set_column(batch.schema.get_field_index("kwh"), "kwh", pc.multiply(batch.column("kwh"), 2.0))


def add_offset(df):  # pandas
    df["kwh"] = df["kwh"] + 1.0
    return df


def fragile(record: dict) -> dict:
    if record["id"] % 500 == 7:
        raise ValueError(f"bad reading {record['id']}")
    return record


def sum_squares():
    return agg.udaf(
        "kwh",
        create=lambda: 0.0,
        add=lambda acc, values: acc + float(np.sum(np.square(values.to_numpy()))),
        merge=lambda a, b: a + b,
        result=lambda acc: acc,
    )


def count_seen(key, rows: pa.Table, state):
    seen = (state.value or 0) + rows.num_rows
    state.update(seen)
    return [{"meter": key[0], "seen": seen}]


@pytest.fixture(scope="module")
def run(spark, tmp_path_factory):
    clear_memory()
    p = sluice.Pipeline("all_ops", partitions=3)
    p.dead_letter(sinks.memory("dlq"))
    s = p.source(
        sources.generator(
            fields={
                "id": sources.Sequence(),
                "meter": sources.Keys(20, distribution="zipf", skew=1.2, prefix="m"),
                "kwh": sources.Uniform(0.0, 1.0),
            },
            seed=3,
            total_rows=ROWS,
            max_rows_per_batch=PER_BATCH,
        ),
        name="readings",
    )
    s.sink(sinks.memory("raw"))
    native = s.filter("kwh > 0.1").with_columns(wh="kwh * 1000").select("id", "meter", "wh")
    native.sink(sinks.memory("native"))
    chain = (
        s.map_batches(double_kwh, name="double")
        .map_batches(add_offset, format="pandas", name="offset")
        .map(fragile, name="fragile")
        .filter(lambda r: r["id"] % 2 == 0, name="even")
        .flat_map(lambda r: [r, dict(r, id=-r["id"])], name="twice")
    )
    chain.sink(sinks.memory("chain"))
    low = s.filter("kwh < 0.5")
    high = s.filter("kwh >= 0.5")
    low.union(high).sink(sinks.memory("union"))
    keyed = s.key_by("meter")
    keyed.aggregate(
        n=agg.count(),
        total=agg.sum("kwh"),
        lo=agg.min("kwh"),
        hi=agg.max("kwh"),
        avg=agg.mean("kwh"),
        ss=sum_squares(),
        name="stats",
    ).sink(sinks.memory("agg"))
    keyed.reduce(lambda a, b: dict(a, kwh=a["kwh"] + b["kwh"], id=max(a["id"], b["id"])), name="sum_reduce").sink(
        sinks.memory("reduce")
    )
    keyed.process(count_seen, schema={"meter": "string", "seen": "int64"}, name="seen").sink(sinks.memory("proc"))
    s.with_columns(double="kwh * 2").key_by("meter").aggregate(d=agg.sum("double"), name="doubled").sink(
        sinks.memory("agg_after_with_columns")
    )
    checkpoint = str(tmp_path_factory.mktemp("all_ops"))
    result = p.run(checkpoint, spark=spark)
    raw = memory_table("raw").to_pandas()
    return p, result, raw, checkpoint


def test_every_row_read_once_in_several_batches(run):
    _, result, raw, _ = run
    assert len(raw) == ROWS and sorted(raw["id"]) == list(range(ROWS))
    assert result.batches >= ROWS // PER_BATCH


def test_native_operators(run):
    _, _, raw, _ = run
    got = memory_table("native").to_pandas().sort_values("id")
    want = raw[raw.kwh > 0.1].sort_values("id")
    assert list(got.columns) == ["id", "meter", "wh"]
    assert list(got["id"]) == list(want["id"])
    np.testing.assert_allclose(got["wh"], want["kwh"] * 1000)


def test_fused_python_chain_and_dead_letters(run):
    p, _, raw, checkpoint = run
    chain_ops = next(c for c in __import__("sluice.plan.physical", fromlist=["x"]).fused_chains(p.graph) if "double" in c)
    assert chain_ops == ("double", "offset", "fragile", "even", "twice")  # one pass
    got = memory_table("chain").to_pandas()
    kept = raw[(raw.id % 500 != 7) & (raw.id % 2 == 0)]
    assert sorted(got["id"]) == sorted(list(kept["id"]) + list(-kept["id"]))
    by_id = dict(zip(got["id"], got["kwh"]))
    for rid, kwh in zip(kept["id"], kept["kwh"]):
        assert math.isclose(by_id[rid], kwh * 2 + 1.0)
    dead = read_side_output(checkpoint, DEAD_LETTER)
    assert sorted(json_id(d) for d in dead) == sorted(raw[raw.id % 500 == 7]["id"])
    assert all(d["operator"] == "fragile" and "ValueError: bad reading" in d["error"] for d in dead)
    assert all(isinstance(d["batch_id"], int) and "test_runtime_operators.py" in d["location"] for d in dead)
    forwarded = memory_table("dlq")  # the configured dead-letter sink got them too
    assert forwarded.num_rows == len(dead)


def json_id(dead: dict) -> int:
    import json

    return json.loads(dead["record"])["id"]


def test_union_and_fan_out(run):
    _, _, raw, _ = run
    got = memory_table("union").to_pandas()
    assert sorted(got["id"]) == sorted(raw["id"])


def test_keyed_aggregate_matches_reference(run):
    _, _, raw, _ = run
    final = final_per_key("agg", ["meter"])
    groups = raw.groupby("meter")["kwh"]
    assert set(k[0] for k in final) == set(raw["meter"])
    for meter, values in groups:
        row = final[(meter,)]
        assert row["n"] == len(values)
        assert math.isclose(row["total"], values.sum(), rel_tol=1e-9)
        assert row["lo"] == values.min() and row["hi"] == values.max()
        assert math.isclose(row["avg"], values.mean(), rel_tol=1e-9)
        assert math.isclose(row["ss"], float((values**2).sum()), rel_tol=1e-9)


def test_keyed_stage_after_a_column_added_behind_the_hidden_ones(run):
    _, _, raw, _ = run
    final = final_per_key("agg_after_with_columns", ["meter"])
    for meter, values in raw.groupby("meter")["kwh"]:
        assert math.isclose(final[(meter,)]["d"], 2 * values.sum(), rel_tol=1e-9)


def test_reduce_and_process_keep_state_across_batches(run):
    _, result, raw, _ = run
    reduced = final_per_key("reduce", ["meter"])
    for meter, rows in raw.groupby("meter"):
        assert math.isclose(reduced[(meter,)]["kwh"], rows["kwh"].sum(), rel_tol=1e-9)
        assert reduced[(meter,)]["id"] == rows["id"].max()
    seen = final_per_key("proc", ["meter"])
    counts = raw.groupby("meter").size()
    assert {k[0]: v["seen"] for k, v in seen.items()} == counts.to_dict()
    # the hottest meter shows up in every batch, its count growing across them
    per_batch = defaultdict(list)
    for _b, t in sorted(memory_batches("proc").items()):
        for row in t.to_pylist():
            per_batch[row["meter"]].append(row["seen"])
    hottest = counts.idxmax()
    with_rows = [m for m in result.metrics if m.rows_in]  # not the end-of-input batch
    assert len(per_batch[hottest]) == len(with_rows) and per_batch[hottest] == sorted(per_batch[hottest])


def test_metrics_per_batch(run):
    _, _, raw, checkpoint = run
    records = metrics_log.read(checkpoint)
    assert sum(m.rows_in for m in records) == ROWS
    assert records[-1].rows_in == 0 and records[-2].rows_in > 0  # the end-of-input batch is empty
    last = records[-2]
    assert {"double", "offset", "fragile", "even", "twice", "stats", "sum_reduce", "seen"} <= set(last.operators)
    assert last.operators["stats"]["rows_in"] == last.rows_in
    assert set(last.latency_ms) == {"p50", "p95", "p99"} and last.latency_ms["p99"] >= last.latency_ms["p50"] > 0
    kg = last.key_groups["stats"]
    assert kg.total_rows == last.rows_in and all(kg.state_bytes[g] > 0 for g in kg.groups())
    assert sum(m.dead_letters for m in records) == int((raw.id % 500 == 7).sum())
