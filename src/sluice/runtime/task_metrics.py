"""Measurements taken inside Spark tasks and shipped to the driver (Nephele's QoS reporters).

Tasks add to one Spark accumulator a dict of ``MetricKey(operator, metric) -> number``.
Metrics whose name ends in ``_max`` combine by maximum, all others by sum. The driver reads
and resets it once per batch.
"""

from __future__ import annotations

from typing import NamedTuple

from pyspark.accumulators import AccumulatorParam


class MetricKey(NamedTuple):
    """One measurement's name: the operator (or stage) it belongs to, and what it counts."""

    operator: str
    metric: str

    @property
    def is_max(self) -> bool:
        """Combined over tasks by maximum (``*_max``), not by sum."""
        return self.metric.endswith("_max")


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
        self.values: dict[MetricKey, float] = {}

    def add(self, operator: str, metric: str, value: float) -> None:
        key = MetricKey(operator, metric)
        if key.is_max:
            self.values[key] = max(self.values.get(key, value), value)
        else:
            self.values[key] = self.values.get(key, 0) + value

    def op_timing(self, operator: str, rows_in: int, rows_out: int, seconds: float) -> None:
        self.add(operator, "rows_in", rows_in)
        self.add(operator, "rows_out", rows_out)
        self.add(operator, "time_s", seconds)
        self.add(operator, "time_s_max", seconds)

    def flush(self) -> None:
        if self.values and self.accumulator is not None:
            self.accumulator.add(self.values)
        self.values = {}


def split_metrics(flat: dict[MetricKey, float]) -> dict[str, dict[str, float]]:
    """{MetricKey(op, metric): v} -> {op: {metric: v}}."""
    out: dict[str, dict[str, float]] = {}
    for key, value in flat.items():
        out.setdefault(key.operator, {})[key.metric] = value
    return out
