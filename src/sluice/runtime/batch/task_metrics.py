"""Measurements taken inside Spark tasks and shipped to the driver (Nephele's QoS reporters).

Tasks add to one Spark accumulator a dict of ``MetricKey(operator, metric, part, peak) ->
number``: the part of the batch's record it belongs to (an operator's own stage, its
combine stage, its key groups' rows, its traffic, a source's statistics), and whether tasks'
values combine by maximum (``peak``) or by sum. The driver reads and resets it once per
batch and sorts it into the record's parts (:func:`collect`). A value may also be
:class:`SparseCounts` (counts of many codes in one entry, summed code by code: the traffic
between key groups).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
from pyspark.accumulators import AccumulatorParam

from sluice.core.metrics import OperatorProgress, StageProgress

# the part of the batch's record a measurement belongs to
OPERATOR = "operator"  # an operator's own stage: figures and counters
COMBINE = "combine"  # its map-side combine stage before the exchange
KEY_GROUPS = "key_groups"  # a keyed operator's rows per key group (metric: the key group)
TRAFFIC = "traffic"  # its rows per (upstream key group, key group) (metric: the upstream operator)
SOURCE = "source"  # a source's statistics measured by the stage that reads its records


class MetricKey(NamedTuple):
    """One measurement's name: the operator (or source) it belongs to, what it counts, the
    part of the record it goes to, and whether tasks' values combine by maximum."""

    operator: str
    metric: Any  # a name; a key group (KEY_GROUPS); an upstream operator (TRAFFIC)
    part: str = OPERATOR
    peak: bool = False  # combined over tasks by maximum, not by sum


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
            if key.peak:
                a[key] = max(a.get(key, value), value)
            else:
                a[key] = a.get(key, 0) + value
        return a


class TaskMetrics:
    """A task-local buffer of metrics, added to the accumulator once at the end of a task."""

    def __init__(self, accumulator):
        self.accumulator = accumulator
        self.values: dict[MetricKey, Any] = {}  # numbers, or SparseCounts

    def add(self, operator: str, metric: Any, value: float | SparseCounts, part: str = OPERATOR) -> None:
        """Add ``value`` to the task's sum of ``metric``."""
        key = MetricKey(operator, metric, part)
        self.values[key] = self.values.get(key, 0) + value

    def peak(self, operator: str, metric: Any, value: float, part: str = OPERATOR) -> None:
        """Keep the largest ``value`` of ``metric`` (the task's, then the slowest task's)."""
        key = MetricKey(operator, metric, part, True)
        self.values[key] = max(self.values.get(key, value), value)

    def op_timing(self, operator: str, rows_in: int, rows_out: int, seconds: float, part: str = OPERATOR) -> None:
        """One run of an operator's stage (``part``: its own, or its COMBINE stage)."""
        self.add(operator, "rows_in", rows_in, part)
        self.add(operator, "rows_out", rows_out, part)
        self.add(operator, "time_s", seconds, part)

    def key_group_rows(self, operator: str, key_groups, counts) -> None:
        """A keyed operator's rows received per key group."""
        for kg, n in zip(key_groups, counts):
            self.add(operator, int(kg), n, KEY_GROUPS)

    def traffic(self, operator: str, upstream: str, counts: SparseCounts) -> None:
        """A keyed operator's rows per (upstream key group, key group) pair, coded ``up * K + kg``."""
        self.add(operator, upstream, counts, TRAFFIC)

    def flush(self) -> None:
        """Add the task's metrics to the accumulator; a stage's slowest task's time is the
        task's whole time in it (the accumulator keeps the slowest task's), however many
        Arrow batches the task ran it on."""
        for key, value in list(self.values.items()):
            if key.metric == "time_s" and not key.peak and key.part in (OPERATOR, COMBINE):
                self.values[key._replace(peak=True)] = value
        if self.values and self.accumulator is not None:
            self.accumulator.add(self.values)
        self.values = {}


_STAGE_FIGURES = ("rows_in", "rows_out", "time_s")
_OPERATOR_FIGURES = (*_STAGE_FIGURES, "input_wait_s")


@dataclass
class TaskFigures:
    """A batch's task metrics sorted into the parts of its record."""

    operators: dict[str, OperatorProgress] = field(default_factory=dict)
    key_group_rows: dict[str, dict[int, int]] = field(default_factory=dict)  # keyed op -> kg -> rows
    traffic: dict[str, dict[str, SparseCounts]] = field(default_factory=dict)  # keyed op -> upstream -> counts
    sources: dict[str, dict[Any, float]] = field(default_factory=dict)  # source -> its measured statistics
    source_peaks: dict[str, dict[Any, float]] = field(default_factory=dict)  # ... those combined by maximum

    def operator(self, op_id: str) -> OperatorProgress:
        """The operator's progress (empty if its tasks measured nothing)."""
        return self.operators.get(op_id) or OperatorProgress()


def collect(flat: dict[MetricKey, Any]) -> TaskFigures:
    """The accumulator's value sorted into the record's parts."""
    out = TaskFigures()
    combines: dict[str, StageProgress] = {}
    for key, value in flat.items():
        if key.part == KEY_GROUPS:
            out.key_group_rows.setdefault(key.operator, {})[int(key.metric)] = int(value)
        elif key.part == TRAFFIC:
            out.traffic.setdefault(key.operator, {})[key.metric] = value
        elif key.part == SOURCE:
            (out.source_peaks if key.peak else out.sources).setdefault(key.operator, {})[key.metric] = value
        elif key.part == COMBINE:
            stage = combines.setdefault(key.operator, StageProgress())
            _set(stage, key, value, _STAGE_FIGURES)
        else:
            _set(out.operators.setdefault(key.operator, OperatorProgress()), key, value, _OPERATOR_FIGURES)
    for op_id, stage in combines.items():
        out.operators.setdefault(op_id, OperatorProgress()).combine = stage
    return out


def _set(stage: StageProgress, key: MetricKey, value: Any, figures: tuple[str, ...]) -> None:
    if key.metric == "time_s" and key.peak:
        stage.slowest_task_s = value
    elif key.metric in figures and not key.peak:
        setattr(stage, key.metric, value)
    else:
        assert isinstance(stage, OperatorProgress), key
        stage.counters[key.metric] = value
