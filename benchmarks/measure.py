"""Helpers the throughput benchmarks share: how a sustained rate is measured, and how runs
of two systems are interleaved on this shared machine."""

from __future__ import annotations

import os
import shutil
import statistics
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path


def sustained(batches: list[tuple[float, float, int]], warmup: int) -> float:
    """Rows/s of the batches (start, end, rows) after ``warmup``: the median over batches of
    rows / period, a batch's period being from its start to the next batch's start (its end
    for the last), so the per-batch overhead between batches counts. The median keeps one
    batch slowed by a neighbour on this shared machine from deciding the figure."""
    steady = sorted(batches)[warmup:]
    if len(steady) < 2:
        raise SystemExit("too few batches to measure: raise --batches")
    rates = []
    for (start, end, rows), nxt in zip(steady, steady[1:] + [None]):
        period = (nxt[0] if nxt is not None else end) - start
        rates.append(rows / period)
    return statistics.median(rates)


def alternating(a, b, repeats: int) -> list:
    """``repeats`` runs of each, in the order a b b a a b ...: neither always runs first, so
    load on this shared machine that comes and goes does not favour one of them."""
    pairs = [[a, b] if i % 2 == 0 else [b, a] for i in range(repeats)]
    return [x for pair in pairs for x in pair]


def parse_time(text: str) -> float:
    """Seconds since the epoch of a timestamp in Spark's progress reports."""
    return datetime.strptime(text.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def spark_batches(query) -> list[tuple[float, float, int, int]]:
    """(start, end, rows, batch id) of each batch with rows in a Spark query's recent progress."""
    out = []
    for progress in query.recentProgress:
        if progress["numInputRows"] == 0:  # e.g. the batch of a source's end-of-input offset
            continue
        start = parse_time(progress["timestamp"])
        end = start + progress["durationMs"]["triggerExecution"] / 1000
        out.append((start, end, progress["numInputRows"], progress["batchId"]))
    return out


def anchor_source(spark, spec, workdir: str, name: str = "readings"):
    """The same source a Sluice run reads, opened for a Spark query (fresh control files,
    the spec's admission limit); returns (streaming frame, control dir, checkpoint dir)."""
    from sluice.runtime.sources import open_stream, set_max_rows

    controls = os.path.join(workdir, "spark-sources")
    checkpoint = os.path.join(workdir, "spark-checkpoint")
    for d in (controls, checkpoint):
        shutil.rmtree(d, ignore_errors=True)
    set_max_rows(controls, name, spec.max_rows_per_batch)
    return open_stream(spark, spec, controls, name), controls, checkpoint


def retrying(run, *args, attempts: int = 3):
    """``run(*args)``, again (up to ``attempts`` times) when Spark's Python process missed its
    10 s to connect back, or a Python worker its socket to the executor: on a machine this
    loaded, a start-up failure of the environment, not a result."""
    for attempt in range(1, attempts + 1):
        try:
            return run(*args)
        except Exception as exc:  # noqa: BLE001 - only the known transient failures are retried
            transient = "failed to connect back" in str(exc) or "CANNOT_OPEN_SOCKET" in str(exc)
            if not transient or attempt == attempts:
                raise
            print(f"  (Spark's Python worker did not connect back in time; run again, attempt {attempt + 1})",
                  flush=True)


def batch_tables(directory: str) -> Iterator:
    """The Parquet output a files sink wrote under ``directory``, one Arrow table per batch
    that wrote rows (``batch=<id>`` folders), oldest batch first."""
    import pyarrow.dataset as ds

    for d in sorted(Path(directory).glob("batch=*"), key=lambda d: int(d.name.split("=")[1])):
        files = [str(f) for f in d.glob("part-*") if f.stat().st_size > 0]
        if files:
            yield ds.dataset(files, format="parquet").to_table()
