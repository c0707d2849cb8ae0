"""What the tasks of one stage of a batch know: one named record, made once per batch by
``runtime.batch.compile`` and pickled with each stage's ``mapInArrow`` function, instead of the
batch's id, context, checkpoint, metrics accumulator and key-group count travelling as
separate parameters through the exchange, the combines and the stages."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from sluice.runtime.checkpoint import Checkpoint
from sluice.runtime.kernels.keyed import BatchContext

if TYPE_CHECKING:
    from sluice.runtime.batch.source_stats import SourceStats


@dataclass(frozen=True)
class TaskEnv:
    """The batch as a stage's tasks see it."""

    context: BatchContext  # the batch's id, watermark and processing time (fixed for any replay)
    root: str | Checkpoint  # the checkpoint: side outputs and dead letters are written under it
    accumulator: Any  # the job's task-metrics accumulator (``task_metrics.MetricsParam``)
    max_parallelism: int  # key groups of the job (``Plan.max_parallelism``)
    # the statistics of the source whose records this stage sees first, to measure on them
    # (``batch.source_stats.SourceStats``); None: Spark observes them, or another stage measures them
    source_stats: SourceStats | None = None

    @property
    def batch_id(self) -> int:
        return self.context.batch_id

    def measuring(self, source_stats: SourceStats | None) -> TaskEnv:
        """This environment for a stage that measures ``source_stats`` (None: measures none)."""
        return self if source_stats is self.source_stats else replace(self, source_stats=source_stats)
