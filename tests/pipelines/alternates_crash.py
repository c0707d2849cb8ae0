"""The pipeline of the alternates crash test: a stateless operator and a keyed one, each with
two alternates whose output tells which ran; the keyed alternates share a running count per
key. ``SLUICE_TEST_OUT`` says where sinks write; ``SLUICE_TEST_ROWS`` and
``SLUICE_TEST_PER_BATCH`` size the input."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.compute as pc

import sluice
from sluice import Alt, sinks, sources

OUT = os.environ.get("SLUICE_TEST_OUT", "/tmp/sluice-alternates")
ROWS = int(os.environ.get("SLUICE_TEST_ROWS", "12000"))
PER_BATCH = int(os.environ.get("SLUICE_TEST_PER_BATCH", "2000"))
SCHEMA = {"id": "int64", "meter": "string", "v": "int64"}


def plain(batch: pa.RecordBatch) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([batch.column("id"), batch.column("meter"), batch.column("id")], names=["id", "meter", "v"])


def scaled(batch: pa.RecordBatch) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [batch.column("id"), batch.column("meter"), pc.multiply(batch.column("id"), 1000)], names=["id", "meter", "v"]
    )


def count_a(key, rows: pa.Table, state):
    state.update((state.value or 0) + rows.num_rows)
    return [{"meter": key[0], "n": state.value, "mode": "a"}]


def count_b(key, rows: pa.Table, state):
    state.update((state.value or 0) + rows.num_rows)
    return [{"meter": key[0], "n": state.value, "mode": "b"}]


def build(out: str = OUT, rows: int = ROWS, per_batch: int = PER_BATCH) -> sluice.Pipeline:
    p = sluice.Pipeline("alternates_crash", partitions=2, max_parallelism=16)
    readings = p.source(
        sources.generator(
            fields={"id": sources.Sequence(), "meter": sources.Keys(40, prefix="m")},
            seed=5,
            total_rows=rows,
            max_rows_per_batch=per_batch,
        ),
        name="readings",
    )
    values = readings.map_batches(
        schema=SCHEMA, name="scale", alternates={"plain": Alt(plain, value=1.0), "scaled": Alt(scaled, value=0.5)}
    )
    values.sink(sinks.files(os.path.join(out, "values"), format="parquet"), name="values_out")
    values.key_by("meter").process(
        schema={"meter": "string", "n": "int64", "mode": "string"},
        name="count",
        alternates={"a": Alt(count_a, value=1.0), "b": Alt(count_b, value=0.8)},
    ).sink(sinks.files(os.path.join(out, "counts"), format="parquet"), name="counts_out")
    return p


pipeline = build()
