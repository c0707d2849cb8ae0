"""Bad input never stops a directory source: every record that cannot be read (malformed
JSON, a value of the wrong type, binary garbage, a CSV row with too many cells, a truncated
Parquet file) goes to the dead-letter channel with its file, line and reason; empty files
and a 5 MB line are read; the job goes on, and a restart neither repeats nor loses a record.
Counts are checked against the input: every non-blank line is either a row or a dead letter."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sluice
from sluice import sinks, sources
from sluice.runtime.batch import metrics as metrics_log
from sluice.runtime.side_outputs import DEAD_LETTER, read_side_output
from sluice.runtime.sinks import clear_memory, memory_batches, memory_table
from sluice.runtime.sources.files import read_records

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def lines(*records) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)


def garbage(n: int, seed: int = 7) -> bytes:
    """Random bytes with no newline: one 'line' of binary garbage."""
    return bytes(b if b != 10 else 0 for b in random.Random(seed).randbytes(n))


def json_inbox(inbox) -> tuple[set[int], list[str]]:
    """Files with every kind of bad input; returns the ids that can be read and the
    locations of those that cannot."""
    inbox.mkdir()
    (inbox / "a_good.json").write_text(lines(*({"id": i, "name": f"n{i}"} for i in range(100))))
    (inbox / "b_malformed.json").write_text(
        lines({"id": 100, "name": "x"}, '{"id": 101, "name": ', "", {"id": 102}, "[1, 2]", {"id": 103, "name": "y"})
    )
    (inbox / "c_wrong_type.json").write_text(lines({"id": 104, "name": "z"}, {"id": "105", "name": "w"}, {"id": 106, "name": 7}))
    (inbox / "d_empty.json").write_bytes(b"")
    (inbox / "e_garbage.json").write_bytes(garbage(3000))
    (inbox / "f_long.json").write_text(lines({"id": 107, "name": "L" * 5_000_000}, {"id": 108, "name": "s"}))
    good = set(range(100)) | {100, 102, 103, 104, 107, 108}
    bad = [
        f"{inbox}/b_malformed.json:2",
        f"{inbox}/b_malformed.json:5",
        f"{inbox}/c_wrong_type.json:2",
        f"{inbox}/c_wrong_type.json:3",
        f"{inbox}/e_garbage.json:1",
    ]
    return good, bad


def test_records_that_cannot_be_read_are_rejected_one_by_one_with_file_and_line(tmp_path):
    good, bad = json_inbox(tmp_path / "in")
    ids, locations = set(), []
    for path in sorted((tmp_path / "in").iterdir()):
        table, rejects = read_records(str(path), "json", SCHEMA)
        ids |= set(table.column("id").to_pylist())
        locations += [r.location for r in rejects]
        assert all(r.error and r.text for r in rejects)
    assert ids == good and locations == bad


def run_until(pipeline, checkpoint, spark, rows: int):
    """Run the endless directory source until ``rows`` rows were admitted (or 4 minutes)."""

    def admitted(executor) -> bool:
        return sum(m.rows_in for m in metrics_log.read(checkpoint)) >= rows

    return pipeline.run(checkpoint, spark=spark, stop_when=admitted, duration=240)


@pytest.mark.spark
def test_bad_json_files_go_to_dead_letters_and_the_job_goes_on_across_a_restart(spark, tmp_path):
    inbox = tmp_path / "in"
    good, bad = json_inbox(inbox)
    clear_memory("bad_json_out")
    clear_memory("bad_json_dlq")

    def build():
        p = sluice.Pipeline("bad_json")
        p.dead_letter(sinks.memory("bad_json_dlq"))
        p.source(sources.directory(str(inbox), format="json", schema=SCHEMA, max_rows_per_batch=50), name="files").sink(
            sinks.memory("bad_json_out")
        )
        return p

    checkpoint = str(tmp_path / "ck")
    first = run_until(build(), checkpoint, spark, len(good))
    dead = read_side_output(checkpoint, DEAD_LETTER)
    assert sorted(d["location"] for d in dead) == sorted(bad)
    assert all(d["operator"] == "files" and d["error"] for d in dead)
    assert (
        json.loads(next(d for d in dead if d["location"].endswith("c_wrong_type.json:2"))["record"])
        == '{"id": "105", "name": "w"}'
    )
    assert first.dead_letters == len(bad)
    forwarded = [r for table in memory_batches("bad_json_dlq").values() for r in table.to_pylist()]
    assert sorted(r["location"] for r in forwarded) == sorted(bad)  # once each, to the sink too

    # more files arrive; the restart reads only them
    (inbox / "g_more.json").write_text(lines({"id": 200, "name": "m"}, "not json", {"id": 201, "name": "n"}))
    second = run_until(build(), checkpoint, spark, len(good) + 2)
    ids = memory_table("bad_json_out").column("id").to_pylist()
    assert sorted(ids) == sorted(good | {200, 201})  # nothing lost, nothing twice
    dead = read_side_output(checkpoint, DEAD_LETTER)
    assert sorted(d["location"] for d in dead) == sorted(bad + [f"{inbox}/g_more.json:2"])
    assert second.dead_letters == 1
    assert sum(m.dead_letters for m in metrics_log.read(checkpoint)) == len(bad) + 1


@pytest.mark.spark
def test_bad_csv_and_parquet_files_go_to_dead_letters(spark, tmp_path):
    csv_in, parquet_in = tmp_path / "csv", tmp_path / "parquet"
    csv_in.mkdir()
    parquet_in.mkdir()
    (csv_in / "a.csv").write_text("id,name\n1,a\n2,b,extra\nthree,c\n4,d\n")
    (csv_in / "b_empty.csv").write_bytes(b"")
    (csv_in / "c_header_only.csv").write_text("id,name\n")
    (csv_in / "d_garbage.csv").write_bytes(garbage(2000, seed=3))
    pq.write_table(pa.table({"id": [10, 11], "name": ["p", "q"]}), parquet_in / "a.parquet")
    whole = (parquet_in / "a.parquet").read_bytes()
    (parquet_in / "b_truncated.parquet").write_bytes(whole[: len(whole) // 2])
    pq.write_table(pa.table({"id": ["12", "x"], "name": ["r", "s"]}), parquet_in / "c_types.parquet")
    (parquet_in / "d_empty.parquet").write_bytes(b"")
    clear_memory("bad_files_out")
    p = sluice.Pipeline("bad_files")
    csv = p.source(sources.directory(str(csv_in), format="csv", schema=SCHEMA), name="csv")
    parquet = p.source(sources.directory(str(parquet_in), format="parquet", schema=SCHEMA), name="parquet")
    csv.union(parquet).sink(sinks.memory("bad_files_out"))
    checkpoint = str(tmp_path / "ck")
    run_until(p, checkpoint, spark, 5)
    assert sorted(memory_table("bad_files_out").column("id").to_pylist()) == [1, 4, 10, 11, 12]
    dead = {d["location"]: d for d in read_side_output(checkpoint, DEAD_LETTER)}
    assert {loc for loc in dead if not loc.startswith(str(csv_in / "d_garbage.csv"))} == {
        f"{csv_in}/a.csv:3",
        f"{csv_in}/a.csv:4",
        f"{parquet_in}/b_truncated.parquet",
        f"{parquet_in}/c_types.parquet:row 2",
    }
    assert any(loc.startswith(str(csv_in / "d_garbage.csv")) for loc in dead)  # rejected, whole or in rows
    assert "Parquet" in dead[f"{parquet_in}/b_truncated.parquet"]["error"]
    assert dead[f"{csv_in}/a.csv:3"]["operator"] == "csv" and dead[f"{parquet_in}/c_types.parquet:row 2"]["operator"] == "parquet"
