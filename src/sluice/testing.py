"""Test a pipeline on batches you give it, in-process, on one shared local Spark session.

    from sluice import testing

    source = testing.Source([[{"user": "a", "amount": 3}], [{"user": "a", "amount": 4}]])
    out = testing.Sink()
    p = sluice.Pipeline("spend")
    p.source(source.spec).key_by("user").aggregate(total=agg.sum("amount")).sink(out.spec)
    testing.run(p, source, checkpoint, on_batch=lambda i, out_batch: ...)   # batches one by one
    assert out.latest(keys="user") == [{"user": "a", "total": 7}]

Each given batch is exactly one micro-batch: the source offers the next batch only once the
previous one has committed, so what a batch outputs can be checked batch by batch
(``on_batch``), and at the end (``Sink.rows``, ``Sink.latest``). A restart is a second
:func:`run` on the same checkpoint: the query stops after ``batches`` batches, the next
run resumes from the checkpoint's committed state and offsets, as after a crash between
batches. :func:`spark` is the one local session every test shares (Spark starts once).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.parquet as pq

from sluice.errors import ConfigError
from sluice.graph.schemas import as_schema


def spark(master: str = "local[2]"):
    """The local SparkSession shared by every test of this process (started on first use;
    a session already running in the process, such as a test suite's, is the one used)."""
    from sluice.runtime.session import spark_session

    return spark_session(master=master, app_name="sluice-testing", ui=False)


Batch: TypeAlias = pa.Table | pa.RecordBatch | Sequence[dict]


class Source:
    """An in-process source of given batches: ``spec`` goes to ``Pipeline.source``.

    ``batches``: each a list of dicts (one per record), a ``pyarrow.Table`` or a
    ``RecordBatch``; ``schema``: a dict of column to type name or a ``pyarrow.Schema``
    (default: the first batch's); ``event_time``/``watermark_delay``: as for any source.
    More batches can be added with :meth:`add` before or between runs.
    """

    def __init__(
        self, batches: Iterable[Batch] = (), schema=None, *, event_time: str | None = None, watermark_delay: float = 0.0
    ):
        from sluice import sources

        self.batches: list[pa.Table] = []
        self.schema: pa.Schema | None = as_schema(schema, "testing.Source: ")
        for batch in batches:
            self.add(batch)
        if self.schema is None:
            raise ConfigError("testing.Source needs a schema= or at least one batch to take it from")
        self.inbox = tempfile.mkdtemp(prefix="sluice-testing-")
        self.offered = 0  # batches put in the inbox so far (they survive a restart, as a broker's would)
        self.spec = sources.directory(
            self.inbox, format="parquet", schema=self.schema, event_time=event_time, watermark_delay=watermark_delay
        )

    def add(self, batch: Batch) -> None:
        if isinstance(batch, pa.RecordBatch):
            table = pa.Table.from_batches([batch])
        elif isinstance(batch, pa.Table):
            table = batch
        else:
            table = pa.Table.from_pylist(list(batch), schema=self.schema)
        if self.schema is None:
            self.schema = table.schema
        self.batches.append(table.select(self.schema.names).cast(self.schema))

    def offer_next(self) -> bool:
        """Put the next batch where the pipeline reads it (atomically); False when none is left."""
        if self.offered >= len(self.batches):
            return False
        hidden = os.path.join(self.inbox, f".batch-{self.offered:06d}.parquet")
        pq.write_table(self.batches[self.offered], hidden)
        os.replace(hidden, os.path.join(self.inbox, f"batch-{self.offered:06d}.parquet"))
        self.offered += 1
        return True


class Sink:
    """A sink that collects what each batch wrote: ``spec`` goes to ``Stream.sink``.

    A batch replayed after a restart replaces what it wrote before (as an idempotent sink
    does), so the collected output is what an exactly-once sink would hold.
    """

    def __init__(self) -> None:
        from sluice import sinks

        self.by_batch: dict[int, pa.Table] = {}
        self.spec = sinks.callback(self._collect)

    def _collect(self, batch_id: int, table: pa.Table) -> None:
        self.by_batch[batch_id] = table

    def table(self) -> pa.Table | None:
        """Every row written, in batch order (None when nothing was)."""
        tables = [self.by_batch[b] for b in sorted(self.by_batch) if self.by_batch[b].num_rows]
        return pa.concat_tables(tables, promote_options="default") if tables else None

    def rows(self) -> list[dict]:
        table = self.table()
        return [] if table is None else table.to_pylist()

    def latest(self, keys: str | Sequence[str]) -> list[dict]:
        """The last row written per key (a keyed aggregate's current value), sorted by key."""
        keys = [keys] if isinstance(keys, str) else list(keys)
        current: dict[tuple, dict] = {}
        for row in self.rows():
            current[tuple(row[k] for k in keys)] = row
        return [current[k] for k in sorted(current, key=lambda k: tuple((v is None, v) for v in k))]


def run(
    pipeline,
    source: Source,
    checkpoint: str,
    *,
    batches: int | None = None,
    on_batch: Callable[[int, dict[str, Any]], None] | None = None,
    sinks: dict[str, Sink] | None = None,
    timeout_s: float = 300.0,
    **options,
) -> int:
    """Run ``pipeline`` on the shared session over the next ``batches`` of ``source`` (default:
    all it has left), one micro-batch each, then any batch without input that is due within 2 s
    (windows the last batch's watermark closed), and stop; returns how many given batches ran.

    ``on_batch(index, outputs)``: after each batch commits, with the index of the source's
    batch and ``outputs``, each of ``sinks`` (name -> Sink) by name with the rows that batch
    wrote (a ``pyarrow.Table``, or None when it wrote none). Run again on the same
    checkpoint to continue after a restart. Other options go to ``Pipeline.run``.
    """
    from sluice.runtime.checkpoint import Checkpoint

    left = len(source.batches) - source.offered
    wanted = left if batches is None else min(batches, left)
    if wanted <= 0:
        return 0
    done = Checkpoint(checkpoint).done_batches()
    first_batch = done[-1] + 1 if done else 0
    ran: list[int] = []
    errors: list[BaseException] = []

    def after(metrics) -> None:
        if getattr(metrics, "skipped", False):
            return
        index = source.offered - 1
        if ran and ran[-1] == index:  # a batch without input (the watermark moved), not a given batch
            return
        ran.append(index)
        if on_batch is not None:
            outputs = {name: sink.by_batch.get(metrics.batch_id) for name, sink in (sinks or {}).items()}
            try:
                on_batch(index, outputs)
            except BaseException as exc:  # raised again once the query has stopped
                errors.append(exc)
        if len(ran) < wanted and not errors:
            source.offer_next()

    source.offer_next()
    import time

    deadline = time.time() + timeout_s
    pipeline.run(
        checkpoint,
        spark=spark(),
        on_batch=after,
        stop_when=lambda executor: (
            (len(ran) >= wanted and not executor.batch_due_without_input(within_s=2.0)) or bool(errors) or time.time() > deadline
        ),
        **options,
    )
    if errors:
        raise errors[0]
    if len(ran) < wanted:
        raise TimeoutError(f"testing.run: {len(ran)} of {wanted} batches ran in {timeout_s} s (from batch {first_batch})")
    return len(ran)
