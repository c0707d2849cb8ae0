"""Joins through the API on local Spark: a windowed outer join and an interval left join of
two replayed streams (NULL and unicode keys, records out of order within the watermark's
delay) equal the brute-force join of the whole streams; no record is late."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from tests.joins_harness import as_multiset, reference_join

from sluice import Pipeline, sinks, sources
from sluice import windows as W
from sluice.errors import PipelineError
from sluice.graph.joins import LEFT, RIGHT
from sluice.runtime.side_outputs import read_side_output
from sluice.sinks import memory_table

pytestmark = pytest.mark.spark

START_US = 1_700_000_000_000_000
KEYS = ["a", "ü", "日本", None, "🦆", "b"]
JITTER_S = 0.05


def write_side(path, seed: int, n: int, value: str) -> list[dict]:
    rng = np.random.default_rng(seed)
    due = START_US + np.arange(n) * 5_000  # 5 ms apart
    ts = due - rng.integers(0, int(JITTER_S * 1e6), n)
    rows = [{"k": KEYS[int(i)], "ts": int(t), value: int(j)} for j, (i, t) in enumerate(zip(rng.integers(0, 6, n), ts))]
    table = pa.Table.from_pylist(rows, schema=pa.schema([("k", pa.string()), ("ts", pa.int64()), (value, pa.int64())]))
    table = table.set_column(1, "ts", pc.cast(table["ts"], pa.timestamp("us", tz="UTC")))
    pq.write_table(table, path)
    return rows


def test_joins_on_spark_equal_brute_force(spark, tmp_path):
    left_rows = write_side(tmp_path / "left.parquet", 1, 240, "v")
    right_rows = write_side(tmp_path / "right.parquet", 2, 240, "w")
    p = Pipeline("joins_it", partitions=2)

    def replay(name):
        return p.source(
            sources.ReplaySource(
                str(tmp_path / f"{name}.parquet"),
                format="parquet",
                event_time="ts",
                watermark_delay=JITTER_S,
                max_rows_per_batch=80,
            ),
            name=name,
        )

    left, right = replay("left").key_by("k"), replay("right").key_by("k")
    left.join(right, window=W.sliding("0.1s", "0.05s"), how="outer", name="wjoin").sink(sinks.memory("j_window"))
    left.join(right, between=("-20ms", "+10ms"), how="left", name="ijoin").sink(sinks.memory("j_interval"))
    checkpoint = str(tmp_path / "ckpt")
    p.run(checkpoint, spark=spark)

    for op, sink in (("wjoin", "j_window"), ("ijoin", "j_interval")):
        spec = p.graph[op].spec.join
        got = memory_table(sink)
        assert got is not None and got.num_rows > 0
        names = [n for n in got.column_names if not n.startswith("__")]
        assert names == p.graph[op].schema.names
        micros = {n: pc.cast(got[n], pa.int64()) if pa.types.is_timestamp(got.schema.field(n).type) else got[n] for n in names}
        rows = pa.table(micros).to_pylist()
        lp = [f.name for f in spec.sides.payload(LEFT, p.graph["left"].schema)]
        rp = [f.name for f in spec.sides.payload(RIGHT, p.graph["right"].schema)]
        expected, n_late = reference_join(spec, [(left_rows, right_rows)], [None], lp, rp, names)
        assert n_late == 0
        assert as_multiset(rows, names) == expected, op
        assert read_side_output(checkpoint, f"side/{op}/late") == []


def test_join_needs_event_time_and_keyed_streams(tmp_path):
    write_side(tmp_path / "x.parquet", 1, 10, "v")
    p = Pipeline("bad")
    no_time = p.source(sources.ReplaySource(str(tmp_path / "x.parquet"), format="parquet"), name="x").key_by("k")
    with pytest.raises(PipelineError, match="event time"):
        no_time.join(no_time, window=W.tumbling("1s"))
    with pytest.raises(PipelineError, match="keyed stream"):
        no_time.join(p.source(sources.ReplaySource(str(tmp_path / "x.parquet"), format="parquet"), name="y"), between=(0, 1))


def test_lookup_enriches_from_a_changing_postgres_table(spark, tmp_path):
    """Orders enriched from a PostgreSQL table read as a changelog (every insert and update
    raises ``version``): updates and deletions reach later orders, across a restart; the
    table's rows are kept in the key-group store."""
    import json
    import os

    from tests.connector_services import PG_DSN, pg, require, unique

    require("PostgreSQL")
    table = unique("customers")
    pg(f"CREATE SEQUENCE {table}_v")
    pg(
        f"CREATE TABLE {table} (id text PRIMARY KEY, version bigint NOT NULL DEFAULT nextval('{table}_v'), "
        f"name text, deleted boolean NOT NULL DEFAULT false)"
    )
    inbox = tmp_path / "orders"
    inbox.mkdir()

    def orders(name: str, rows: list[dict]) -> None:
        (inbox / f".{name}").write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.rename(inbox / f".{name}", inbox / name)

    def run(rows: int):
        p = Pipeline("lookup_pg")
        stream = p.source(sources.directory(str(inbox), format="json"), name="orders").key_by("customer")
        customers = p.source(sources.postgres(PG_DSN, table, "version"), name="customers").key_by("id")
        stream.lookup(customers, version="version", deleted="deleted", name="enrich").sink(sinks.memory("j_lookup"))
        from sluice.runtime.sinks import clear_memory

        clear_memory("j_lookup")
        p.run(
            str(tmp_path / "ckpt"),
            spark=spark,
            duration=180,
            stop_when=lambda _: memory_table("j_lookup") is not None and memory_table("j_lookup").num_rows >= rows,
        )
        return sorted(((r["customer"], r["order"], r["name"]) for r in memory_table("j_lookup").to_pylist()), key=repr)

    try:
        pg(f"INSERT INTO {table} (id, name) VALUES ('a', 'Ada'), ('ü', 'Üwe'), ('b', 'Bo')")
        orders(
            "1.json",
            [
                {"customer": "a", "order": 1},
                {"customer": "ü", "order": 2},
                {"customer": "zz", "order": 3},
                {"customer": None, "order": 4},
            ],
        )
        assert run(4) == [("a", 1, "Ada"), ("zz", 3, None), ("ü", 2, "Üwe"), (None, 4, None)]
        pg(f"UPDATE {table} SET name = 'Ada L.', version = nextval('{table}_v') WHERE id = 'a'")
        pg(f"UPDATE {table} SET deleted = true, version = nextval('{table}_v') WHERE id = 'ü'")
        orders("2.json", [{"customer": "a", "order": 5}, {"customer": "ü", "order": 6}, {"customer": "b", "order": 7}])
        assert run(3) == [("a", 5, "Ada L."), ("b", 7, "Bo"), ("ü", 6, None)]
    finally:
        pg(f"DROP TABLE IF EXISTS {table}")
        pg(f"DROP SEQUENCE IF EXISTS {table}_v")
