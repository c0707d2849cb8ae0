"""Per-batch metrics: recorded as JSON lines in the checkpoint and readable from Python.

One record per micro-batch: rows in and out and time per operator (sum and max over
tasks), batch size, source backlog, end-to-end latency percentiles per sink (from the hidden
ingest-timestamp column), per key group rows and state size, dead letters and late records.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import asdict, dataclass, field

from sluice.core import jsonlines
from sluice.core.checkpoint import METRICS, Checkpoint
from sluice.core.files import read_tail


@dataclass
class BatchMetrics:
    batch_id: int
    plan_version: int
    started_at: float  # epoch seconds
    duration_s: float
    rows_in: int  # rows admitted from all sources
    rows_by_source: dict[str, int] = field(default_factory=dict)
    backlog: dict[str, int | None] = field(default_factory=dict)
    operators: dict[str, dict[str, float]] = field(default_factory=dict)
    # rows, write_s, committed_ms (batch start to commit), latency_mean/p50/p95/p99_ms
    sinks: dict[str, dict[str, float]] = field(default_factory=dict)
    key_groups: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)  # op -> kg -> {rows, state_bytes}
    # keyed op -> its traffic from the keyed operator before, keyed differently (runtime.traffic):
    # {upstream, rows, local_rows, pairs: [[upstream kg, kg, rows], ...], dropped_rows}
    traffic: dict[str, dict] = field(default_factory=dict)
    dead_letters: int = 0  # records sent to the dead-letter sink (an operator raised, a source could not parse)
    late_records: int = 0  # records too late for every window, sent to the windows' ``late`` side outputs
    watermark: int | None = None
    # constraint name -> latency split of its path (models.latency.split_path_latency)
    paths: dict[str, dict] = field(default_factory=dict)
    # the session's executors after the batch: host and storage memory used (the driver too)
    executors: list[dict] = field(default_factory=list)
    skipped: bool = False  # a replay of a batch that had already committed
    # the active alternate of each operator with alternates, as the batch ran (its Plan)
    alternates: dict[str, str] = field(default_factory=dict)
    # value, relative throughput, executors, cost and profit (models.economics), and per
    # operator with alternates what its active alternate measured (cost per row, selectivity)
    dynamics: dict = field(default_factory=dict)

    @property
    def latency_ms(self) -> dict[str, float]:
        """Worst sink's latency percentiles (p50, p95, p99) in milliseconds."""
        out: dict[str, float] = {}
        for sink in self.sinks.values():
            for p in ("p50", "p95", "p99"):
                v = sink.get(f"latency_{p}_ms")
                if v is not None:
                    out[p] = max(out.get(p, v), v)
        return out

    def to_json(self) -> str:
        return json.dumps(asdict(self), default=str)


def read(checkpoint: str | Checkpoint, max_bytes: int | None = None) -> list[BatchMetrics]:
    """Every batch's metrics, one per batch id (the latest record wins), in batch order.

    ``max_bytes``: read only the file's last bytes (the latest batches; what a restart needs
    to warm up from). A line cut short by a crash or a full disk is skipped, and so, with a
    warning, is a damaged one (``runtime.jsonlines``)."""
    checkpoint = Checkpoint.of(checkpoint)
    path = checkpoint.path(METRICS)
    if max_bytes is None:
        data = checkpoint.read_bytes(METRICS) or b""
    else:
        data, _ = read_tail(checkpoint.fs, path, max_bytes)
    by_batch: dict[int, BatchMetrics] = {}
    for d in jsonlines.parse(data, checkpoint.location(METRICS)):
        try:
            by_batch[int(d["batch_id"])] = BatchMetrics(**d)
        except (KeyError, TypeError, ValueError):
            warnings.warn(
                f"{checkpoint.location(METRICS)}: a record that is not a batch's metrics, skipped",
                jsonlines.DamagedLineWarning,
                stacklevel=2,
            )
    return [by_batch[b] for b in sorted(by_batch)]


RECENT_BYTES = 4 << 20
"""What a start reads of ``metrics.jsonl`` to warm up from: the last few thousand batches."""


def read_recent(checkpoint: str | Checkpoint) -> list[BatchMetrics]:
    """The latest batches' metrics (the last ``RECENT_BYTES`` of the file)."""
    return read(checkpoint, RECENT_BYTES)
