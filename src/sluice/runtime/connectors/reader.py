"""The stream reader shared by connector sources: offsets, admission, backlog, outages.

An offset is the broker's own position of the last admitted message plus a count, e.g.
``{"source": "orders", "position": 1200, "rows": 1200, "at_us": ...}``:

- ``position``: where the batch ends in the broker's order (a JetStream sequence number, a
  Redis entry ID, a column value, a journal index). Spark logs it before the batch runs, and
  a batch reads exactly the messages after the start position up to and including the end
  one, so a replay after a crash reads the same messages (exactly-once input).
- ``rows``: messages admitted so far (for the backlog).
- ``at_us``: when the batch was planned; the ingest time of rows whose broker has no time of
  its own (it is logged, so a replay gets the same times).

Admission works as for Sluice's other sources: the live limit is re-read from the admission
file every time a batch is planned (``sources.admission.admission_cap``), and the backlog
(messages at the broker not yet admitted) is reported to the backlog file and to Spark's
progress (``reportLatestOffset``).

A message that does not parse as the schema, that has none of its columns (``{}``, an
entry without any declared field), or that lacks a column declared ``nullable=False``, goes
to the dead-letter channel of the batch reading it (its payload as text, or as
``{"payload_base64": ...}`` when it is not UTF-8, so it can be replayed byte for byte; the
batch id is Spark's local property, as for the directory source), in one
file per partition that a replay replaces; the driver forwards it to the dead-letter sink.

A broker that is down does not fail the job at once: planning admits nothing while it is
away (the backlog file says why) and reading retries; after ``spec.patience_s`` the job fails
with a ``SourceError`` naming the broker and its address.
"""

from __future__ import annotations

import base64
import itertools
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import ReadLimit
from pyspark.sql.types import StructType

from sluice.credentials import redact
from sluice.errors import SourceError
from sluice.graph.sources import INGEST_TS, TIMESTAMP
from sluice.runtime.connectors.payloads import Parsed
from sluice.runtime.sources.admission import admission_cap, default_read_limit
from sluice.runtime.sources.control import BacklogReporter

RETRY_S = 0.5  # seconds between tries while a broker is unreachable
WAIT_LINE_EVERY_S = 3.0  # a read or write waiting for its broker says so this often (stderr)
MIN_SPLIT_ROWS = 20_000
"""Messages below which a batch is read by one task (a task's start costs more than it saves)."""
INGEST_FIELD = pa.field(INGEST_TS, TIMESTAMP)


class BrokerDown(Exception):
    """The broker could not be reached (wraps the client's own error, credentials masked:
    the message reaches the backlog file and the job's error)."""

    def __init__(self, message: str):
        super().__init__(redact(message))


def dead_letter_message(payload: bytes) -> object:
    """A message as its dead letter keeps it: the text, or ``{"payload_base64": ...}`` when
    it is not UTF-8 (replacing the bad bytes would lose what a replay needs)."""
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError:
        return {"payload_base64": base64.b64encode(payload).decode("ascii")}


def set_aside(parsed: Parsed, reasons: dict[int, str]) -> Parsed:
    """``parsed`` without the rows of the input messages in ``reasons`` (index -> why), which
    become rejects."""
    if not reasons:
        return parsed
    kept = np.asarray(parsed.kept, np.int64)
    keep = ~np.isin(kept, np.fromiter(reasons, np.int64, len(reasons)))
    rejects = sorted([*parsed.rejects, *reasons.items()])
    return Parsed(parsed.table.filter(pa.array(keep)), kept[keep].tolist(), rejects)


def screen(parsed: Parsed, ingest_us: np.ndarray, required: tuple[str, ...]) -> tuple[Parsed, np.ndarray]:
    """Rows that hold no value for any column (``{}``, an entry without a declared field)
    and rows without a value for a ``required`` column become rejects; the ingest times
    (one per kept row) follow."""
    table = parsed.table
    if table.num_rows == 0 or table.num_columns == 0:
        return parsed, ingest_us
    nulls = {name: table.column(name).is_null().to_numpy(zero_copy_only=False) for name in table.column_names}
    empty = np.logical_and.reduce(list(nulls.values()))
    lacking = np.logical_or.reduce([nulls[n] for n in required]) if required else np.zeros_like(empty)
    bad = empty | lacking
    if not bad.any():
        return parsed, ingest_us
    kept = np.asarray(parsed.kept, np.int64)
    reasons = {}
    for row in np.flatnonzero(bad):  # only the bad rows: few
        if empty[row]:
            reasons[int(kept[row])] = f"has none of the declared fields {table.column_names}"
        else:
            missing = [n for n in required if nulls[n][row]]
            reasons[int(kept[row])] = f"lacks the required field(s) {missing}"
    return set_aside(parsed, reasons), np.asarray(ingest_us)[~bad]


def now_us() -> int:
    return time.time_ns() // 1000


class Span(InputPartition):
    """Messages after ``start`` up to and including ``end`` (broker positions), picklable."""

    def __init__(self, start: Any, end: Any, rows: int, at_us: int, part: int = 0):
        self.start, self.end, self.rows, self.at_us, self.part = start, end, rows, at_us, part

    def __repr__(self) -> str:
        return f"Span({self.start!r}, {self.end!r}]"


class Plan:
    """What the broker says when a batch is planned."""

    def __init__(self, end: Any, admitted: int, waiting: int | None):
        self.end = end  # position of the last admitted message
        self.admitted = admitted  # messages in the batch
        self.waiting = waiting  # messages at the broker after ``end`` (None: unknown)


class ConnectorStreamReader(DataSourceStreamReader):
    """Subclasses say where reading starts and talk to their broker:
    ``first_position``, ``plan(start, cap)`` and ``fetch(span)``."""

    dead_letters: str | None = None  # set by SluiceDataSource: the checkpoint that takes dead letters

    def __init__(self, spec, name: str, control_dir: str, schema: StructType, parallelism: int):
        self.spec = spec
        self.name = name
        self.control_dir = control_dir
        self.parallelism = max(1, parallelism)
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        self._backlog = BacklogReporter(control_dir, name)
        self._down_since: float | None = None
        self._last: dict | None = None  # the last offset planned, for reportLatestOffset
        self._waiting: int | None = None

    # --- what subclasses provide ---------------------------------------------------------------

    def first_position(self) -> Any:
        """The position before the first message (e.g. 0, "0-0")."""
        raise NotImplementedError

    def plan(self, start: dict, cap: int | None) -> Plan:
        """How far the next batch goes: at most ``cap`` messages after ``start["position"]``
        (``start["rows"]`` messages were admitted before it).
        Raises BrokerDown if the broker cannot be reached."""
        raise NotImplementedError

    def message_bytes(self) -> float | None:
        """The broker's mean size of a message, in bytes, for ``max_bytes_per_batch`` (None:
        unknown, the batch is bounded by rows alone)."""
        return None

    def fetch(self, span: Span) -> tuple[Parsed, np.ndarray, list[str], list[bytes]]:
        """The span's messages: parsed rows, their ingest times (micros, one per kept row),
        and per input message its position (for dead letters) and raw payload."""
        raise NotImplementedError

    # --- pickling: connections stay where they were made ---------------------------------------

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_conn")}

    # --- offsets ---------------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        return {"source": self.name, "position": self.first_position(), "rows": 0, "at_us": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return default_read_limit()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        cap = admission_cap(limit, self.control_dir, self.name, self.spec.max_rows_per_batch)
        try:
            cap = self._bytes_cap(cap)
            plan = self.plan(start, cap)
            self._down_since = None
        except BrokerDown as e:
            self._outage(e)
            self._report(
                start,
                0,
                None,
                cap,
                error=f"{self.spec.broker} is unreachable: {e}",
                down_s=time.monotonic() - (self._down_since or time.monotonic()),
            )
            return start
        self._waiting = plan.waiting
        self._report(start, plan.admitted, plan.waiting, cap)
        if plan.admitted == 0:
            self._last = start
            return start
        rows = start["rows"] + plan.admitted
        self._last = {"source": self.name, "position": plan.end, "rows": rows, "at_us": now_us()}
        return self._last

    def _bytes_cap(self, cap: int | None) -> int | None:
        """``cap`` lowered so the batch's messages stay within ``max_bytes_per_batch``, by the
        broker's mean message size. No cap (Spark asked for all available) stays none."""
        limit = getattr(self.spec, "max_bytes_per_batch", None)
        if cap is None or not limit:
            return cap
        size = self.message_bytes()
        return cap if not size else max(1, min(cap, int(limit // size)))

    def reportLatestOffset(self) -> dict | None:
        """Spark's progress shows it beside the end offset: backlog = rows here - there."""
        if self._last is None or self._waiting is None:
            return None
        return {"source": self.name, "rows": self._last["rows"] + self._waiting}

    def commit(self, end: dict) -> None:
        """Spark has committed the batch ending at ``end``; brokers that need telling (MQTT)
        override this."""

    def _outage(self, error: Exception) -> None:
        now = time.monotonic()
        if self._down_since is None:
            self._down_since = now
        if now - self._down_since > self.spec.patience_s:
            raise SourceError(
                f"source {self.name!r}: {self.spec.broker} has been unreachable for {self.spec.patience_s:g} s: {error}"
            ) from None

    def _report(
        self,
        start: dict,
        admitted: int,
        waiting: int | None,
        cap: int | None,
        error: str | None = None,
        down_s: float | None = None,
    ) -> None:
        status = {
            "source": self.name,
            "kind": type(self.spec).__name__,
            "planned_rows": start["rows"] + admitted,
            "available_rows": None if waiting is None else start["rows"] + admitted + waiting,
            "backlog": waiting,
            "batch_rows": admitted,
            "max_rows": cap,
            "total_rows": None,
            "exhausted": False,
            "time": time.time(),
        }
        if error:  # the driver says it waits (sluice.cli.waiting) until patience runs out
            status.update(error=error, broker=self.spec.broker, down_s=round(down_s or 0.0, 1), patience_s=self.spec.patience_s)
        self._backlog.report(status, planned_batch=admitted > 0)

    # --- reading -----------------------------------------------------------------------------------

    splittable = False
    """Positions are integers a batch's range can be cut at (a JetStream sequence, a journal
    index): the batch is then read by several tasks, each its own slice."""

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        rows = end["rows"] - start["rows"]
        if rows == 0:  # e.g. the first batch, planned before any message
            return []
        at_us = end.get("at_us", 0)
        parts = min(self.parallelism, -(-rows // MIN_SPLIT_ROWS)) if self.splittable else 1
        if parts <= 1:
            return [Span(start["position"], end["position"], rows, at_us)]
        # equal slices of the position range (a deleted message makes its slice a little short)
        lo, hi = int(start["position"]), int(end["position"])
        cuts = [lo + (hi - lo) * i // parts for i in range(parts + 1)]
        return [Span(a, b, max(1, rows // parts), at_us, part=i) for i, (a, b) in enumerate(itertools.pairwise(cuts)) if b > a]

    def read(self, span: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(span, Span)  # what partitions() made
        parsed, ingest_us, positions, payloads = self.with_patience(lambda: self.fetch(span))
        parsed, ingest_us = screen(parsed, ingest_us, self.spec.required)
        if parsed.rejects:
            self._dead_letter(
                span,
                [
                    (f"{self.spec.broker}, message {positions[i]}", reason, dead_letter_message(payloads[i]))
                    for i, reason in parsed.rejects
                ],
            )
        table = parsed.table.append_column(INGEST_FIELD, pa.array(ingest_us, type=TIMESTAMP))
        yield from table.cast(self.arrow_schema).to_batches()

    def _dead_letter(self, span: Span, rejects: list[tuple[str, str, object]]) -> None:
        """(location, reason, message) of each unreadable message to the dead letters of the
        batch being read, one file per partition (a replay replaces it)."""
        from pyspark import TaskContext

        from sluice.runtime.side_outputs import DEAD_LETTER, SideOutputWriter
        from sluice.runtime.sources.directory import BATCH_ID_PROPERTY

        context = TaskContext.get()
        batch_id = context.getLocalProperty(BATCH_ID_PROPERTY) if context is not None else None
        if not self.dead_letters or batch_id is None:
            location, reason, _ = rejects[0]
            raise SourceError(
                f"source {self.name!r}: cannot read {location}: {reason} (and no dead-letter channel outside a Sluice job)"
            )
        writer = SideOutputWriter(self.dead_letters, DEAD_LETTER, int(batch_id), f"source-{self.name}", span.part)
        for location, reason, message in rejects:
            writer.dead(self.name, message, reason, location)
        writer.flush()

    def with_patience(self, work: Callable[[], Any]) -> Any:
        """``work()``, retried while the broker is down, for at most ``spec.patience_s``.
        A read that waits says so on stderr (the task's: the terminal on local Spark, the
        executor's log on a cluster), as the driver does for a plan that waits."""
        began = time.monotonic()
        said = None  # when the last waiting line was printed (None: none yet)
        while True:
            try:
                result = work()
                break
            except BrokerDown as e:
                down = time.monotonic() - began
                if down > self.spec.patience_s:
                    raise SourceError(
                        f"source {self.name!r}: {self.spec.broker} has been unreachable for {self.spec.patience_s:g} s: {e}"
                    ) from None
                if said is None or down - said >= WAIT_LINE_EVERY_S:
                    said = down
                    print(
                        f"sluice: waiting for {self.spec.broker} ({down:.0f} s of {self.spec.patience_s:g}): {e}",
                        file=sys.stderr,
                        flush=True,
                    )
                time.sleep(RETRY_S)
        if said is not None:
            print(f"sluice: source {self.name!r} reached its broker again", file=sys.stderr, flush=True)
        return result
