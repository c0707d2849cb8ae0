"""What the batch executor tells the one who runs it, and asks of it, around each batch.

The executor (``runtime.batch.executor``) knows nothing of the lease, the sources' admission files
or the control plane: the job (``sluice.job``) hands it one ``BatchListener`` and the executor
calls its methods at fixed points of a batch (docs/runtime.md, section 3):

1. ``check_fence()`` before the batch starts, before its sinks write and before its state
   commits: raises when this driver may no longer write to the checkpoint;
2. ``backlog()`` while the batch's metrics are made: each source's backlog (None: unknown);
3. ``committed(metrics)`` once the batch is recorded done (its done record; its metrics
   line and housekeeping are made before this, and, unless the listener ``steers()``,
   beside Spark's commit of the batch and its planning of the next, which starts once
   they are done);
4. ``next_plan(metrics, plan)`` then: a new Plan for a later batch, or None (the control loop);
5. ``batch_done(metrics)`` last (a progress display sees the batch's decision).

Each method's default does nothing: a rehearsal or a test runs the executor with none.
"""

from __future__ import annotations

from sluice.core.metrics import BatchMetrics
from sluice.plan.physical import Plan


class BatchListener:
    """The job's side of the executor's batches; override what the job needs."""

    def check_fence(self) -> None:
        """Raise when this driver may no longer write to the checkpoint (``runtime.lease``)."""

    def backlog(self) -> dict[str, int | None]:
        """Each source's records not yet admitted, by source id (None: unbounded or unknown)."""
        return {}

    def steers(self) -> bool:
        """Whether what ``committed`` and ``next_plan`` do may change the next batch's input
        (its admission, its Plan): then they run before the batch returns to Spark, which
        plans the next batch's offsets as soon as it does."""
        return False

    def committed(self, metrics: BatchMetrics) -> None:
        """The batch is committed: its state, its done record and its metrics line."""

    def next_plan(self, metrics: BatchMetrics, plan: Plan) -> Plan | None:
        """The Plan of a later batch, from this batch's metrics and the Plan it ran with
        (None: keep it)."""
        return None

    def batch_done(self, metrics: BatchMetrics) -> None:
        """The batch and its control step are done."""
