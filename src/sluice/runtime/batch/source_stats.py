"""A source's statistics (its rows and latest event time), owned by the batch's source stage
(``compile.SourceStage.measured``) and measured where its records become Arrow anyway: by the
keyed stage that receives them (combined by Spark, or as records) or by the Python chain that
reads them first. The driver reads them back after the job as the source's observation."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from sluice.runtime.batch.task_metrics import SOURCE, TaskFigures
from sluice.runtime.kernels.windows import RECORDS

MAX_EVENT = "__max_event_us"  # per group of combined rows: the latest event time of its records


@dataclass(frozen=True)
class SourceStats:
    """A source's statistics, measured on the combined rows of its records by the keyed stage
    that receives them, on the records themselves by a keyed stage whose exchange sends them
    uncombined (``records``), or on the records by the Python chain that reads them first:
    ``rows`` (the records) and ``max_event_us`` (their latest event time, when it has one).
    Each task adds its share to the metrics accumulator as the source's
    (``task_metrics.SOURCE``); the driver reads them as the source's observation (:meth:`take`).

    An observation (``DataFrame.observe``) of the combined rows would do the same in Spark,
    but it is an operator outside the stage's generated code, evaluated row by row, and one
    more transformation to analyze every batch (with its result fetched after the job: some
    10 ms of a small batch on the driver)."""

    source: str  # the source operator's id
    event_time: str | None
    # measured on the records as they cross the exchange (one row each), not on partials
    records: bool = False

    def measure(self, rows: pa.Table, metrics) -> None:
        """Add one task's received rows (combined, or the records) to ``metrics`` (a
        ``TaskMetrics``)."""
        if rows.num_rows == 0:
            return
        if self.records:
            metrics.add(self.source, "rows", rows.num_rows, SOURCE)
            latest = _latest_us(rows[self.event_time]) if self.event_time is not None else None
        else:
            metrics.add(self.source, "rows", int(pc.sum(rows[RECORDS]).as_py() or 0), SOURCE)
            latest = pc.max(rows[MAX_EVENT]).as_py() if self.event_time is not None else None
        if latest is not None:
            metrics.peak(self.source, "max_event_us", int(latest), SOURCE)

    def measuring(self, batches, metrics, partition: int):
        """Pass one task's batches of the source's records themselves through, measuring them
        (what a Python chain reading the source directly does, on the Arrow batches it
        receives anyway). Rows count per partition and by maximum, so a job that runs the
        chain again over the same partitions (a window's late records) counts them once."""
        rows = 0
        for batch in batches:
            rows += batch.num_rows
            if self.event_time is not None and batch.num_rows:
                latest = _latest_us(batch.column(self.event_time))
                if latest is not None:
                    metrics.peak(self.source, "max_event_us", int(latest), SOURCE)
            yield batch
        metrics.peak(self.source, partition, rows, SOURCE)  # by partition: its largest count

    def take(self, figures: TaskFigures) -> dict:
        """The statistics, from the batch's task metrics, as an observation gives them."""
        summed = figures.sources.get(self.source, {})
        peaks = figures.source_peaks.get(self.source, {})
        rows = summed.get("rows", 0) + sum(n for part, n in peaks.items() if isinstance(part, int))
        return {"rows": int(rows), "max_event_us": peaks.get("max_event_us")}


def _latest_us(times) -> int | None:
    """The latest of a timestamp column, in microseconds since the epoch (None: all null)."""
    return pc.max(times.cast(pa.timestamp("us", tz=times.type.tz)).cast(pa.int64())).as_py()
