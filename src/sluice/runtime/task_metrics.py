"""Measurements taken inside Spark tasks and shipped to the driver (Nephele's QoS reporters).

Tasks add to one Spark accumulator a dict of ``MetricKey(operator, metric) -> number``.
Metrics whose name ends in ``_max`` combine by maximum, all others by sum. The driver reads
and resets it once per batch. A value may also be :class:`SparseCounts` (counts of many
codes in one entry, summed code by code: the traffic between key groups).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from pyspark.accumulators import AccumulatorParam


class MetricKey(NamedTuple):
    """One measurement's name: the operator (or stage) it belongs to, and what it counts."""

    operator: str
    metric: str

    @property
    def is_max(self) -> bool:
        """Combined over tasks by maximum (``*_max``), not by sum."""
        return self.metric.endswith("_max")


class SparseCounts:
    """Counts of integer codes, summed code by code when added: one accumulator entry for
    thousands of counts (one entry per code would cost a pickled key each)."""

    __slots__ = ("codes", "counts")

    def __init__(self, codes: np.ndarray, counts: np.ndarray):
        self.codes = np.asarray(codes)
        self.counts = np.asarray(counts)

    @staticmethod
    def of(values: np.ndarray, bins: int | None = None) -> SparseCounts:
        """The counts of ``values``; ``bins``: an upper bound of the values, for a bincount
        (linear) where it is small enough, else a sort."""
        values = np.asarray(values, dtype=np.int64)
        if bins is not None and bins <= 1 << 18:
            counts = np.bincount(values, minlength=bins)
            codes = np.flatnonzero(counts)
            counts = counts[codes]
        else:
            codes, counts = np.unique(values, return_counts=True)
        # 32-bit where they fit: a task ships half the bytes (16,384 pairs: 130 kB)
        small = not len(codes) or codes[-1] < 1 << 31
        return SparseCounts(codes.astype(np.int32) if small else codes, counts.astype(np.int32))

    def __add__(self, other):
        if isinstance(other, (int, float)) and other == 0:  # the accumulator's start
            return self
        if not isinstance(other, SparseCounts):
            return NotImplemented
        codes, inverse = np.unique(np.concatenate([self.codes, other.codes]), return_inverse=True)
        return SparseCounts(
            codes,
            np.bincount(inverse, weights=np.concatenate([self.counts, other.counts]), minlength=len(codes)).astype(np.int64),
        )

    __radd__ = __add__

    def total(self) -> int:
        return int(self.counts.sum())

    def __repr__(self) -> str:
        return f"SparseCounts({len(self.codes)} codes, {self.total()} in all)"


class MetricsParam(AccumulatorParam):
    def zero(self, value):
        return {}

    def addInPlace(self, a, b):
        for key, value in b.items():
            if key.is_max:
                a[key] = max(a.get(key, value), value)
            else:
                a[key] = a.get(key, 0) + value
        return a


class TaskMetrics:
    """A task-local buffer of metrics, added to the accumulator once at the end of a task."""

    def __init__(self, accumulator):
        self.accumulator = accumulator
        self.values: dict[MetricKey, Any] = {}  # numbers, or SparseCounts

    def add(self, operator: str, metric: str, value: float | SparseCounts) -> None:
        key = MetricKey(operator, metric)
        if key.is_max:
            self.values[key] = max(self.values.get(key, value), value)
        else:
            self.values[key] = self.values.get(key, 0) + value

    def op_timing(self, operator: str, rows_in: int, rows_out: int, seconds: float) -> None:
        self.add(operator, "rows_in", rows_in)
        self.add(operator, "rows_out", rows_out)
        self.add(operator, "time_s", seconds)

    def flush(self) -> None:
        """Add the task's metrics to the accumulator; an operator's ``time_s_max`` is the
        task's whole time in it (the accumulator keeps the slowest task's), however many
        Arrow batches the task ran it on."""
        for key, value in list(self.values.items()):
            if key.metric == "time_s":
                self.values[MetricKey(key.operator, "time_s_max")] = value
        if self.values and self.accumulator is not None:
            self.accumulator.add(self.values)
        self.values = {}


def split_metrics(flat: dict[MetricKey, float]) -> dict[str, dict[str, float]]:
    """{MetricKey(op, metric): v} -> {op: {metric: v}}."""
    out: dict[str, dict[str, float]] = {}
    for key, value in flat.items():
        out.setdefault(key.operator, {})[key.metric] = value
    return out
