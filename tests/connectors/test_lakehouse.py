"""Delta Lake and Iceberg sinks and the Delta source, on the real libraries (delta-rs,
pyiceberg with SQLite and PostgreSQL catalogs): a replayed batch writes nothing twice,
upserts equal DuckDB's reference, added columns evolve the table, values the table cannot
hold are dead letters with their reason, the output reads back through pyarrow and DuckDB,
and a Delta source reads what each version adds, within the admission limit, feeding a
second pipeline (bronze -> silver).

DuckDB reads the tables' Parquet data files as their logs list them (``DeltaTable.file_uris``,
the Iceberg scan's files): its delta and iceberg extensions are downloads this machine
cannot make.
"""

from __future__ import annotations

import contextlib
import json

import duckdb
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyiceberg.exceptions import NoSuchTableError
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.streaming.datasource import ReadMaxRows
from tests.connector_services import PG_DSN, pg, require, unique

import sluice
from sluice import agg, sinks, sources
from sluice.errors import PipelineError, SinkError, SourceError
from sluice.graph.lakehouse import IcebergSink
from sluice.runtime import connectors
from sluice.runtime.connectors.iceberg import open_catalog
from sluice.runtime.side_outputs import read_side_output
from sluice.runtime.sinks import clear_memory, memory_table
from sluice.runtime.sources import read_backlog
from sluice.runtime.sources.datasource import reader_type, stream_schema

ROWS = pa.table({"k": ["a", "b", "a", "c"], "n": [1, 2, 3, 4], "at": pa.array([0, 1, 2, 3], pa.timestamp("us", tz="UTC"))})


def duck_delta(uri: str, sql: str) -> list[tuple]:
    """``sql`` over the table ``t``: the Delta table's current Parquet files, read by DuckDB."""
    files = DeltaTable(uri).file_uris()
    return duckdb.sql(sql.replace(" FROM t", f" FROM read_parquet({files!r}, union_by_name = true)")).fetchall()


def dead_letters(checkpoint, batch_id: int) -> list[dict]:
    return read_side_output(checkpoint, "dead_letter", batch_id)


# --- Delta sink ------------------------------------------------------------------------------------


def test_delta_sink_appends_each_batch_once_evolves_and_dead_letters_what_cannot_fit(tmp_path):
    uri, job = str(tmp_path / "t"), str(tmp_path / "ckpt")
    spec = sinks.delta(uri)
    for batch in (0, 0, 1, 1):  # 0 and 1 replayed
        connectors.write(spec, ROWS, batch, job)
    dt = DeltaTable(uri)
    assert dt.version() == 1 and dt.transaction_version(connectors.job_id(job)) == 1
    assert sorted(dt.to_pyarrow_table()["n"].to_pylist()) == [1, 1, 2, 2, 3, 3, 4, 4]

    # batch 2 adds a column and has a value the table's int64 cannot hold
    more = pa.table({"k": ["d", "e", "f"], "n": ["5", "six", "7"], "at": ROWS["at"][:3], "note": ["x", None, "z"]})
    for _ in range(2):
        connectors.write(spec, more, 2, job)
        letters = dead_letters(job, 2)
        assert len(letters) == 1 and json.loads(letters[0]["record"])["n"] == "six"
        assert "column 'n'" in letters[0]["error"] and "int64" in letters[0]["error"]
    table = DeltaTable(uri).to_pyarrow_table()
    assert table.schema.field("note").nullable
    assert sorted(zip(table["n"].to_pylist(), table["note"].to_pylist()), key=repr)[-2:] == [(5, "x"), (7, "z")]
    # readable by pyarrow's dataset reader and by DuckDB from the files the log lists
    assert duck_delta(uri, "SELECT count(*), sum(n), count(note) FROM t") == [(10, 32, 2)]

    # a batch without a column the table has: that column is null
    connectors.write(spec, pa.table({"k": ["g"], "n": [8]}), 3, job)
    assert duck_delta(uri, "SELECT count(*) FROM t WHERE k = 'g' AND \"at\" IS NULL AND note IS NULL") == [(1,)]

    # another job (a new checkpoint) writing to the same table starts afresh
    other = str(tmp_path / "other")
    connectors.write(spec, ROWS, 0, other)
    assert DeltaTable(uri).to_pyarrow_table().num_rows == 15


def test_delta_upsert_by_key_matches_duckdb(tmp_path):
    uri, job = str(tmp_path / "u"), str(tmp_path / "ckpt")
    spec = sinks.delta(uri, mode="upsert", key=["k", "g"])
    batches = [
        pa.table(
            {
                "k": [f"k{(i * 7 + b) % 11}" for i in range(40)],
                "g": [i % 3 for i in range(40)],
                "v": [b * 100 + i for i in range(40)],
            }
        )
        for b in range(4)
    ]
    reference = duckdb.connect()
    reference.sql("CREATE TABLE ref (k TEXT, g BIGINT, v BIGINT, PRIMARY KEY (k, g))")
    for b, batch in enumerate(batches):
        connectors.write(spec, batch, b, job)
        connectors.write(spec, batches[0], 0, job)  # a replay of batch 0 changes nothing
        reference.register("batch", batch)
        # the last row of a key in the batch wins
        reference.sql(
            "INSERT OR REPLACE INTO ref SELECT k, g, last(v ORDER BY rowid) FROM "
            "(SELECT *, row_number() OVER () AS rowid FROM batch) GROUP BY k, g"
        )
    want = reference.sql("SELECT k, g, v FROM ref ORDER BY k, g").fetchall()
    assert duck_delta(uri, "SELECT k, g, v FROM t ORDER BY k, g") == want
    assert len(want) == 33

    # a null key cannot be matched: a dead letter
    connectors.write(spec, pa.table({"k": [None, "k1"], "g": [0, 0], "v": [1, 2]}), 4, job)
    assert [x["error"] for x in dead_letters(job, 4)] == ["key column 'k' is null"]
    assert duck_delta(uri, "SELECT v FROM t WHERE k = 'k1' AND g = 0") == [(2,)]


@pytest.mark.parametrize("kind", ["delta", "iceberg"])
def test_a_lakehouse_dead_letter_table_takes_columns_that_are_null_so_far(tmp_path, kind):
    """Dead letters as the executor hands them over: a batch whose ``location`` and ``key``
    are all null (Arrow type null) creates text columns, which later batches fill."""
    job = str(tmp_path / "ckpt")
    spec = (
        sinks.delta(str(tmp_path / "dead"))
        if kind == "delta"
        else sinks.iceberg(f"sqlite:///{tmp_path}/catalog.db", "jobs.dead", warehouse=f"file://{tmp_path}/warehouse")
    )
    letter = {"batch_id": 0, "operator": "parse", "location": None, "error": "bad", "record": "{}", "key": None}
    connectors.write(spec, pa.Table.from_pylist([letter]), 0, job)
    connectors.write(spec, pa.Table.from_pylist([{**letter, "batch_id": 1, "location": "f:3", "key": "[7]"}]), 1, job)
    rows = (
        DeltaTable(spec.uri).to_pyarrow_table()
        if kind == "delta"
        else open_catalog(spec).load_table(spec.table).scan().to_arrow()
    )
    assert sorted(zip(rows["location"].to_pylist(), rows["key"].to_pylist()), key=repr) == [("f:3", "[7]"), (None, None)]


def test_delta_sink_rejects_a_bad_description():
    with pytest.raises(PipelineError, match="needs key="):
        sinks.delta("/x", mode="upsert")
    with pytest.raises(PipelineError, match="mode must be one of"):
        sinks.delta("/x", mode="merge")


# --- Iceberg sink ----------------------------------------------------------------------------------


@pytest.mark.parametrize("catalog", ["sqlite", "postgresql"])
def test_iceberg_sink_appends_once_per_batch_upserts_and_evolves(tmp_path, catalog):
    if catalog == "postgresql":
        require("PostgreSQL")
        url = PG_DSN
    else:
        url = f"sqlite:///{tmp_path}/catalog.db"
    namespace, job = unique("ns"), str(tmp_path / "ckpt")
    warehouse = f"file://{tmp_path}/warehouse"
    spec = sinks.iceberg(url, f"{namespace}.events", warehouse=warehouse)
    try:
        for batch in (0, 1, 1, 0):
            connectors.write(spec, ROWS, batch, job)
        table = open_catalog(spec).load_table(spec.table)
        assert sorted(table.scan().to_arrow()["n"].to_pylist()) == [1, 1, 2, 2, 3, 3, 4, 4]
        summaries = [s.summary for s in table.snapshots()]
        assert [(s["sluice.job"], s["sluice.batch"]) for s in summaries] == [
            (connectors.job_id(job), "0"),
            (connectors.job_id(job), "1"),
        ]

        more = pa.table({"k": ["d", "e"], "n": ["5", "x"], "at": ROWS["at"][:2], "note": ["new", None]})
        connectors.write(spec, more, 2, job)
        connectors.write(spec, more, 2, job)
        assert "cannot be stored as int64" in dead_letters(job, 2)[0]["error"]
        scan = open_catalog(spec).load_table(spec.table).scan()
        data = scan.to_arrow()
        assert data.num_rows == 9 and data.filter(pa.compute.equal(data["k"], "d"))["note"].to_pylist() == ["new"]
        # DuckDB reads the data files of the snapshot
        files = [task.file.file_path.removeprefix("file://") for task in scan.plan_files()]
        assert duckdb.sql(f"SELECT count(*), sum(n) FROM read_parquet({files!r}, union_by_name = true)").fetchall() == [(9, 25)]

        upsert = sinks.iceberg(url, f"{namespace}.latest", warehouse=warehouse, key="k")
        connectors.write(upsert, ROWS, 0, job)
        connectors.write(upsert, pa.table({"k": ["b", "z"], "n": [20, 26], "at": ROWS["at"][:2]}), 1, job)
        connectors.write(upsert, ROWS, 0, job)  # replay: nothing
        latest = open_catalog(upsert).load_table(upsert.table).scan().to_arrow().sort_by("k")
        assert list(zip(latest["k"].to_pylist(), latest["n"].to_pylist())) == [("a", 3), ("b", 20), ("c", 4), ("z", 26)]
    finally:
        if catalog == "postgresql":
            cat = open_catalog(spec)
            for name in ("events", "latest"):
                with contextlib.suppress(NoSuchTableError):
                    cat.drop_table(f"{namespace}.{name}")
            pg("DELETE FROM iceberg_namespace_properties WHERE namespace = %s", (namespace,))


def test_an_iceberg_catalog_that_is_down_fails_naming_the_table(tmp_path):
    spec = IcebergSink(
        catalog="postgresql://postgres@127.0.0.1:1/test", table="a.b", warehouse=f"file://{tmp_path}", patience_s=1
    )
    with pytest.raises(SinkError, match=r"Iceberg table 'a\.b'.*unreachable"):
        connectors.write(spec, ROWS, 0, str(tmp_path))


# --- Delta source ----------------------------------------------------------------------------------


def _reader(spec, tmp_path, parallelism: int = 2):
    return reader_type(spec)(spec, "d", str(tmp_path / "ctl"), from_arrow_schema(stream_schema(spec)), parallelism)


def _read(reader, start, end) -> pa.Table:
    batches = [b for part in reader.partitions(start, end) for b in reader.read(part)]
    return pa.Table.from_batches(batches) if batches else pa.table({})


def test_delta_source_reads_the_files_each_version_adds_within_the_limit(tmp_path):
    uri = str(tmp_path / "bronze")
    for v in range(3):
        write_deltalake(uri, pa.table({"id": pa.array(range(v * 100, v * 100 + 100), pa.int64())}), mode="append")
    write_deltalake(
        uri, pa.table({"id": pa.array(range(300, 350), pa.int64()), "tag": ["t"] * 50}), mode="append", schema_mode="merge"
    )
    DeltaTable(uri).optimize.compact()  # rewrites files without changing data: skipped
    spec = sources.delta(uri, max_rows_per_batch=150)
    assert spec.schema().names == ["id", "tag"]
    reader = _reader(spec, tmp_path)
    start, seen, sizes = reader.initialOffset(), [], []
    while (end := reader.latestOffset(start, ReadMaxRows(1 << 62))) != start:
        assert reader.reportLatestOffset()["rows"] == 350  # the backlog is the rows of known versions
        batch = _read(reader, start, end)
        again = _read(_reader(spec, tmp_path), start, end)  # a replay in a fresh process
        assert again.equals(batch)
        seen += batch["id"].to_pylist()
        sizes.append(batch.num_rows)
        start = end
    assert sorted(seen) == list(range(350)) and sizes == [100, 100, 150]
    assert start["position"] == [5, 0]

    # a version that deletes rows is no append: it stops the source, or is skipped on request
    DeltaTable(uri).delete("id < 10")
    write_deltalake(uri, pa.table({"id": pa.array([1000], pa.int64()), "tag": ["late"]}), mode="append")
    with pytest.raises(SourceError, match=r"version 5 .*deletes or rewrites rows.*skip_change_commits"):
        reader.latestOffset(start, ReadMaxRows(1 << 62))
    skipping = _reader(sources.delta(uri, skip_change_commits=True), tmp_path)
    end = skipping.latestOffset(start, ReadMaxRows(1 << 62))
    assert _read(skipping, start, end).select(["id", "tag"]).to_pylist() == [{"id": 1000, "tag": "late"}]


def test_delta_source_from_latest_keeps_its_start_across_a_restart(tmp_path):
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"id": pa.array([1, 2], pa.int64())}))
    spec = sources.delta(uri, starting_version="latest")
    first = _reader(spec, tmp_path).initialOffset()
    write_deltalake(uri, pa.table({"id": pa.array([3], pa.int64())}), mode="append")
    assert _reader(spec, tmp_path).initialOffset() == first  # resolved once, kept
    reader = _reader(spec, tmp_path)
    end = reader.latestOffset(first, ReadMaxRows(1 << 62))
    assert _read(reader, first, end)["id"].to_pylist() == [3]
    with pytest.raises(SourceError, match="no Delta table"):
        sources.delta(str(tmp_path / "missing"))


@pytest.mark.spark
def test_a_delta_bronze_table_feeds_a_silver_aggregate_job(spark, tmp_path):
    """Pipeline 1: generator -> Delta (bronze, append). Pipeline 2: Delta source -> keyed count
    and sum -> Delta (silver, upsert). After more rows land in bronze, the silver job's
    restart reads only those; silver equals DuckDB's aggregate of bronze."""
    bronze, silver = str(tmp_path / "bronze"), str(tmp_path / "silver")
    n = 4000
    p1 = sluice.Pipeline("bronze")
    p1.source(
        sources.generator(
            fields={"id": sources.Sequence(), "key": sources.Keys(17, prefix="k")}, total_rows=n, max_rows_per_batch=1000, seed=3
        ),
        name="gen",
    ).sink(sinks.delta(bronze))
    p1.run(str(tmp_path / "ckpt1"), spark=spark)
    assert DeltaTable(bronze).version() == 3  # one version per batch

    p2 = sluice.Pipeline("silver")
    p2.source(sources.delta(bronze, max_rows_per_batch=1500), name="bronze").key_by("key").aggregate(
        n=agg.count(), total=agg.sum("id")
    ).sink(sinks.delta(silver, mode="upsert", key="key"))
    p2.dead_letter(sinks.memory("silver_dead"))

    def silver_rows(expected: int):
        def done(_) -> bool:
            try:
                return duck_delta(silver, "SELECT sum(n) FROM t") == [(expected,)]
            except Exception:  # no table yet
                return False

        return done

    clear_memory("silver_dead")
    checkpoint = str(tmp_path / "ckpt2")
    p2.run(checkpoint, spark=spark, duration=120, stop_when=silver_rows(n))
    # more rows from another writer, then the silver job goes on from its offsets
    write_deltalake(
        bronze, pa.table({"id": pa.array(range(n, n + 500), pa.int64()), "key": [f"k{i % 5}" for i in range(500)]}), mode="append"
    )
    p2.run(checkpoint, spark=spark, duration=120, stop_when=silver_rows(n + 500))
    want = duck_delta(bronze, "SELECT key, count(*), sum(id) FROM t GROUP BY key ORDER BY key")
    assert duck_delta(silver, "SELECT key, n, total FROM t ORDER BY key") == want
    status = read_backlog(f"{checkpoint}/sources", "bronze")
    assert status["planned_rows"] == n + 500 and status["backlog"] == 0
    assert memory_table("silver_dead") is None


def test_a_partitioned_delta_table_round_trips_through_the_source(tmp_path):
    """Partition values live in the log, not in the files: the source puts them back."""
    uri, job = str(tmp_path / "p"), str(tmp_path / "ckpt")
    spec = sinks.delta(uri, partition_by="k")
    connectors.write(spec, ROWS, 0, job)
    connectors.write(spec, pa.table({"k": ["d"], "n": [5], "at": ROWS["at"][:1]}), 1, job)
    assert DeltaTable(uri).metadata().partition_columns == ["k"]
    source = sources.delta(uri)
    reader = _reader(source, tmp_path)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(1 << 62))
    got = _read(reader, start, end).select(["k", "n", "at"])
    assert sorted(got.to_pylist(), key=lambda r: r["n"]) == [*ROWS.to_pylist(), {"k": "d", "n": 5, "at": ROWS["at"][0].as_py()}]


@pytest.mark.spark
def test_values_a_delta_table_cannot_hold_reach_the_dead_letter_sink(spark, tmp_path):
    uri = str(tmp_path / "typed")
    write_deltalake(uri, pa.table({"id": pa.array([], pa.int64()), "code": pa.array([], pa.int64())}))
    p = sluice.Pipeline("typed")
    p.source(
        sources.generator(
            fields={"id": sources.Sequence(), "code": sources.Choice(("1", "22", "x"))},
            total_rows=600,
            max_rows_per_batch=200,
            seed=5,
        ),
        name="gen",
    ).sink(sinks.delta(uri))
    p.dead_letter(sinks.memory("typed_dead"))
    clear_memory("typed_dead")
    p.run(str(tmp_path / "ckpt"), spark=spark)
    letters = memory_table("typed_dead").to_pylist()
    table = DeltaTable(uri).to_pyarrow_table()
    assert table.num_rows + len(letters) == 600 and letters
    assert set(table["code"].to_pylist()) == {1, 22}
    assert {json.loads(x["record"])["code"] for x in letters} == {"x"}
    assert all("column 'code': 'x' cannot be stored as int64" in x["error"] for x in letters)
    assert sorted(table["id"].to_pylist() + [json.loads(x["record"])["id"] for x in letters]) == list(range(600))


def test_a_delta_data_file_that_cannot_be_read_is_named(tmp_path):
    """Outside a Sluice job there is no dead-letter channel: the error names the file (inside
    one, the file is a dead letter and the other files of the batch are read)."""
    uri = str(tmp_path / "t")
    for v in range(2):
        write_deltalake(uri, pa.table({"id": pa.array([v], pa.int64())}), mode="append")
    broken = DeltaTable(uri).file_uris()[0]
    with open(broken, "r+b") as f:
        f.truncate(10)
    reader = _reader(sources.delta(uri), tmp_path)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(1 << 62))
    with pytest.raises(SourceError, match=r"file .*\.parquet: cannot be read"):
        _read(reader, start, end)


@pytest.mark.spark
def test_an_unreadable_delta_data_file_is_a_dead_letter_and_the_rest_is_read(spark, tmp_path):
    uri = str(tmp_path / "t")
    for v in range(3):
        write_deltalake(uri, pa.table({"id": pa.array([v * 10, v * 10 + 1], pa.int64())}), mode="append")
    broken = sorted(DeltaTable(uri).file_uris())[0]
    with open(broken, "r+b") as f:
        f.truncate(10)
    clear_memory("unreadable_out")
    clear_memory("unreadable_dead")
    p = sluice.Pipeline("unreadable")
    p.source(sources.delta(uri), name="t").sink(sinks.memory("unreadable_out"))
    p.dead_letter(sinks.memory("unreadable_dead"))

    def done(_) -> bool:
        out = memory_table("unreadable_out")
        return out is not None and out.num_rows >= 4 and memory_table("unreadable_dead") is not None

    p.run(str(tmp_path / "ckpt"), spark=spark, duration=90, stop_when=done)
    assert memory_table("unreadable_out").num_rows == 4
    letters = memory_table("unreadable_dead").to_pylist()
    assert len(letters) == 1 and broken.rsplit("/", 1)[1] in letters[0]["location"]
    assert "cannot be read" in letters[0]["error"]
