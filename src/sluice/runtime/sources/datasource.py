"""``open_stream``: a source spec becomes a Spark streaming DataFrame.

Sluice's own sources (generator, directory, replay) are one PySpark Python data source,
format ``"sluice"``, whose options carry the pickled spec; ``SluiceDataSource.streamReader``
picks the reader for the spec's kind. A SparkSource is the user's own DataFrame.
"""

from __future__ import annotations

import base64
import sys

import pyarrow as pa
from pyspark import cloudpickle
from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from sluice.errors import EnvironmentProblem, SourceError
from sluice.graph.sources import (
    INGEST_TS,
    TIMESTAMP,
    DirectorySource,
    GeneratorSource,
    ReplaySource,
    SourceSpec,
    SparkSource,
)
from sluice.runtime import files
from sluice.runtime.sources.control import check_source_name
from sluice.runtime.sources.directory import DirectoryStreamReader
from sluice.runtime.sources.generator import GeneratorStreamReader
from sluice.runtime.sources.replay import ReplayStreamReader
from sluice.runtime.sources.splits import SPLIT_SCHEMA, SplitStreamReader, reads_anywhere
from sluice.runtime.sources.ticks import TickingReader

FORMAT = "sluice"

READERS = {
    GeneratorSource: GeneratorStreamReader,
    DirectorySource: DirectoryStreamReader,
    ReplaySource: ReplayStreamReader,
}


def reader_type(spec: SourceSpec) -> type | None:
    """The stream reader of a spec: a built-in one, or a connector's (brokers, databases)."""
    from sluice.runtime import connectors

    return READERS.get(type(spec)) or connectors.reader_type(spec)


def encode_spec(spec: SourceSpec) -> str:
    return base64.b64encode(cloudpickle.dumps(spec)).decode("ascii")


def decode_spec(text: str) -> SourceSpec:
    return cloudpickle.loads(base64.b64decode(text.encode("ascii")))


def stream_schema(spec: SourceSpec, splits: bool = False) -> pa.Schema:
    """The columns of the opened stream: the user's, then the hidden INGEST_TS; or, opened
    by ``splits``, the one column of its splits (``sources.splits``)."""
    return SPLIT_SCHEMA if splits else spec.schema().append(pa.field(INGEST_TS, TIMESTAMP))


def stream_reader(
    spec: SourceSpec, name: str, control_dir: str, parallelism: int, dead_letters: str | None = None
) -> DataSourceStreamReader:
    """The stream reader of ``spec``, as Spark gets it for the source named ``name``."""
    reader_class = reader_type(spec)
    if reader_class is None:
        raise TypeError(f"no stream reader for source spec {type(spec).__name__}")
    reader = reader_class(spec, name, control_dir, from_arrow_schema(stream_schema(spec)), parallelism)
    reader.dead_letters = dead_letters
    return reader


def reads_by_splits(spec: SourceSpec) -> bool:
    """Whether the source can be opened by splits, its records read by the chain after it
    (``sources.splits``)."""
    return reads_anywhere(reader_type(spec))  # a Spark source has no reader of Sluice's


class SluiceDataSource(DataSource):
    """Options: ``spec`` (encoded), ``name``, ``control_dir``, ``parallelism``,
    ``dead_letters`` (the checkpoint whose ``dead_letter/`` gets records a source cannot read),
    ``splits`` ("1": the source's rows are its splits, read later by ``sources.splits``)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def _spec(self) -> SourceSpec:
        return decode_spec(self.options["spec"])

    def _by_splits(self) -> bool:
        return self.options.get("splits") == "1"

    def schema(self) -> StructType:
        return from_arrow_schema(stream_schema(self._spec(), self._by_splits()))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        reader = stream_reader(
            self._spec(),
            self.options["name"],
            self.options["control_dir"],
            int(self.options.get("parallelism", "2")),
            self.options.get("dead_letters") or None,
        )
        # ticks: batches without new input when the executor asks for one (``sources.ticks``)
        return TickingReader(
            SplitStreamReader(reader) if self._by_splits() else reader, self.options["control_dir"], self.options["name"]
        )


def open_stream(spark, spec: SourceSpec, control_dir: str, name: str, dead_letters: str | None = None, splits: bool = False):
    """A streaming DataFrame of ``spec``'s rows: its columns plus hidden ``__ingest_ts``
    (``splits``: of its splits, whose records the chain after it reads, ``sources.splits``).

    ``name`` identifies the source in its control files (``control_dir/<name>.*.json``: the
    admission limit, the backlog, a directory source's file log) and in Spark's progress
    offsets. Keep ``control_dir`` with the checkpoint so a restart finds it again.
    ``dead_letters``: the checkpoint (location) whose ``dead_letter/`` receives the records a
    directory source cannot read; without it such a record stops the query (SourceError).
    """
    check_source_name(name)
    if isinstance(spec, SparkSource):
        return _open_spark_source(spark, spec, name)
    if reader_type(spec) is None:
        raise SourceError(f"source {name!r}: cannot open a {type(spec).__name__}")
    control_dir = files.normalize(control_dir)  # the Python workers may run elsewhere
    spark.dataSource.register(SluiceDataSource)
    reader = (
        spark.readStream.format(FORMAT)
        .option("spec", encode_spec(spec))
        .option("name", name)
        .option("control_dir", control_dir)
        .option("parallelism", str(spark.sparkContext.defaultParallelism))
        .option("dead_letters", dead_letters or "")
        .option("splits", "1" if splits else "0")
    )
    try:
        return reader.load()  # the first Python worker Spark starts for the job imports Sluice
    except Exception as e:
        if "No module named 'sluice'" in str(e):
            raise EnvironmentProblem(
                f"source {name!r}: Spark's Python workers cannot import sluice: they run "
                f"{spark.sparkContext.pythonExec!r}, not this interpreter ({sys.executable}). Create the "
                f"session with PYSPARK_PYTHON={sys.executable} (or spark.pyspark.python), or let Sluice "
                f"create it (run without spark=)"
            ) from e
        raise


def _open_spark_source(spark, spec: SparkSource, name: str):
    from pyspark.sql import functions as F

    try:
        df = spec.factory(spark)
    except Exception as e:
        raise SourceError(f"source {name!r}: the SparkSource factory failed: {e}") from e
    if not getattr(df, "isStreaming", False):
        raise SourceError(
            f"source {name!r}: the SparkSource factory must return a streaming DataFrame "
            f"(spark.readStream...), got {type(df).__name__}"
            + ("" if not hasattr(df, "isStreaming") else " that is not streaming")
        )
    if INGEST_TS not in df.columns:
        # Spark's own sources carry no arrival time: the batch's start is the best we know.
        df = df.withColumn(INGEST_TS, F.current_timestamp())
    return df
