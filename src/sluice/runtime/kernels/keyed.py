"""The contract between a keyed stage of the runtime and a stateful keyed operator.

A keyed stage runs once per (micro-batch, partition). The runtime gives the kernel the rows
of the key groups that partition owns (as one Arrow table with the hidden ``__kg`` column),
the committed state of those key groups, and the batch's context; the kernel returns what it
emits downstream and what changed in its state. The runtime owns loading and committing
state (the key-group store), so a kernel is a pure function of (rows, state, context) and
can be tested without Spark.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from sluice.core.columns import KEY_GROUP
from sluice.errors import PipelineError
from sluice.runtime.kernels.stateless import INGEST


@dataclass(frozen=True)
class BatchContext:
    """What a kernel may know about the batch it processes."""

    batch_id: int
    partition: int
    # event-time watermark in microseconds since the epoch valid for this batch (None: no
    # event time); computed by the driver from earlier batches, so a replay sees the same one
    watermark: int | None = None
    # processing time of the batch in microseconds since the epoch, fixed per batch id
    processing_time: int = 0


@dataclass(frozen=True)
class DeadRecord:
    """An input record a user function raised on: it goes to the dead-letter sink, and the
    key's state stays as the kernel's docstring says (never half-applied)."""

    record: dict  # the input record, without hidden columns
    error: BaseException | str
    key: tuple  # the record's key values


@dataclass
class KeyedResult:
    """What a kernel returns for one partition of one batch."""

    output: pa.Table  # rows emitted downstream, in the kernel's output_schema()
    upserts: pa.Table  # new state rows of changed keys: state_schema() plus __kg
    deletes: pa.Table | None = None  # keys whose state is removed: key columns plus __kg
    # side outputs by name (e.g. "late" records of a window operator), each a table
    side_outputs: dict[str, pa.Table] = field(default_factory=dict)
    # counts the kernel reports for the batch (added to the operator's metrics)
    metrics: dict[str, int] = field(default_factory=dict)
    # figures the kernel reports whose tasks' values combine by maximum, not by sum
    peaks: dict[str, int] = field(default_factory=dict)
    # optional, when the kernel numbered the keys anyway: (key id of each output row, key id
    # of each input row) in one numbering; the runtime then finds the input rows of each
    # output row's key without matching the key columns again
    key_ids: tuple[np.ndarray, np.ndarray] | None = None
    # input records a user function (``process``, ``reduce``, a UDAF) raised on
    dead_letters: list[DeadRecord] = field(default_factory=list)


class KeyedKernel(ABC):
    """A stateful keyed operator, vectorized over Arrow tables."""

    #: True when the kernel must see the state of key groups that received no rows in a
    #: batch (e.g. windows that fire when the watermark passes their end).
    wants_timers: bool = False

    def __init__(self, key_columns: list[str]):
        self.key_columns = list(key_columns)

    @abstractmethod
    def state_schema(self, input_schema: pa.Schema) -> pa.Schema:
        """Schema of one state row: the key columns first, then the operator's state."""

    @abstractmethod
    def output_schema(self, input_schema: pa.Schema) -> pa.Schema:
        """Schema of the rows the kernel emits."""

    def input_columns(self, input_schema: pa.Schema) -> list[str]:
        """The columns of ``input_schema`` the kernel reads (the key columns among them):
        the runtime drops the others before the exchange. Default: all of them."""
        return list(input_schema.names)

    @abstractmethod
    def process(self, rows: pa.Table, state: pa.Table, ctx: BatchContext) -> KeyedResult:
        """Apply one batch's rows (possibly none) to the committed state of their key groups.

        ``rows`` has the input columns plus ``__kg``; ``state`` has ``state_schema()`` plus
        ``__kg`` and holds the latest committed state of the key groups involved (it is
        empty for new keys). Must be deterministic: a replayed batch must give the same
        result.
        """


class TakesCombinedRows:
    """A keyed kernel's part that lets ``process`` take rows combined before the exchange
    as well as records. Combined rows do not carry the records' types, so the kernel keeps
    the records' schema (:meth:`bind_records`) and answers every schema question from it
    (:meth:`record_schema`). ``combined_marker``: a column only combined rows have."""

    combined_marker: str = ""
    input_schema: pa.Schema | None = None  # the records', once bound

    def bind_records(self, input_schema: pa.Schema) -> None:
        hidden = (KEY_GROUP, INGEST)
        self.input_schema = pa.schema([f for f in input_schema if f.name not in hidden])

    def record_schema(self, schema: pa.Schema) -> pa.Schema:
        """The records' schema, also when ``schema`` is that of combined rows."""
        if self.combined_marker not in schema.names:
            return schema
        if self.input_schema is None:
            raise PipelineError(f"{type(self).__name__}: combined rows need the records' schema (bind first)")
        return self.input_schema


class CombiningKernel(TakesCombinedRows, KeyedKernel):
    """A keyed kernel whose records can be pre-aggregated on each map task before the
    exchange by key (C-MR's Combine, MapReduce's combiner): ``process`` then takes the rows
    :meth:`combine` made (in :meth:`combined_schema`) as well as records.

    The runtime sees a combining kernel by its class, never by probing attributes: it calls
    :meth:`bind` once with the records' schema, runs :meth:`combine` in every map task and
    ships the combined rows to the keyed stage.
    """

    @abstractmethod
    def bind(self, input_schema: pa.Schema) -> pa.Schema:
        """Remember the records' schema (combined rows do not carry their types); returns the
        output schema."""

    @abstractmethod
    def combined_schema(self, input_schema: pa.Schema) -> pa.Schema:
        """Schema of the rows :meth:`combine` makes of records of ``input_schema``."""

    @abstractmethod
    def combine(self, rows: pa.Table, ctx: BatchContext) -> tuple[pa.Table, pa.Table, list[DeadRecord]]:
        """One map task's records pre-aggregated: (combined rows, late records, dead letters)."""
