"""Stateless Python operators as Arrow kernels, and the fused chain that runs several of them
in one pass over a partition (task chaining: one JVM/Python round trip for the whole chain).

Each kernel maps a RecordBatch of user columns to a RecordBatch of user columns. A record
whose operator raises is handed to the dead-letter writer with the error and the pipeline
goes on. The fast path never loops over records in Python for ``map_batches``; when a batch
function raises, the batch is bisected to find the bad records, so one bad record costs
log(n) extra calls, not n.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sluice.core.columns import INGEST
from sluice.graph.operators import Operator
from sluice.graph.specs import FilterFnOp, FlatMapOp, MapBatchesOp, MapOp
from sluice.runtime.reporting import reporting_to
from sluice.runtime.side_outputs import SideOutputWriter


@dataclass
class KernelContext:
    dead: SideOutputWriter
    metrics: Any  # TaskMetrics (duck-typed so kernels test without Spark)


def _conform(data, schema: pa.Schema) -> pa.RecordBatch:
    """A user's return value (RecordBatch, Table, pandas DataFrame, list of dicts) as a
    RecordBatch of exactly ``schema``; raises when it does not fit."""
    if isinstance(data, pa.RecordBatch):
        table = pa.Table.from_batches([data])
    elif isinstance(data, pa.Table):
        table = data
    elif isinstance(data, list):
        return pa.RecordBatch.from_pylist(data, schema=schema)
    elif hasattr(data, "to_dict") and hasattr(data, "columns"):  # pandas
        table = pa.Table.from_pandas(data, preserve_index=False)
    else:
        raise TypeError(f"expected a pyarrow RecordBatch/Table, pandas DataFrame or list of dicts, got {type(data).__name__}")
    missing = [n for n in schema.names if n not in table.column_names]
    if missing:
        raise ValueError(f"output lacks column(s) {missing}; expected {schema.names}")
    return _to_batch(table.select(schema.names).cast(schema), schema)


def _to_batch(table: pa.Table, schema: pa.Schema) -> pa.RecordBatch:
    table = table.combine_chunks()
    batches = table.to_batches()
    return batches[0] if batches else pa.RecordBatch.from_pylist([], schema=schema)


class Kernel:
    """One stateless operator over batches of user columns (hidden columns stay outside)."""

    def __init__(self, op: Operator, in_schema: pa.Schema, out_schema: pa.Schema):
        self.op, self.in_schema, self.out_schema = op, in_schema, out_schema

    def apply(self, batch: pa.RecordBatch, ingest: pa.Array, ctx: KernelContext) -> tuple[pa.RecordBatch, pa.Array]:
        """Returns the output batch and the ingest time of each output record."""
        raise NotImplementedError


class MapBatchesKernel(Kernel):
    def _call(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        spec = self.op.spec_as(MapBatchesOp)
        if spec.format == "pandas":
            return _conform(spec.fn(batch.to_pandas()), self.out_schema)
        return _conform(spec.fn(batch), self.out_schema)

    def _call_threaded(self, batch: pa.RecordBatch, pool: ThreadPoolExecutor | None) -> list[pa.RecordBatch]:
        if pool is None or batch.num_rows < 2:
            return [self._call(batch)]
        n = self.op.threads
        step = -(-batch.num_rows // n)
        parts = [batch.slice(i, step) for i in range(0, batch.num_rows, step)]
        return list(pool.map(self._call, parts))

    def apply(self, batch, ingest, ctx):
        pool = ThreadPoolExecutor(self.op.threads) if self.op.threads > 1 else None
        try:
            outs = self._call_threaded(batch, pool)
            out = _concat(outs, self.out_schema)
            if out.num_rows == batch.num_rows:
                return out, ingest
            return out, _repeat_min(ingest, out.num_rows)
        except Exception:
            good: list[pa.RecordBatch] = []
            good_ingest: list[pa.Array] = []
            self._bisect(batch, ingest, ctx, good, good_ingest)
            out = _concat(good, self.out_schema)
            return out, pa.concat_arrays(good_ingest) if good_ingest else pa.array([], ingest.type)
        finally:
            if pool:
                pool.shutdown()

    def _bisect(self, batch, ingest, ctx, good, good_ingest) -> None:
        try:
            out = self._call(batch)
        except Exception as exc:
            if batch.num_rows == 1:
                ctx.dead.dead(self.op.name, batch.to_pylist()[0], exc, self.op.location)
                return
            half = batch.num_rows // 2
            self._bisect(batch.slice(0, half), ingest.slice(0, half), ctx, good, good_ingest)
            self._bisect(batch.slice(half), ingest.slice(half), ctx, good, good_ingest)
            return
        good.append(out)
        good_ingest.append(ingest if out.num_rows == batch.num_rows else _repeat_min(ingest, out.num_rows))


class RecordKernel(Kernel):
    """map, flat_map and Python filter: a function per record (for convenience, not speed).

    A map's or flat_map's record must hold every field of its schema (declared, or the
    input's): a field left out would silently become NULL, so the input record goes to dead
    letters instead, naming the missing fields. An explicit ``None`` is a NULL on purpose."""

    def __init__(self, op: Operator, in_schema: pa.Schema, out_schema: pa.Schema):
        super().__init__(op, in_schema, out_schema)
        self.fields = frozenset(out_schema.names)

    def _check(self, out) -> dict:
        if not isinstance(out, dict):
            must = "map must return a dict" if isinstance(self.op.spec, MapOp) else "flat_map must yield dicts"
            raise TypeError(f"{must}, got {type(out).__name__}")
        if not self.fields <= out.keys():
            missing = [n for n in self.out_schema.names if n not in out]
            raise ValueError(f"{self.op.kind} output lacks declared field(s) {missing} (return None for a NULL)")
        return out

    def _one(self, record: dict):
        spec = self.op.spec
        if isinstance(spec, MapOp):
            return [self._check(spec.fn(record))]
        if isinstance(spec, FlatMapOp):
            return [self._check(out) for out in spec.fn(record) or ()]
        return [record] if self.op.spec_as(FilterFnOp).fn(record) else []

    def apply(self, batch, ingest, ctx):
        records = batch.to_pylist()
        if self.op.threads > 1:
            with ThreadPoolExecutor(self.op.threads) as pool:
                results = list(pool.map(self._safe, records))
        else:
            results = [self._safe(r) for r in records]
        rows: list[dict] = []
        takes: list[int] = []
        for i, (record, result) in enumerate(zip(records, results)):
            if isinstance(result, BaseException):
                ctx.dead.dead(self.op.name, record, result, self.op.location)
                continue
            rows.extend(result)
            takes.extend([i] * len(result))
        try:
            out = pa.RecordBatch.from_pylist(rows, schema=self.out_schema)
        except Exception:
            keep_rows, keep_takes = [], []
            for row, i in zip(rows, takes):
                try:
                    pa.RecordBatch.from_pylist([row], schema=self.out_schema)
                except Exception as exc:
                    ctx.dead.dead(self.op.name, records[i], f"output {row!r} does not fit schema: {exc}", self.op.location)
                    continue
                keep_rows.append(row)
                keep_takes.append(i)
            rows, takes = keep_rows, keep_takes
            out = pa.RecordBatch.from_pylist(rows, schema=self.out_schema)
        return out, ingest.take(pa.array(takes, pa.int64()))

    def _safe(self, record: dict):
        try:
            return self._one(record)
        except Exception as exc:
            return exc


def _concat(batches: list[pa.RecordBatch], schema: pa.Schema) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    return _to_batch(pa.Table.from_batches(batches, schema=schema), schema)


def _repeat_min(ingest: pa.Array, n: int) -> pa.Array:
    """When a batch function changes the number of rows, each output record is charged the
    ingest time of the oldest input record (a conservative latency)."""
    oldest = pc.min(ingest)
    return pa.array([oldest.as_py()] * n, ingest.type) if n else pa.array([], ingest.type)


def run_chain(kernels: list[Kernel], batches: Iterator[pa.RecordBatch], ctx: KernelContext) -> Iterator[pa.RecordBatch]:
    """Run a fused chain over a partition's batches; hidden ingest time rides alongside."""
    for batch in batches:
        if batch.num_rows == 0:
            continue
        ingest = batch.column(INGEST)
        data = _drop(batch, INGEST)
        for kernel in kernels:
            start = time.perf_counter()
            rows_in = data.num_rows
            data = data.select(kernel.in_schema.names) if data.schema.names != kernel.in_schema.names else data
            with reporting_to(ctx.metrics, kernel.op.id):  # sluice.report inside the user's function
                data, ingest = kernel.apply(data, ingest, ctx)
            ctx.metrics.op_timing(kernel.op.id, rows_in, data.num_rows, time.perf_counter() - start)
            if data.num_rows == 0:
                break
        if data.num_rows:
            schema = data.schema.append(pa.field(INGEST, ingest.type))
            yield pa.RecordBatch.from_arrays([*data.columns, ingest], schema=schema)


def _drop(batch: pa.RecordBatch, name: str) -> pa.RecordBatch:
    idx = batch.schema.get_field_index(name)
    return pa.RecordBatch.from_arrays(
        [c for i, c in enumerate(batch.columns) if i != idx],
        schema=pa.schema([f for i, f in enumerate(batch.schema) if i != idx]),
    )


Fn = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]
