"""What a new user meets in the first hour: the documented schema= format, the file sink's
changelog and its reader, `sluice.windows` from a bare `import sluice`, and an error that
points at the flat_map whose schema is missing rather than at the operator after it."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest

import sluice
from sluice import agg, sinks, sources
from sluice.errors import SchemaError
from sluice.runtime.sinks import clear_memory, memory_table


def split_words(record: dict):
    return ({"word": w} for w in record["text"].split())


def test_windows_agg_sinks_and_sources_come_with_import_sluice():
    code = (
        "import sluice; print(sluice.windows.tumbling('1m').size, sluice.agg.count().kind, sluice.sinks.files,"
        " sluice.sources.generator)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("60")


def test_flat_map_without_schema_is_named_as_the_likely_cause():
    p = sluice.Pipeline("words")
    lines = p.source(sources.generator(fields={"text": sources.Choice(["a b", "b c"])}), name="lines")
    lines.flat_map(split_words, name="split").key_by("word").aggregate(n=agg.count(), name="counts").sink(sinks.console())
    with pytest.raises(SchemaError) as err:
        p.graph.validate()
    message = str(err.value)
    assert err.value.operator == "split" and "test_first_hour.py" in err.value.location
    assert "schema is probably missing" in message
    assert "key_by uses unknown column(s) ['word']" in message  # the downstream error, kept as evidence


def test_a_map_that_keeps_its_columns_needs_no_schema():
    p = sluice.Pipeline("same")
    p.source(sources.generator(fields={"text": sources.Choice(["a"])})).map(lambda r: r).key_by("text").aggregate(
        n=agg.count()
    ).sink(sinks.console())
    p.graph.validate()


def test_documented_schema_and_docstrings_are_where_users_look():
    for method in (sluice.Stream.map_batches, sluice.Stream.map, sluice.Stream.flat_map, sluice.KeyedStream.process):
        assert "schema" in method.__doc__ and "pyarrow.Schema" in method.__doc__
    assert "fn(batch_id, table)" in sinks.callback.__doc__ and "idempotent per batch id" in sinks.callback.__doc__
    assert "changelog" in sinks.files.__doc__ and "read_latest" in sinks.files.__doc__


@pytest.mark.spark
def test_read_latest_gives_the_current_count_per_word(spark, tmp_path):
    """The flat_map example of the docstring, counted per word; the file sink's changelog holds
    a row per word and batch, read_latest the final count per word."""
    name = f"words-{uuid.uuid4().hex}"
    p = sluice.Pipeline("words", partitions=2)
    lines = p.source(
        sources.generator(
            fields={"text": sources.Choice(["a b", "b c c", "d"])}, rate=None, total_rows=400, seed=3, max_rows_per_batch=100
        )
    )
    words = lines.flat_map(split_words, schema={"word": "string"}, name="split")
    words.sink(sinks.memory(name))
    words.key_by("word").aggregate(n=agg.count(), name="counts").sink(sinks.files(str(tmp_path / "counts")))
    try:
        p.run(str(tmp_path / "checkpoint"), spark=spark)
        expected = Counter(memory_table(name).column("word").to_pylist())
    finally:
        clear_memory(name)
    changelog = sinks.read_files(str(tmp_path / "counts"))
    latest = sinks.read_latest(str(tmp_path / "counts"), keys="word")
    assert dict(zip(latest.column("word").to_pylist(), latest.column("n").to_pylist())) == expected
    assert latest.num_rows == len(expected) == 4 < changelog.num_rows  # four batches each changed the words
    assert sum(expected.values()) > 400


PIPELINE_FILE = """
import pyarrow as pa
import pyarrow.compute as pc
from sluice import Pipeline, sinks, sources

def to_wh(batch):
    return pa.RecordBatch.from_arrays([batch.column("meter"), pc.multiply(batch.column("kwh"), 1000.0)],
                                      names=["meter", "wh"])

def words(record):
    return [{"meter": record["meter"], "wh": record["wh"]}] * 2

pipeline = Pipeline("profiled")
(pipeline.source(sources.generator(fields={"meter": sources.Keys(10), "kwh": sources.Normal(0.4, 0.1)}, seed=1))
    .map_batches(to_wh, schema={"meter": "string", "wh": "double"}, name="parse")
    .filter("wh > 0")
    .flat_map(words, schema={"meter": "string", "wh": "double"}, name="twice")
    .sink(sinks.console()))
"""


def test_profile_takes_an_operator_of_a_pipeline_file_by_name(tmp_path):
    from sluice.cli.pipeline_operator import PipelineOperator
    from sluice.cli.profile import resolve_operator
    from sluice.errors import ConfigError

    path = tmp_path / "meters.py"
    path.write_text(PIPELINE_FILE)
    spec, kwargs, name = resolve_operator(f"{path}:twice", {})
    assert spec.endswith("pipeline_operator.py:PipelineOperator") and name == "twice"
    op = PipelineOperator(**kwargs)
    op.setup()
    parse = PipelineOperator(str(path), "parse")
    parse.setup()
    # `twice`'s sample is the source's rows through `parse` (kWh -> Wh); the SQL filter is not run
    assert len(op.records) == len(parse.records) == 2000
    assert [r["wh"] for r in op.records] == pytest.approx([r["kwh"] * 1000.0 for r in parse.records])
    assert op.process(3) == [op.records[3]] * 2
    assert parse.process(2).column("wh").to_pylist() == pytest.approx([parse.records[2]["kwh"] * 1000.0])
    with pytest.raises(ConfigError, match="no operator 'nope'.*'parse', 'twice'"):
        resolve_operator(f"{path}:nope", {})
    pi = f"{Path(__file__).resolve().parents[2]}/examples/operators/pi.py:Pi"
    assert resolve_operator(pi, {"iterations": 3}) == (pi, {"iterations": 3}, None)
