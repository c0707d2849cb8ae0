"""Typed ``process`` state (``state_schema=``): stored one column per field, migrated across a
restart that adds nullable fields or removes fields, and a restart with any other change of
its shape stops with the pipeline-change message. Pure tests first, then local Spark."""

from __future__ import annotations

import pyarrow as pa
import pytest
from tests.graph.test_pipeline_changes import FIRST, SECOND, add_file, assert_stops, inbox, run, source  # noqa: F401

import sluice
from sluice import sinks
from sluice.errors import PipelineError
from sluice.graph.state_schema import describe_fields, parse_state_schema, state_differences
from sluice.runtime.kernels.keyed import KEY_GROUP, BatchContext
from sluice.runtime.kernels.process import ProcessKernel
from sluice.runtime.sinks import clear_memory, memory_batches
from sluice.runtime.state.format import conform

INPUT = pa.schema([("k", pa.string()), ("v", pa.int64())])
V1 = pa.schema([("n", pa.int64()), ("last", pa.int64())])
V2 = pa.schema([("n", pa.int64()), ("note", pa.string())])  # "last" removed, "note" added


def rows(*pairs) -> pa.Table:
    table = pa.Table.from_pylist([{"k": k, "v": v} for k, v in pairs], schema=INPUT)
    return table.append_column(KEY_GROUP, pa.array([0] * table.num_rows, pa.int32()))


def count_v1(key, records, state):
    if records.column("v").to_pylist() == [-1]:
        state.update({"n": "not a number"})  # does not fit the schema: a dead letter
        return None
    before = state.value or {"n": 0}
    state.update({"n": before["n"] + records.num_rows, "last": max(records.column("v").to_pylist())})
    return None


def apply(kernel: ProcessKernel, batch: pa.Table, state: pa.Table):
    result = kernel.process(batch, state, BatchContext(0, 0))
    return result, result.upserts


def test_typed_state_is_stored_as_columns_and_bad_values_are_dead_letters():
    kernel = ProcessKernel(["k"], count_v1, None, state_schema=V1)
    schema = kernel.state_schema(INPUT)
    assert schema.names == ["k", "n", "last"] and schema.field("n").type == pa.int64()
    empty = schema.append(pa.field(KEY_GROUP, pa.int32())).empty_table()
    result, state = apply(kernel, rows(("a", 1), ("a", 5), ("b", 2)), empty)
    assert sorted(state.select(["k", "n", "last"]).to_pylist(), key=lambda r: r["k"]) == [
        {"k": "a", "n": 2, "last": 5},
        {"k": "b", "n": 1, "last": 2},
    ]
    result, after = apply(kernel, rows(("a", -1), ("b", 7)), state)
    assert [d.key for d in result.dead_letters] == [("a",)]
    assert "does not fit its state_schema" in str(result.dead_letters[0].error)
    assert after.select(["k", "n", "last"]).to_pylist() == [{"k": "b", "n": 2, "last": 7}]  # a untouched


def test_a_not_null_field_left_empty_is_a_dead_letter():
    def partial(key, records, state):
        state.update({"last": 1})  # "n" is declared not null

    kernel = ProcessKernel(
        ["k"], partial, None, state_schema=pa.schema([pa.field("n", pa.int64(), nullable=False), ("last", pa.int64())])
    )
    empty = kernel.state_schema(INPUT).append(pa.field(KEY_GROUP, pa.int32())).empty_table()
    result, state = apply(kernel, rows(("a", 1)), empty)
    assert state.num_rows == 0 and "not-null field(s) ['n']" in str(result.dead_letters[0].error)


def test_state_written_with_one_schema_reads_migrated_with_the_next():
    seen = {}

    def count_v2(key, records, state):
        seen[key[0]] = state.value
        before = state.value or {"n": 0}
        state.update({"n": before["n"] + records.num_rows, "note": "v2"})

    old = ProcessKernel(["k"], count_v1, None, state_schema=V1)
    _, stored = apply(
        old, rows(("a", 1), ("b", 2)), old.state_schema(INPUT).append(pa.field(KEY_GROUP, pa.int32())).empty_table()
    )
    new = ProcessKernel(["k"], count_v2, None, state_schema=V2)
    # what the store's read does with the kernel's state schema: added null, removed dropped
    migrated = conform(stored, new.state_schema(INPUT)).select(["k", "n", "note", KEY_GROUP])
    _, after = apply(new, rows(("a", 3), ("c", 4)), migrated)
    assert seen == {"a": {"n": 1, "note": None}, "c": None}
    assert sorted(after.select(["k", "n", "note"]).to_pylist(), key=lambda r: r["k"]) == [
        {"k": "a", "n": 2, "note": "v2"},
        {"k": "c", "n": 1, "note": "v2"},
    ]


def test_which_changes_migrate():
    v1, v2 = describe_fields(V1), describe_fields(V2)
    assert v1 == ["n int64", "last int64"]
    assert state_differences(v1, v2) == []  # one added, one removed
    assert state_differences(v1, ["n string"]) == ["state field 'n' changed type from int64 to string"]
    assert "from pickled values to typed fields (n int64" in state_differences(None, v1)[0]
    assert "to pickled values" in state_differences(v1, None)[0]
    assert state_differences(None, None) == []
    strict = describe_fields(pa.schema([pa.field("n", pa.int64(), nullable=False), ("id", pa.string())]))
    assert strict == ["n int64 not null", "id string"]
    assert state_differences(v1, strict) == ["state field 'n' became not null: the state written before may have none"]
    assert state_differences(strict, ["n int64"]) == []  # not null -> nullable: every value fits
    assert state_differences(["n int64"], ["n int64", "id string not null"]) == [
        "state field 'id' was added as not null: the state written before has no value for it"
    ]
    with pytest.raises(PipelineError, match="clash with the key columns"):
        parse_state_schema({"k": "int"}, ["k"], "process")
    with pytest.raises(PipelineError, match="at least one field"):
        parse_state_schema({}, ["k"], "process")


# ---- on Spark: run, stop, change the state's shape, restart -------------------------------


def counting(directory, state_schema, fn):
    p = sluice.Pipeline("changes")
    out = {"k": "string", "n": "int", "migrated": "bool"}
    source(p, directory).key_by("k").process(fn, out, state_schema=state_schema, name="counts").sink(sinks.memory("out"))
    return p


def first_version(key, records, state):
    before = state.value or {"n": 0}
    state.update({"n": before["n"] + records.num_rows, "last": max(records.column("v").to_pylist())})
    return [{"k": key[0], "n": state.value["n"], "migrated": False}]


def second_version(key, records, state):
    before = state.value or {"n": 0}
    migrated = state.value is not None and set(state.value) == {"n", "note"} and state.value["note"] is None
    state.update({"n": before["n"] + records.num_rows, "note": "seen"})
    return [{"k": key[0], "n": state.value["n"], "migrated": migrated}]


@pytest.mark.spark
@pytest.mark.slow
def test_restart_with_fields_added_and_removed_migrates_the_state(spark, tmp_path, inbox):  # noqa: F811
    clear_memory()
    checkpoint = str(tmp_path / "ckpt")
    run(counting(inbox, {"n": "int", "last": "int"}, first_version), checkpoint, spark, len(FIRST))
    first = {r["k"]: r["n"] for b in sorted(memory_batches("out")) for r in memory_batches("out")[b].to_pylist()}
    assert first == {"a": 10, "b": 10, "c": 10}
    clear_memory()
    add_file(inbox, "2.json", SECOND)
    run(counting(inbox, {"n": "int", "note": "string"}, second_version), checkpoint, spark, len(SECOND))
    emitted = [r for b in sorted(memory_batches("out")) for r in memory_batches("out")[b].to_pylist()]
    latest = {r["k"]: r["n"] for r in emitted}
    assert latest == {"a": 20, "b": 20, "c": 20}  # the counts carried over
    firsts = {}
    for r in emitted:
        firsts.setdefault(r["k"], r["migrated"])
    assert firsts == {"a": True, "b": True, "c": True}  # each key's first call saw the migrated state
    state = sluice.state.read(checkpoint, "counts")
    assert state.column_names == ["k", "n", "note", "key_group"]  # "last" was removed
    assert {r["k"]: (r["n"], r["note"]) for r in state.to_pylist()} == dict.fromkeys("abc", (20, "seen"))
    assert "n int64" in open(f"{checkpoint}/pipeline.json").read()


@pytest.mark.spark
@pytest.mark.slow
def test_restart_with_a_field_of_another_type_stops(spark, tmp_path, inbox):  # noqa: F811
    def as_text(key, records, state):
        state.update({"n": str(records.num_rows)})

    assert_stops(
        spark,
        tmp_path,
        inbox,
        lambda: counting(inbox, {"n": "int", "last": "int"}, first_version),
        lambda: counting(inbox, {"n": "string"}, as_text),
        "counts",
        "state field 'n' changed type from int64 to string",
    )
