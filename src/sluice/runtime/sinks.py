"""Sink writers. Each writes one micro-batch idempotently: a replayed batch id replaces what
that batch wrote before, so sinks plus the offset log give exactly-once output."""

from __future__ import annotations

import threading

import pyarrow as pa

from sluice.errors import SinkError
from sluice.graph.sinks import CallbackSink, ConsoleSink, FileSink, MemorySink, SinkSpec
from sluice.runtime import connectors, files

_MEMORY: dict[str, dict[int, pa.Table]] = {}
_MEMORY_LOCK = threading.Lock()


def batch_dir(path: str, batch_id: int) -> str:
    return files.join(files.normalize(path), f"batch={batch_id:09d}")


def collects_to_driver(spec: SinkSpec) -> bool:
    """True for sinks that take the batch's rows to the driver as one Arrow table (connector
    sinks write a batch in one transaction, from the driver)."""
    return isinstance(spec, (MemorySink, CallbackSink)) or connectors.is_connector_sink(spec)


def write(spec: SinkSpec, df, batch_id: int, checkpoint=None) -> pa.Table | None:
    """Write the user columns of ``df`` (hidden ``__`` columns dropped) for ``batch_id``.

    Sinks that take the rows to the driver drop the hidden columns there (a Spark select
    would cost one more plan analysis every batch) and return them, so the driver measures
    the batch from them; sinks that write in Spark return None."""
    if collects_to_driver(spec):
        table = df.toArrow()
        hidden = table.select([c for c in table.column_names if c.startswith("__")])
        table = table.drop_columns(hidden.column_names)
        write_table(spec, table, batch_id, checkpoint=checkpoint)
        return hidden
    df = df.select([c for c in df.columns if not c.startswith("__")])
    if isinstance(spec, FileSink):
        # Spark's file commit protocol: the directory appears complete (with _SUCCESS) or is
        # replaced wholesale by the replay
        writer = df.write.mode("overwrite")
        target = batch_dir(spec.path, batch_id)
        writer.parquet(target) if spec.format == "parquet" else writer.json(target)
    elif isinstance(spec, ConsoleSink):
        print(f"-------- batch {batch_id} --------")
        df.show(spec.rows, truncate=False)
    else:
        raise SinkError(f"no writer for sink {spec!r}")
    return None


def write_table(spec: SinkSpec, table: pa.Table, batch_id: int, spark=None, checkpoint=None) -> None:
    """Write a driver-side table (e.g. dead letters) through the same sinks. ``checkpoint``
    (the job's Checkpoint or location) identifies the job to connector sinks."""
    if connectors.is_connector_sink(spec):
        connectors.write(spec, table, batch_id, checkpoint)
    elif isinstance(spec, MemorySink):
        with _MEMORY_LOCK:
            _MEMORY.setdefault(spec.name, {})[batch_id] = table
    elif isinstance(spec, CallbackSink):
        assert spec.fn is not None  # callback() requires one
        spec.fn(batch_id, table.to_pandas() if spec.format == "pandas" else table)
    elif spark is not None:
        frame = spark.createDataFrame(table.to_pandas()) if table.num_rows else spark.createDataFrame([], "record string")
        write(spec, frame, batch_id)
    else:
        raise SinkError(f"cannot write a driver-side table to {spec!r}")


def memory_batches(name: str) -> dict[int, pa.Table]:
    """What a memory sink holds: batch id -> rows."""
    with _MEMORY_LOCK:
        return dict(_MEMORY.get(name, {}))


def memory_table(name: str) -> pa.Table | None:
    """All rows a memory sink holds, in batch order (None if it holds nothing).

    >>> from sluice import sinks
    >>> sinks.memory_table("a memory sink no job wrote to") is None
    True
    """
    batches = memory_batches(name)
    tables = [batches[b] for b in sorted(batches) if batches[b].num_rows]
    if not tables:
        return None
    return pa.concat_tables(tables, promote_options="default")


def clear_memory(name: str | None = None) -> None:
    with _MEMORY_LOCK:
        if name is None:
            _MEMORY.clear()
        else:
            _MEMORY.pop(name, None)


def read_files(path: str, format: str = "parquet") -> pa.Table | None:
    """All complete batches a file sink wrote (directories with Spark's _SUCCESS marker), from
    a local path or any ``pyarrow.fs`` URI (None if it wrote nothing).

    >>> from sluice import sinks
    >>> sinks.read_files("/tmp/no-such-sluice-output") is None
    True
    """
    import pyarrow.dataset as ds

    from sluice.runtime.file_rolling import output_dirs

    fs, base = files.filesystem(path)
    tables = []
    for directory in output_dirs(fs, base):  # batch order; rolled directories in place of theirs
        if directory.parts:
            tables.append(
                ds.dataset(list(directory.parts), format="parquet" if format == "parquet" else "json", filesystem=fs).to_table()
            )
    if not tables:
        return None
    return pa.concat_tables(tables, promote_options="permissive")
