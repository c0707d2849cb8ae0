"""What a run returns."""

from __future__ import annotations

from dataclasses import dataclass, field

from sluice.core.metrics import BatchMetrics


@dataclass
class JobResult:
    checkpoint: str
    batches: int  # batches this run executed (a restart counts only its own)
    rows_in: int
    elapsed_s: float
    metrics: list[BatchMetrics] = field(default_factory=list)  # every batch of the checkpoint
    control: dict | None = None  # the controller's final state (sluice.control.Controller.state)
    dead_letters: int = 0  # records this run sent to dead letters
    late_records: int = 0  # records this run found too late for every window

    @property
    def throughput(self) -> float:
        return self.rows_in / self.elapsed_s if self.elapsed_s > 0 else 0.0
