"""The job's sources: what the executor knows of each, how each is opened (by records, by
splits a Python chain reads, or by files Spark's own reader reads), and their admission
limits, set by the driver that holds the lease."""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from sluice.graph.sources import SparkSource
from sluice.graph.specs import SourceOp
from sluice.runtime import files
from sluice.runtime import sources as streams
from sluice.runtime.batch.compile import SourceInfo
from sluice.runtime.batch.executor import MICROS
from sluice.runtime.checkpoint import Checkpoint
from sluice.runtime.schemas import SOURCE_ID
from sluice.runtime.sources.admission import DEFAULT_MAX_ROWS_PER_BATCH
from sluice.runtime.sources.datasource import reads_by_splits, stream_reader, stream_schema
from sluice.runtime.sources.native_files import BatchFiles, reads_natively


def source_infos(graph, spark, checkpoint: Checkpoint) -> list[SourceInfo]:
    """What the executor must know about each source."""
    infos = []
    for i, op in enumerate(graph.sources()):
        spec = op.connector
        delay = getattr(spec, "watermark_delay", 0) or 0
        info = SourceInfo(
            op,
            i,
            getattr(spec, "event_time", None),
            int(delay * MICROS),
            idle_timeout_us=op.spec_as(SourceOp).idle_timeout_us,
            ticks=not isinstance(spec, SparkSource),
        )
        if opens_by_splits(graph, op):
            info.splits_reader = source_reader(spark, spec, op.id, checkpoint)
        elif read_natively(graph, op):
            info.splits_reader = source_reader(spark, spec, op.id, checkpoint)
            info.native_files = BatchFiles(info.splits_reader, lambda b: checkpoint.read_bytes(Checkpoint.spark_offsets(b)))
        infos.append(info)
    return infos


def opens_by_splits(graph, source) -> bool:
    """Whether a source is opened by splits, its records read by the Python chain after it
    (``sources.splits``): the job's one source, of a kind whose reader allows it, feeding
    only a Python operator. Decided once per run, from the graph alone: the plans of the run
    may change its chains, never what the stream's rows are."""
    consumers = graph.consumers(source.id)
    return len(graph.sources()) == 1 and len(consumers) == 1 and consumers[0].is_python and reads_by_splits(source.connector)


def read_natively(graph, source) -> bool:
    """Whether a source is opened by splits whose files Spark's own reader reads
    (``sources.native_files``): the job's one source, a Parquet directory, whose consumers all
    run in Spark (a Python operator first gets the records from the Python reader, which it
    would otherwise have to take back out of the JVM)."""
    consumers = graph.consumers(source.id)
    return (
        len(graph.sources()) == 1
        and bool(consumers)
        and not any(c.is_python for c in consumers)
        and reads_natively(source.connector)
    )


def source_reader(spark, spec, name: str, checkpoint: Checkpoint):
    """The stream reader of a source opened by splits."""
    return stream_reader(
        spec, name, files.normalize(checkpoint.sources), spark.sparkContext.defaultParallelism, checkpoint.location()
    )


def open_sources(spark, graph, checkpoint: Checkpoint, infos: list[SourceInfo]) -> list:
    """A streaming DataFrame per source (reads only: a standby opens them while another
    driver runs)."""
    frames = []
    for i, op in enumerate(graph.sources()):
        spec = op.connector
        frame = streams.open_stream(
            spark, spec, checkpoint.sources, op.id, dead_letters=checkpoint.location(), splits=infos[i].splits_reader is not None
        )
        if len(graph.sources()) > 1:
            frame = frame.withColumn(SOURCE_ID, F.lit(i))
        frames.append(frame)
    return frames


def known_schema(graph, infos: list[SourceInfo]):
    """The Spark schema of the job's stream before its source is opened, when it can be
    known: one source of Sluice's own (a Spark source's columns come from Spark)."""
    sources = graph.sources()
    if len(sources) != 1 or isinstance(sources[0].connector, SparkSource):
        return None
    try:
        return from_arrow_schema(stream_schema(sources[0].connector, infos[0].splits_reader is not None))
    except Exception:  # a spec that cannot say its schema: opening the source reports it
        return None


def admit(graph, checkpoint: Checkpoint, max_rows_per_batch: int | None) -> Callable[[], None] | None:
    """Set each source's admission limit in its control file (a write: only the lease's holder
    does it, a standby once it took over).

    A restart's first batch admits no more rows of a source than the last committed batch
    did: the backlog since the crash would otherwise make it a batch of the whole limit,
    run by a JVM that has not yet compiled any of the batch's code (``docs/results/startup.md``).
    Returns what sets the limits back once that batch is committed (None on a fresh start)."""
    limits = {op.id: max_rows_per_batch or getattr(op.connector, "max_rows_per_batch", None) for op in graph.sources()}
    last = last_committed_rows(checkpoint)
    first = {op_id: min(limit or DEFAULT_MAX_ROWS_PER_BATCH, last[op_id]) for op_id, limit in limits.items() if last.get(op_id)}
    for op_id, limit in limits.items():  # also clears what a run that crashed left there
        streams.set_max_rows(checkpoint.sources, op_id, first.get(op_id, limit))
    if not first:
        return None

    def restore() -> None:
        for op_id in first:  # no limit configured: back to the default
            streams.set_max_rows(checkpoint.sources, op_id, limits[op_id])

    return restore


def last_committed_rows(checkpoint: Checkpoint) -> dict[str, int]:
    """Rows per source of the last batch committed on ``checkpoint`` ({} when none, or when
    its record predates the count)."""
    done = checkpoint.done_batches()
    if not done:
        return {}
    record = checkpoint.read_json(Checkpoint.batch_record(done[-1], "done")) or {}
    return {op_id: int(n) for op_id, n in (record.get("rows_by_source") or {}).items()}
