"""Retention: what the checkpoint keeps of the batches it has committed.

A job that runs for months must not grow its checkpoint without bound. Every append-only
record under it is pruned to the latest batches:

- ``metrics.jsonl`` and ``decisions.jsonl``: the lines of older batches are dropped; what
  the dropped metrics added up to (batches, rows, dead letters, late records, the first
  batch's start) is folded into ``metrics.summary.json``, so ``sluice status`` and the
  dashboard still total the whole run;
- ``batches/``: the start and done records of older batches (the last done record, which
  a restart goes on from, is always kept);
- ``dead_letter/batch=N`` and ``side/<operator>/<channel>/batch=N``: the records of older
  batches (they were forwarded to their sinks when their batch ran).

A batch is older when it is more than ``batches`` behind the latest, or when it started
more than ``days`` ago and is not among the latest ``MIN_BATCHES``. The defaults keep
10,000 batches and 30 days; ``SLUICE_RETAIN_BATCHES`` and ``SLUICE_RETAIN_DAYS`` change
them (``0`` days: no limit by age). Pruning runs on the driver between batches, every
``batches // 10`` batches (at least 100), so a rewrite of the logs is rare.

State (``state/``) has its own compaction, Spark's logs (``spark/``) their own retention
(``spark.sql.streaming.minBatchesToRetain``), and an MQTT journal is cut at every commit.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass

from sluice.errors import CheckpointError, ConfigError
from sluice.runtime import jsonlines
from sluice.runtime.checkpoint import BATCHES, METRICS, Checkpoint

SUMMARY = "metrics.summary.json"
DECISIONS = "decisions.jsonl"
MIN_BATCHES = 100
"""Batches always kept, whatever their age (a restart, the controller's history)."""
_BATCH_DIR = re.compile(r"batch=(\d+)")
_RECORD = re.compile(r"(\d+)\.(start|done)\.json")


@dataclass(frozen=True)
class Retention:
    """How much of its history a checkpoint keeps (see the module docstring)."""

    batches: int = 10_000
    days: float = 30.0

    def __post_init__(self) -> None:
        if not isinstance(self.batches, int) or self.batches < MIN_BATCHES:
            raise ConfigError(f"retention: batches must be an integer >= {MIN_BATCHES}, got {self.batches!r}")
        if not self.days >= 0:
            raise ConfigError(f"retention: days must be >= 0 (0: no limit by age), got {self.days!r}")

    @classmethod
    def from_env(cls) -> Retention:
        try:
            return cls(int(os.environ.get("SLUICE_RETAIN_BATCHES", "10000")), float(os.environ.get("SLUICE_RETAIN_DAYS", "30")))
        except ValueError as e:
            raise ConfigError(f"SLUICE_RETAIN_BATCHES / SLUICE_RETAIN_DAYS: {e}") from None

    @property
    def every(self) -> int:
        """Prune after every this many batches."""
        return max(MIN_BATCHES, self.batches // 10)


def due(batch_id: int, retention: Retention) -> bool:
    return batch_id > 0 and batch_id % retention.every == 0


def prune(checkpoint: str | Checkpoint, latest: int, retention: Retention | None = None, now: float | None = None) -> int:
    """Drop what the checkpoint keeps of batches older than ``retention`` allows; returns
    the first batch id kept."""
    checkpoint = Checkpoint.of(checkpoint)
    retention = retention or Retention.from_env()
    now = time.time() if now is None else now
    metrics = jsonlines.parse(checkpoint.read_bytes(METRICS) or b"", checkpoint.location(METRICS))
    cutoff = max(0, latest - retention.batches + 1)
    if retention.days:
        oldest = now - retention.days * 86400
        recent = [m["batch_id"] for m in metrics if m.get("started_at", now) >= oldest and "batch_id" in m]
        by_age = min(recent, default=latest + 1)
        cutoff = max(cutoff, min(by_age, latest - MIN_BATCHES + 1))
    if cutoff <= 0:
        return 0
    dropped = [m for m in metrics if m.get("batch_id", cutoff) < cutoff]
    if dropped:
        _fold(checkpoint, dropped)
        kept = [m for m in metrics if m.get("batch_id", cutoff) >= cutoff]
        checkpoint.write_bytes(METRICS, "".join(json.dumps(m) + "\n" for m in kept).encode())
    decisions = jsonlines.parse(checkpoint.read_bytes(DECISIONS) or b"", checkpoint.location(DECISIONS))
    kept_decisions = [d for d in decisions if not isinstance(d.get("batch_id"), int) or d["batch_id"] >= cutoff]
    if len(kept_decisions) < len(decisions):
        # the last record stays: decision ids go on from it after a restart
        if not kept_decisions:
            kept_decisions = decisions[-1:]
        checkpoint.write_bytes(DECISIONS, "".join(json.dumps(d) + "\n" for d in kept_decisions).encode())
    _prune_batch_records(checkpoint, cutoff)
    _prune_batch_dirs(checkpoint, "dead_letter", cutoff)
    for op in checkpoint.dirs("side"):
        for channel in checkpoint.dirs(f"side/{op}"):
            _prune_batch_dirs(checkpoint, f"side/{op}/{channel}", cutoff)
    return cutoff


def _fold(checkpoint: Checkpoint, dropped: list[dict]) -> None:
    """Add the dropped batches' totals to ``metrics.summary.json`` (written before the lines
    go, so a crash between the two counts them twice at worst, never loses them)."""
    summary = read_summary(checkpoint)
    by_batch = {m["batch_id"]: m for m in dropped}  # a replayed batch's latest line wins
    done = [m for m in by_batch.values() if not m.get("skipped")]
    summary["batches"] += len(done)
    summary["rows_in"] += sum(int(m.get("rows_in") or 0) for m in done)
    summary["dead_letters"] += sum(int(m.get("dead_letters") or 0) for m in done)
    summary["late_records"] += sum(int(m.get("late_records") or 0) for m in done)
    starts = [m["started_at"] for m in done if isinstance(m.get("started_at"), (int, float))]
    if starts:
        first = min(starts)
        summary["first_started_at"] = min(first, summary["first_started_at"] or first)
    summary["through_batch"] = max(by_batch)
    checkpoint.write_json(SUMMARY, summary)


def read_summary(checkpoint: str | Checkpoint) -> dict:
    """What the pruned batches added up to (zeros when nothing was pruned)."""
    checkpoint = Checkpoint.of(checkpoint)
    empty = {"batches": 0, "rows_in": 0, "dead_letters": 0, "late_records": 0, "first_started_at": None, "through_batch": None}
    try:
        stored = checkpoint.read_json(SUMMARY)
    except CheckpointError:  # a damaged summary: the totals start again from what is kept
        stored = None
    return {**empty, **stored} if isinstance(stored, dict) else empty


def _prune_batch_records(checkpoint: Checkpoint, cutoff: int) -> None:
    names = checkpoint.files(BATCHES)
    done = [int(m[1]) for n in names if (m := _RECORD.fullmatch(n)) and m[2] == "done"]
    last_done = max(done, default=None)
    for name in names:
        m = _RECORD.fullmatch(name)
        if m and int(m[1]) < cutoff and int(m[1]) != last_done:
            checkpoint.fs.delete_file(checkpoint.path(BATCHES, name))


def _prune_batch_dirs(checkpoint: Checkpoint, channel: str, cutoff: int) -> None:
    for name in checkpoint.dirs(channel):
        m = _BATCH_DIR.fullmatch(name)
        if m and int(m[1]) < cutoff:
            checkpoint.fs.delete_dir(checkpoint.path(channel, name))
