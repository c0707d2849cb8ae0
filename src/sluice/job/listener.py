"""The job's side of each batch (``runtime.batch.listener.BatchListener``): the lease's fence, the
sources' backlog, the restart's admission put back, the control loop and the caller's hooks."""

from __future__ import annotations

from collections.abc import Callable

from sluice.control import Controller
from sluice.core.metrics import BatchMetrics
from sluice.job.options import RunOptions
from sluice.plan.physical import Plan
from sluice.runtime.batch.compile import SourceInfo
from sluice.runtime.batch.listener import BatchListener
from sluice.runtime.lease import Lease
from sluice.runtime.sources import read_backlog


class JobListener(BatchListener):
    """``control``: the job's control loop, unless ``options.controller`` replaces it (then
    none); ``options.on_control`` hears its state after each batch. ``restore_admission``:
    what sets the sources' admission limits back once this driver's first batch is
    committed (a restart's first batch admits less, ``job.sources.admit``)."""

    def __init__(
        self,
        lease: Lease,
        sources: list[SourceInfo],
        admission_files: str,
        options: RunOptions,
        control: Controller | None = None,
        restore_admission: Callable[[], None] | None = None,
    ):
        self.lease = lease
        self.sources = sources
        self.admission_files = admission_files
        self.options = options
        self.control = control
        self.restore_admission = restore_admission

    def check_fence(self) -> None:
        self.lease.check()

    def backlog(self) -> dict[str, int | None]:
        out = {}
        for info in self.sources:  # None: unbounded (a rate-less generator); a Spark source has no report
            status = read_backlog(self.admission_files, info.op.id)
            if status is not None:
                out[info.op.id] = status.get("backlog")
        return out

    def steers(self) -> bool:
        # the restart's admission is put back after its first batch; a control loop acts on
        # the sources' admission and the executors, which the next batch's offsets read
        return self.restore_admission is not None or self.options.controller is not None or self.control is not None

    def committed(self, metrics: BatchMetrics) -> None:
        if self.restore_admission is not None:  # once: after the first batch this driver commits
            restore, self.restore_admission = self.restore_admission, None
            restore()

    def next_plan(self, metrics: BatchMetrics, plan: Plan) -> Plan | None:
        if self.options.controller is not None:
            return self.options.controller(metrics, plan)
        if self.control is None:
            return None
        new_plan = self.control(metrics, plan)
        if self.options.on_control is not None:
            self.options.on_control(self.control.state())
        return new_plan

    def batch_done(self, metrics: BatchMetrics) -> None:
        if self.options.on_batch is not None:
            self.options.on_batch(metrics)
