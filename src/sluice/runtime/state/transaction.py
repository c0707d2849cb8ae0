"""One batch's key-group state, as a transaction over every keyed operator's store.

The batch reads the state each store's index shows before it (built once, when the batch
opens, and handed to the keyed stages' tasks); the tasks write delta files and report them
through descriptors; the driver commits them, store by store, once every sink is written;
the index after the commit (built once) serves the batch's metrics and the compaction that
follows. The status says where the batch is, and a failure is recorded, not guessed:

    OPEN ──prepare()──> PREPARED ──commit()──> COMMITTED
      └──────────────── any error ───────────> FAILED

Committing a batch again after a crash replaces its earlier commit (``KeyGroupStore.commit``),
so a replayed batch opens a new transaction and runs the same steps.
"""

from __future__ import annotations

from enum import Enum

from sluice.errors import StateError
from sluice.runtime.state.index import DeltaFile, StateIndex
from sluice.runtime.state.store import KeyGroupStore


class TransactionStatus(Enum):
    OPEN = "open"  # indexes read; the batch's tasks may write deltas
    PREPARED = "prepared"  # the delta files the tasks reported are collected
    COMMITTED = "committed"  # every store committed them
    FAILED = "failed"  # preparing or committing raised; the batch runs again after a restart


class StateTransaction:
    """The state of one batch across the keyed operators' stores (operator id -> store)."""

    def __init__(self, stores: dict[str, KeyGroupStore], batch_id: int):
        self.stores = stores
        self.batch_id = batch_id
        self.status = TransactionStatus.OPEN
        self._before: dict[str, StateIndex] = {}
        self._after: dict[str, StateIndex] = {}
        self.files: dict[str, list[DeltaFile | None]] = {}  # operator id -> the files its tasks reported

    def index(self, op_id: str) -> StateIndex:
        """The state the batch reads: the store's index before the batch (built once)."""
        if op_id not in self._before:
            self._before[op_id] = self.stores[op_id].index(before_batch=self.batch_id)
        return self._before[op_id]

    def prepare(self) -> None:
        """Collect the delta files the batch's tasks wrote, from their descriptors."""
        self._expect(TransactionStatus.OPEN, "prepare")
        try:
            self.files = {op_id: list(store.committed_files(self.batch_id)) for op_id, store in self.stores.items()}
        except BaseException:
            self.status = TransactionStatus.FAILED
            raise
        self.status = TransactionStatus.PREPARED

    def commit(self) -> None:
        """Make the collected files every store's state changes of the batch."""
        if self.status is TransactionStatus.OPEN:
            self.prepare()
        self._expect(TransactionStatus.PREPARED, "commit")
        try:
            for op_id, store in self.stores.items():
                store.commit(self.batch_id, list(self.files[op_id]))
        except BaseException:
            self.status = TransactionStatus.FAILED
            raise
        self.status = TransactionStatus.COMMITTED

    def committed_index(self, op_id: str) -> StateIndex:
        """The state after the batch (built once, after the commit)."""
        self._expect(TransactionStatus.COMMITTED, "read the committed index")
        if op_id not in self._after:
            self._after[op_id] = self.stores[op_id].index(before_batch=self.batch_id + 1)
        return self._after[op_id]

    def _expect(self, status: TransactionStatus, action: str) -> None:
        if self.status is not status:
            raise StateError(
                f"batch {self.batch_id}: cannot {action} a state transaction that is "
                f"{self.status.value} (expected {status.value})"
            )
