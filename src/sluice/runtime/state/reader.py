"""Reading a checkpoint's keyed state as a table: every key with its state, as of a committed
batch (``sluice.state.read``, ``sluice state``).

A batch is committed once its done record exists (``batches/<batch>.done.json``); the state
commit of the key-group store is written just before it, so a commit record without a done
record (a batch that crashed between the two, or is finishing right now) is not read. The
state as of batch N is the store's index before batch N + 1.

Read-only: nothing is written into the checkpoint and no lease is taken, so the state can be
read while the job runs. The job's compaction may collect history while the read is under
way (files of an index disappear); the read then starts over from the records as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from sluice.core.columns import KEY_GROUP
from sluice.errors import StateError
from sluice.runtime.checkpoint import STATE, Checkpoint
from sluice.runtime.kernels.process import EVENT_TIMERS, PROCESSING_TIMERS
from sluice.runtime.kernels.ttl import STAMP
from sluice.runtime.state.store import KeyGroupStore

RECORD = "pipeline.json"  # runtime.pipeline_record.RECORD (not imported: that module pulls in the planner)
TIMERS = (EVENT_TIMERS, PROCESSING_TIMERS)
_TIMESTAMP = pa.timestamp("us", tz="UTC")
_ATTEMPTS = 3  # reads restarted when a compaction collected the files being read


@dataclass(frozen=True)
class StatefulOperator:
    """A keyed operator whose state the checkpoint holds."""

    id: str  # the directory of its state: state/<id>/
    name: str
    kind: str  # aggregate, window, process, reduce, join, ...
    keys: int  # how many key columns lead its state rows
    # typed process state: its fields now (files written before a migration may hold others)
    fields: tuple[str, ...] | None = None

    def describe(self) -> str:
        named = f" ({self.name!r})" if self.name and self.name != self.id else ""
        return f"{self.id}{named}: {self.kind}"


def stateful_operators(checkpoint: str | Checkpoint) -> list[StatefulOperator]:
    """The keyed operators of the checkpoint's pipeline record that have a state directory."""
    ckpt = Checkpoint.of(checkpoint)
    record = ckpt.read_json(RECORD)
    if not isinstance(record, dict) or not isinstance(record.get("operators"), dict):
        raise StateError(
            f"{ckpt.location(RECORD)} is missing or damaged: {ckpt} is not a Sluice checkpoint that ran a keyed operator"
        )
    present = set(ckpt.dirs(STATE))
    out = []
    for op_id, recorded in record["operators"].items():
        entry = recorded or {}  # None: recorded before records held what the state depends on
        if op_id in present:
            out.append(
                StatefulOperator(
                    op_id,
                    str(entry.get("name") or op_id),
                    str(entry.get("kind", "?")),
                    len(entry.get("keys") or []),
                    tuple(f.split(" ", 1)[0] for f in entry["state"]) if entry.get("state") else None,
                )
            )
    return sorted(out, key=lambda op: op.id)


def committed_batches(checkpoint: str | Checkpoint) -> list[int]:
    """The ids of the job's committed batches (those with a done record), ascending."""
    return Checkpoint.of(checkpoint).done_batches()


def kept_batches(checkpoint: str | Checkpoint, operator: str | None = None) -> list[int]:
    """The committed batches whose state of ``operator`` can still be read: the job's
    compaction keeps the history back to its latest snapshot only."""
    ckpt = Checkpoint.of(checkpoint)
    op = _operator(ckpt, operator)
    floor = KeyGroupStore(ckpt.uri, op.id, [])._history_floor()
    return [b for b in committed_batches(ckpt) if floor is None or b >= floor]


def read(checkpoint: str | Checkpoint, operator: str | None = None, batch: int | None = None) -> pa.Table:
    """Every key of ``operator`` (its id or name; may be left out when the checkpoint holds
    one stateful operator) with its state, as of ``batch`` (default: the last committed).

    Columns: the key columns, the state columns as the operator stores them (an aggregate's
    partial values by aggregate name, e.g. ``n`` for a count and ``x__sum``/``x__count`` for
    a mean; a window's open intervals and their partials as lists; ``process`` state as its
    pickled bytes in ``__state``; timers as lists of UTC timestamps; with a TTL, the key's
    last write as a UTC timestamp in ``__ttl_ts``), and ``key_group``.
    """
    ckpt = Checkpoint.of(checkpoint)
    op = _operator(ckpt, operator)
    done = committed_batches(ckpt)
    if not done:
        raise StateError(f"checkpoint {ckpt} has no committed batch yet: there is no state to read")
    if batch is None:
        batch = done[-1]
    elif batch not in done:
        raise StateError(f"batch {batch} is not a committed batch of checkpoint {ckpt}; committed batches: {_ranges(done)}")
    for attempt in range(_ATTEMPTS):
        kept = kept_batches(ckpt, op.id)
        if batch not in kept:
            raise StateError(
                f"the state of {op.id!r} as of batch {batch} is no longer kept (the job compacted it "
                f"into a later snapshot); batches whose state is kept: {_ranges(kept)}"
            )
        try:
            return _read(ckpt, op, batch)
        except StateError:
            # the job's compaction collected files of the index meanwhile (missing files, or
            # history below a new snapshot): look again; anything else is raised on the last try
            if attempt == _ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def _read(ckpt: Checkpoint, op: StatefulOperator, batch: int) -> pa.Table:
    if op.keys == 0:  # merging by key group alone would keep one key per group
        raise StateError(
            f"{ckpt.location(RECORD)} does not record the key columns of {op.id!r} (written by an "
            f"older Sluice); run the job once with this version, then read its state"
        )
    store = KeyGroupStore(ckpt.uri, op.id, [])
    index = store.index(before_batch=batch + 1)
    kgs = index.key_groups_with_state()
    if not kgs:
        return pa.table({"key_group": pa.array([], pa.int32())})
    # the key columns lead every state file after __kg (state.format.build_state_table)
    names = store.read(index, kgs[:1]).column_names  # type: ignore[union-attr]
    keyed = KeyGroupStore(ckpt.uri, op.id, names[1 : 1 + op.keys])
    table = keyed.read(index, kgs)
    assert table is not None  # the index lists files
    if op.fields is not None:  # fields a state migration removed are no longer the state
        stale = [c for c in table.column_names[1 + op.keys :] if c not in op.fields and not c.startswith("__")]
        table = table.drop_columns(stale)
    table = table.drop_columns([KEY_GROUP]).append_column("key_group", table.column(KEY_GROUP))
    # microseconds since the epoch, shown as what they are
    for name, to in [*((t, pa.list_(_TIMESTAMP)) for t in TIMERS), (STAMP, _TIMESTAMP)]:
        if name in table.column_names:
            i = table.column_names.index(name)
            table = table.set_column(i, name, table.column(name).cast(to))
    return table


def _operator(ckpt: Checkpoint, operator: str | None) -> StatefulOperator:
    ops = stateful_operators(ckpt)
    listing = "; ".join(op.describe() for op in ops) or "none"
    if operator is None:
        if len(ops) == 1:
            return ops[0]
        raise StateError(f"checkpoint {ckpt} holds the state of {len(ops)} operators, name one: {listing}")
    found = [op for op in ops if operator in (op.id, op.name)]
    if len(found) != 1:
        why = "no" if not found else "more than one"
        raise StateError(
            f"{why} stateful operator of checkpoint {ckpt} is called {operator!r}; its stateful operators: {listing}"
        )
    return found[0]


def _ranges(batches: list[int]) -> str:
    """``0-7, 9`` for [0..7, 9]."""
    spans: list[list[int]] = []
    for b in batches:
        if spans and b == spans[-1][1] + 1:
            spans[-1][1] = b
        else:
            spans.append([b, b])
    return ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in spans)
