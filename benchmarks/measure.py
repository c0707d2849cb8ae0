"""Helpers the throughput benchmarks share: how a sustained rate is measured, and how runs
of two systems are interleaved on this shared machine."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
from collections.abc import Iterator
from dataclasses import dataclass
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
        except Exception as exc:
            transient = "failed to connect back" in str(exc) or "CANNOT_OPEN_SOCKET" in str(exc)
            if not transient or attempt == attempts:
                raise
            print(f"  (Spark's Python worker did not connect back in time; run again, attempt {attempt + 1})", flush=True)


def batch_tables(directory: str) -> Iterator:
    """The Parquet output a files sink wrote under ``directory``, one Arrow table per batch
    that wrote rows (``batch=<id>`` folders), oldest batch first."""
    import pyarrow.dataset as ds

    for d in sorted(Path(directory).glob("batch=*"), key=lambda d: int(d.name.split("=")[1])):
        files = [str(f) for f in d.glob("part-*") if f.stat().st_size > 0]
        if files:
            yield ds.dataset(files, format="parquet").to_table()


# ---- the anchor rule -----------------------------------------------------------------------
# A Spark anchor is what a competent Spark engineer would run on the same machine: shuffle
# partitions matched to the cores, and for a stateful query the better of Spark's two state
# stores, both measured and reported.

STATE_STORE_PROVIDER = "spark.sql.streaming.stateStore.providerClass"
STATE_STORES: dict[str, dict[str, str | None]] = {
    # Spark's default: the HDFS-backed store (state in JVM memory, snapshots and deltas to files)
    "default": {STATE_STORE_PROVIDER: None, "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": None},
    "rocksdb": {
        STATE_STORE_PROVIDER: "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    },
}


def cores(spark=None) -> int:
    """The cores the anchor runs on: Spark's default parallelism, else the machine's."""
    if spark is not None:
        return int(spark.sparkContext.defaultParallelism)
    return os.cpu_count() or 1


def anchor_conf(store: str, n_cores: int) -> dict[str, str | None]:
    """Spark SQL settings of an anchor run on ``store`` ("default" or "rocksdb"), with
    shuffle partitions = ``n_cores`` (None: Spark's default for that setting)."""
    return {"spark.sql.shuffle.partitions": str(n_cores), **STATE_STORES[store]}


@contextlib.contextmanager
def spark_conf(spark, conf: dict[str, str | None]):
    """Set these SQL settings for the runs inside (None: unset), and restore them after. A
    streaming query reads them when it starts (and a new checkpoint keeps them)."""
    before = {k: spark.conf.get(k, None) for k in conf}
    try:
        for key, value in conf.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


@dataclass
class AnchorResult:
    """A Spark anchor measured on each state store: ``runs[store]`` is what ``run`` returned
    (a dict with ``rate_key``), ``best`` the store of the higher rate."""

    runs: dict[str, dict]
    best: str
    rate_key: str
    partitions: int

    @property
    def rate(self) -> float:
        return self.runs[self.best][self.rate_key]

    @property
    def result(self) -> dict:
        return self.runs[self.best]

    def to_json(self) -> dict:
        """The anchor's configuration and both stores' rates, for a results file."""
        return {
            "engine": "Spark Structured Streaming",
            "shuffle_partitions": self.partitions,
            "state_stores": {
                s: {
                    "conf": {k: v for k, v in STATE_STORES[s].items() if v is not None},
                    self.rate_key: round(r[self.rate_key], 1),
                }
                for s, r in self.runs.items()
            },
            "best_store": self.best,
        }


def spark_anchor(
    spark,
    run,
    *,
    rate_key: str = "throughput",
    stateful: bool = True,
    stores: tuple[str, ...] = ("default", "rocksdb"),
    n_cores: int | None = None,
) -> AnchorResult:
    """Run ``run(store)`` once per state store (only Spark's default for a stateless query),
    each with shuffle partitions = cores, and keep both results and the better one.

    ``run`` gets the store's name and returns a dict holding ``rate_key``; it must start a
    fresh checkpoint (a checkpoint keeps the store it was made with)."""
    n = n_cores or cores(spark)
    runs = {}
    for store in stores if stateful else ("default",):
        with spark_conf(spark, anchor_conf(store, n)):
            runs[store] = run(store)
    best = max(runs, key=lambda s: runs[s][rate_key])
    return AnchorResult(runs, best, rate_key, n)


def best_anchor(results: list[AnchorResult]) -> AnchorResult:
    """The best of repeated anchor measurements, store by store (best-of-N for each)."""
    runs: dict[str, dict] = {}
    for r in results:
        for store, run in r.runs.items():
            if store not in runs or run[r.rate_key] > runs[store][r.rate_key]:
                runs[store] = run
    key = results[0].rate_key
    best = max(runs, key=lambda s: runs[s][key])
    return AnchorResult(runs, best, key, results[0].partitions)


def environment(spark=None) -> dict:
    """What every results file records about where it ran: the load average (1, 5, 15
    min), the cores, and the versions of Python, PySpark, pyarrow, Java and Sluice's commit."""
    import platform
    import subprocess

    import pyarrow

    def quiet(cmd: list[str]) -> str:
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=10)
            return (out.stdout or out.stderr).strip()
        except OSError:
            return ""

    try:
        import pyspark

        spark_version = pyspark.__version__
    except ImportError:
        spark_version = None
    java = quiet(["java", "-version"]).splitlines()
    root = Path(__file__).resolve().parent.parent
    return {
        "load": [round(x, 2) for x in os.getloadavg()],
        "cores": os.cpu_count(),
        "spark_cores": cores(spark) if spark is not None else None,
        "versions": {
            "python": platform.python_version(),
            "pyspark": spark_version,
            "pyarrow": pyarrow.__version__,
            "java": java[0] if java else None,
            "sluice_commit": quiet(["git", "-C", str(root), "rev-parse", "--short", "HEAD"]) or None,
        },
        "machine": platform.machine(),
        "time": datetime.now().astimezone().isoformat(timespec="seconds"),
    }


def tables_equal(a, b, *, sort_by: list[str] | None = None, rel_tol: float = 1e-9) -> bool:
    """Whether two Arrow tables hold the same rows, as multisets: both sorted by ``sort_by``
    (default: every column, exact ones first), exact columns compared for equality and
    floating-point ones (and decimals with a fraction) within ``rel_tol`` (two engines sum
    doubles in different orders). Integers, decimals without a fraction and timestamps of
    any unit or zone compare by value."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if a.num_rows != b.num_rows or sorted(a.column_names) != sorted(b.column_names):
        return False
    names = sorted(a.column_names)

    def normal(t):
        cols = {}
        for n in names:
            col = t.column(n)
            if pa.types.is_decimal(col.type) and col.type.scale == 0:  # e.g. DuckDB's sum of integers
                col = col.cast(pa.int64())
            elif pa.types.is_decimal(col.type):
                col = col.cast(pa.float64())
            elif pa.types.is_timestamp(col.type):
                col = col.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
            elif pa.types.is_integer(col.type):
                col = col.cast(pa.int64())
            elif pa.types.is_large_string(col.type):
                col = col.cast(pa.string())
            cols[n] = col
        return pa.table(cols)

    left, right = normal(a), normal(b)
    floating = [n for n in names if pa.types.is_floating(left.column(n).type) or pa.types.is_floating(right.column(n).type)]
    order = sort_by or [n for n in names if n not in floating] + floating
    left = left.sort_by([(n, "ascending") for n in order])
    right = right.sort_by([(n, "ascending") for n in order])
    for n in names:
        x, y = left.column(n), right.column(n)
        if not x.is_null().equals(y.is_null()):
            return False
        if x.null_count == len(x):  # all null (of any type)
            continue
        if n in floating:
            xs = x.cast(pa.float64()).to_numpy(zero_copy_only=False)
            ys = y.cast(pa.float64()).to_numpy(zero_copy_only=False)
            if not np.allclose(xs, ys, rtol=rel_tol, atol=0.0, equal_nan=True):
                return False
        elif x.type != y.type or pc.any(pc.not_equal(x, y)).as_py():
            return False
    return True


# ---- what every results file records ------------------------------------------------------


@dataclass(frozen=True)
class Anchor:
    """What a benchmark's ratio is measured against, as its results file records it.

    ``ran``: what ran as the anchor (an engine, a configuration of Sluice, a policy in the
    simulator); ``formulation``: how it was written or configured; ``state_store``: Spark's
    state store(s) it ran on (None where no Spark state is involved); ``shuffle_partitions``:
    Spark's shuffle partitions (None where Spark does not run the anchor); ``details``:
    anything more (e.g. ``AnchorResult.to_json()``, both stores' rates)."""

    ran: str
    formulation: str
    state_store: str | None = None
    shuffle_partitions: int | None = None
    details: dict | None = None

    def to_json(self) -> dict:
        out = {
            "ran": self.ran,
            "formulation": self.formulation,
            "state_store": self.state_store,
            "shuffle_partitions": self.shuffle_partitions,
        }
        return out | ({"details": self.details} if self.details else {})


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


class Record:
    """The fields every benchmark's results file and JSON line carry besides its figures:
    the benchmark's name, quick or full, its anchor, whether the outputs compared equal (and
    what was compared, or why nothing could be), the load average when it started and when it
    ended, the cores and the versions. Make one when the benchmark starts (it reads the load
    then), and write the results through ``publish``."""

    def __init__(self, benchmark: str, quick: bool):
        self.benchmark = benchmark
        self.mode = "quick" if quick else "full"
        self.load_before = _load()

    def fields(self, anchor: Anchor, outputs_equal: bool | None, outputs_compared: str, spark=None) -> dict:
        """The common fields, the load "after" read now. ``outputs_compared`` says what was
        compared (``outputs_equal`` True/False), or why there is nothing to compare (None)."""
        if outputs_equal is not None and not isinstance(outputs_equal, bool):
            raise TypeError(f"{self.benchmark}: outputs_equal must be True, False or None, not {outputs_equal!r}")
        if not outputs_compared:
            raise ValueError(f"{self.benchmark}: say what outputs were compared, or why none were")
        try:
            env = environment(spark)
        except Exception:  # a stopped session: its cores are no longer known
            env = environment()
        env.pop("load")
        if env["spark_cores"] is None:  # not known here: the results may say it
            env.pop("spark_cores")
        return {
            "benchmark": self.benchmark,
            "mode": self.mode,
            "anchor": anchor.to_json(),
            "outputs_equal": outputs_equal,
            "outputs_compared": outputs_compared,
            "load": {"before": self.load_before, "after": _load()},
            **env,
        }

    def publish(
        self,
        path: Path | None,
        results: dict,
        line: dict,
        *,
        anchor: Anchor,
        outputs_equal: bool | None,
        outputs_compared: str,
        spark=None,
        indent: int = 2,
    ) -> dict:
        """Write ``results`` with the common fields to ``path`` (None: write nothing) and print
        ``line`` with them as the last line, one JSON object; returns what was written."""
        common = self.fields(anchor, outputs_equal, outputs_compared, spark)
        full = {**results, **common}
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(full, indent=indent, default=float) + "\n")
        print(json.dumps({**line, **common}, default=float), flush=True)
        return full


def no_outputs(why: str) -> dict:
    """``outputs_equal`` and ``outputs_compared`` of a benchmark with no second output."""
    return {"outputs_equal": None, "outputs_compared": f"nothing to compare: {why}"}
