"""Measurements taken inside Spark tasks and shipped to the driver (Nephele's QoS reporters).

Tasks add to one Spark accumulator a dict of ``"<operator>|<metric>" -> number``. Metrics
whose name ends in ``_max`` combine by maximum, all others by sum. The driver reads and
resets it once per batch.
"""

from __future__ import annotations

from pyspark.accumulators import AccumulatorParam


class MetricsParam(AccumulatorParam):
    def zero(self, value):
        return {}

    def addInPlace(self, a, b):  # noqa: N802 - Spark's name
        for key, value in b.items():
            if key.endswith("_max"):
                a[key] = max(a.get(key, value), value)
            else:
                a[key] = a.get(key, 0) + value
        return a


class TaskMetrics:
    """A task-local buffer of metrics, added to the accumulator once at the end of a task."""

    def __init__(self, accumulator):
        self.accumulator = accumulator
        self.values: dict[str, float] = {}

    def add(self, operator: str, metric: str, value: float) -> None:
        key = f"{operator}|{metric}"
        if metric.endswith("_max"):
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


def split_metrics(flat: dict[str, float]) -> dict[str, dict[str, float]]:
    """{"op|metric": v} -> {"op": {"metric": v}}."""
    out: dict[str, dict[str, float]] = {}
    for key, value in flat.items():
        op, metric = key.split("|", 1)
        out.setdefault(op, {})[metric] = value
    return out
