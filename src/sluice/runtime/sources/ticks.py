"""Batches without new input: how the runtime asks Spark for one.

Spark runs a micro-batch only when a source offers a new offset. Windows, sessions and
joins close on the watermark, which moves with the data of the batch *before* the one that
applies it: the last batch of a burst moves the watermark past open windows, and without
another batch they would wait for data that may never come. Spark's own answer (no-data
batches) exists only for Spark's stateful operators, so Sluice's sources answer it: the
driver writes a *tick request* to a source's control file (``<name>.tick.json``:
``{"tick": n, "due_us": t}``), and the source, asked for its latest offset with nothing new
to read once the clock reaches ``due_us``, returns its current offset plus ``"tick": n``.
Spark sees a new offset, logs it in its offset log and runs one batch with no rows, in which
the executor computes the watermark from what it has seen so far.

The tick number travels in every later offset, so a served request is never served twice,
a replayed tick batch replays with its logged offset like any other batch, and a request
made before a crash and not yet served is served after the restart (the source reads the
same file). A batch that brings data absorbs a pending request (its offset carries the
request's number): that batch runs anyway, and the executor asks again after it if
something is still due. ``due_us=None`` cancels a request.

``TickingReader`` adds this to any of Sluice's stream readers without their knowing: the
readers see offsets without ``tick`` and return offsets without it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow

from sluice.runtime.sources.control import control_path, read_json, write_json_atomic

TICK = "tick"


@dataclass(frozen=True)
class TickRequest:
    """One batch wanted from a source, with no new input needed, once the clock reaches
    ``due_us`` (microseconds since the epoch; None: the request is cancelled). ``tick``
    numbers requests, increasing: the batch after which the executor made it."""

    tick: int
    due_us: int | None


def request_tick(control_dir: str, name: str, request: TickRequest) -> None:
    write_json_atomic(control_path(control_dir, name, TICK), {"tick": request.tick, "due_us": request.due_us})


def read_tick_request(control_dir: str, name: str) -> TickRequest | None:
    found = read_json(control_path(control_dir, name, TICK))
    if not found or not isinstance(found.get("tick"), int):
        return None
    due = found.get("due_us")
    return TickRequest(int(found["tick"]), int(due) if isinstance(due, int) else None)


def _inner(offset: dict) -> dict:
    """The offset as the wrapped reader made it (without the tick number)."""
    if TICK not in offset:
        return offset
    return {k: v for k, v in offset.items() if k != TICK}


def next_offset(start: dict, inner_latest: dict, request: TickRequest | None, now_us: int) -> dict:
    """The offset to return, given the start offset, the wrapped reader's latest offset and
    the pending tick request (pure, so it can be tested alone).

    New data: the reader's offset, carrying the highest tick number known (a pending request
    is absorbed). No new data: the start offset, with the request's number if it is due."""
    served = start.get(TICK, -1)
    pending = request is not None and request.tick > served
    if inner_latest != _inner(start):
        tick = request.tick if pending and request is not None else served
        return inner_latest if tick < 0 else {**inner_latest, TICK: tick}
    if pending and request is not None and request.due_us is not None and now_us >= request.due_us:
        return {**start, TICK: request.tick}
    return start


class TickingReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A stream reader that also plans tick batches (see the module's doc); everything else
    is the wrapped reader's."""

    def __init__(self, reader: DataSourceStreamReader, control_dir: str, name: str):
        self.reader = reader
        self.control_dir = control_dir
        self.name = name

    def __getattr__(self, attr: str):  # e.g. ``reads_anywhere``, ``dead_letters``
        if attr == "reader":  # not yet set (unpickling): no recursion
            raise AttributeError(attr)
        return getattr(self.reader, attr)

    def initialOffset(self) -> dict:
        return self.reader.initialOffset()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        inner = self.reader.latestOffset(_inner(start), limit)
        request = read_tick_request(self.control_dir, self.name)
        return next_offset(start, inner, request, time.time_ns() // 1000)

    def getDefaultReadLimit(self) -> ReadLimit:
        return self.reader.getDefaultReadLimit()

    def reportLatestOffset(self) -> dict | None:
        return self.reader.reportLatestOffset()

    def prepareForTriggerAvailableNow(self) -> None:
        prepare = getattr(self.reader, "prepareForTriggerAvailableNow", None)
        if prepare is not None:
            prepare()

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return list(self.reader.partitions(_inner(start), _inner(end)))

    def commit(self, end: dict) -> None:
        self.reader.commit(_inner(end))

    def stop(self) -> None:
        self.reader.stop()

    def read(self, partition: InputPartition) -> Iterator:
        return self.reader.read(partition)
