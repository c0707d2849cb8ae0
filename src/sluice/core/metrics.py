"""Per-batch metrics: recorded as JSON lines in the checkpoint and readable from Python.

One record per micro-batch, in typed parts (as PySpark's ``StreamingQueryProgress`` has its
``SourceProgress`` and ``StateOperatorProgress``):

- :class:`OperatorProgress` per operator: rows in and out, time summed over tasks and the
  slowest task's, the keyed input wait, the kernel's own counters, and the figures of its
  map-side combine stage (:class:`StageProgress`) when it has one;
- :class:`SinkProgress` per sink: rows, write time, commit time and end-to-end latency
  percentiles (from the hidden ingest-timestamp column);
- :class:`KeyGroupLoad` per keyed operator: rows and state bytes per key group;
- :class:`Traffic` per keyed operator whose input comes keyed differently from the keyed
  operator before: its rows per (upstream key group, key group) pair;

and the batch's size, source backlog, dead letters, late records, watermark, latency split
per constrained path, executors and economics.

``BatchMetrics.from_dict`` reads the record as written now and as older checkpoints wrote
it (operator stages named ``op.combine``, the slowest task's time as ``time_s_max``, key
groups as ``{op: {kg: {rows, state_bytes}}}``).
"""

from __future__ import annotations

import json
import warnings
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from sluice.core import jsonlines
from sluice.core.checkpoint import METRICS, Checkpoint
from sluice.core.files import read_tail

_OLD_COMBINE = ".combine"  # how records written before the typed parts named a combine stage
_OLD_SLOWEST = "time_s_max"  # and the slowest task's time


class _Figures:
    """Figures read by name as well as by attribute (``progress["rows_in"]``,
    ``progress.get("side_late", 0)``): a field, else one of ``counters`` if the part has them."""

    def get(self, name: str, default: Any = None) -> Any:
        if name in _field_names(type(self)) and name not in ("counters", "combine"):
            return getattr(self, name)
        return getattr(self, "counters", {}).get(name, default)

    def __getitem__(self, name: str) -> Any:
        missing = object()
        value = self.get(name, missing)
        if value is missing:
            raise KeyError(name)
        return value

    def __contains__(self, name: str) -> bool:
        return self.get(name, None) is not None


_FIELDS: dict[type, frozenset[str]] = {}


def _field_names(cls: type) -> frozenset[str]:
    if cls not in _FIELDS:
        _FIELDS[cls] = frozenset(f.name for f in fields(cls))
    return _FIELDS[cls]


def _known(cls: type, d: dict) -> dict:
    names = _field_names(cls)
    return {k: v for k, v in d.items() if k in names}


@dataclass
class StageProgress(_Figures):
    """One stage of an operator in a batch, over its tasks."""

    rows_in: int = 0
    rows_out: int = 0
    time_s: float = 0.0  # summed over the tasks
    slowest_task_s: float = 0.0  # the slowest task's whole time in it (the stage's wall time)

    def figures(self) -> dict[str, float]:
        """Every figure by name (an operator's counters too)."""
        out = {name: getattr(self, name) for name in ("rows_in", "rows_out", "time_s", "slowest_task_s")}
        counters = getattr(self, "counters", None)
        if counters is not None:
            out["input_wait_s"] = getattr(self, "input_wait_s", 0.0)
            out.update(counters)
        return out

    @classmethod
    def from_dict(cls, d: dict) -> StageProgress:
        d = dict(d)
        if _OLD_SLOWEST in d:
            d.setdefault("slowest_task_s", d.pop(_OLD_SLOWEST))
        return cls(**_known(cls, d))


@dataclass
class OperatorProgress(StageProgress):
    """One operator in a batch: its own stage's figures, a keyed operator's wait for its
    input (the exchange before it, summed over tasks), what the kernel counted besides
    (``counters``: dead letters, side outputs, state reads, a window's late records, user
    metrics), and its map-side combine stage, if it ran one (``combine``)."""

    input_wait_s: float = 0.0
    counters: dict[str, float] = field(default_factory=dict)
    combine: StageProgress | None = None

    @classmethod
    def from_dict(cls, d: dict) -> OperatorProgress:
        """From the record as written (or as older records had it: counters beside the
        figures, the slowest task's time as ``time_s_max``)."""
        d = dict(d)
        if _OLD_SLOWEST in d:
            d.setdefault("slowest_task_s", d.pop(_OLD_SLOWEST))
        names = _field_names(cls)
        counters = dict(d.pop("counters", None) or {})
        counters.update({k: v for k, v in d.items() if k not in names})
        combine = d.pop("combine", None)
        return cls(
            **{k: v for k, v in d.items() if k in names and k not in ("counters", "combine")},
            counters=counters,
            combine=_coerce(StageProgress, combine) if combine is not None else None,
        )

    @property
    def own_busy_s(self) -> float:
        """Its own stage's task time less its input wait (summed over tasks)."""
        return max(self.time_s - self.input_wait_s, 0.0)

    @property
    def busy_s(self) -> float:
        """The task time of all its stages, less its input wait (summed over tasks): the
        cores' time the operator kept busy."""
        return self.own_busy_s + (self.combine.time_s if self.combine is not None else 0.0)

    def stages(self) -> list[StageProgress]:
        """The operator's stages in the batch: its own, and its combine stage if it ran one."""
        return [self] if self.combine is None else [self, self.combine]


@dataclass
class SinkProgress(_Figures):
    """One sink in a batch: rows written, the write's seconds, when it committed (ms from the
    batch's start) and the latency of its records (commit time - ingest time), when it
    wrote rows and measured them."""

    rows: int = 0
    write_s: float = 0.0
    committed_ms: float | None = None
    latency_mean_ms: float | None = None
    latency_p50_ms: float | None = None
    latency_p95_ms: float | None = None
    latency_p99_ms: float | None = None

    @classmethod
    def from_dict(cls, d: dict) -> SinkProgress:
        return cls(**_known(cls, d))


@dataclass
class KeyGroupLoad(_Figures):
    """One keyed operator's load per key group in a batch: the rows it received, and the
    state it holds after the batch (bytes), by key group."""

    rows: dict[int, int] = field(default_factory=dict)
    state_bytes: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:  # JSON's keys are strings
        self.rows = {int(kg): int(n) for kg, n in self.rows.items()}
        self.state_bytes = {int(kg): int(n) for kg, n in self.state_bytes.items()}

    @classmethod
    def from_dict(cls, d: dict) -> KeyGroupLoad:
        """From ``{"rows": {kg: n}, "state_bytes": {kg: n}}``, or the older
        ``{kg: {"rows": n, "state_bytes": n}}``."""
        if set(d) <= {"rows", "state_bytes"} and all(isinstance(v, dict) for v in d.values()):
            return cls(dict(d.get("rows") or {}), dict(d.get("state_bytes") or {}))
        return cls(
            {kg: int(v.get("rows", 0)) for kg, v in d.items()},
            {kg: int(v.get("state_bytes", 0)) for kg, v in d.items()},
        )

    def groups(self) -> list[int]:
        """The key groups with rows or state, in order."""
        return sorted(set(self.rows) | set(self.state_bytes))

    @property
    def total_rows(self) -> int:
        return sum(self.rows.values())

    @property
    def total_state_bytes(self) -> int:
        return sum(self.state_bytes.values())


@dataclass
class Traffic(_Figures):
    """A keyed operator's input from the keyed operator before it (``upstream``), keyed
    differently, in a batch (``runtime.batch.traffic``): its rows, those whose two key groups the
    batch's Plan routes to the same partition index, and the rows per (upstream key group,
    key group) pair, heaviest first (``dropped_rows``: those of the lighter pairs left out)."""

    upstream: str = ""
    rows: int = 0
    local_rows: int = 0
    pairs: list[list[int]] = field(default_factory=list)  # [upstream key group, key group, rows]
    dropped_rows: int = 0

    @classmethod
    def from_dict(cls, d: dict) -> Traffic:
        return cls(**_known(cls, d))

    @property
    def collocation(self) -> float | None:
        """The share of the rows that stayed on their partition index (None without rows)."""
        return self.local_rows / self.rows if self.rows else None


def _coerce(cls: Any, value: Any) -> Any:
    """``value`` as a ``cls``: itself if it is one, else read from its dict form."""
    return value if isinstance(value, cls) else cls.from_dict(value)


def operators_of(value: dict) -> dict[str, OperatorProgress]:
    """Operator id -> progress, from typed parts or their dict forms; an older record's
    combine stage (``op.combine``, an operator of its own there) joins its operator."""
    out: dict[str, OperatorProgress] = {}
    combines: dict[str, Any] = {}
    for name, progress in value.items():
        if name.endswith(_OLD_COMBINE) and not isinstance(progress, OperatorProgress):
            combines[name[: -len(_OLD_COMBINE)]] = progress
        else:
            out[name] = _coerce(OperatorProgress, progress)
    for op_id, progress in combines.items():
        out.setdefault(op_id, OperatorProgress()).combine = _coerce(StageProgress, progress)
    return out


@dataclass
class BatchMetrics:
    batch_id: int
    plan_version: int
    started_at: float  # epoch seconds
    duration_s: float
    rows_in: int  # rows admitted from all sources
    rows_by_source: dict[str, int] = field(default_factory=dict)
    backlog: dict[str, int | None] = field(default_factory=dict)
    operators: dict[str, OperatorProgress] = field(default_factory=dict)
    sinks: dict[str, SinkProgress] = field(default_factory=dict)
    key_groups: dict[str, KeyGroupLoad] = field(default_factory=dict)  # keyed operator -> its load
    traffic: dict[str, Traffic] = field(default_factory=dict)  # keyed operator -> its traffic
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

    def __post_init__(self) -> None:
        """The parts may be given in their dict forms (as JSON has them): typed here."""
        self.operators = operators_of(self.operators or {})
        self.sinks = {s: _coerce(SinkProgress, v) for s, v in (self.sinks or {}).items()}
        self.key_groups = {op: _coerce(KeyGroupLoad, v) for op, v in (self.key_groups or {}).items()}
        self.traffic = {op: _coerce(Traffic, v) for op, v in (self.traffic or {}).items()}

    @classmethod
    def from_dict(cls, d: dict) -> BatchMetrics:
        """A record as ``to_json`` wrote it, or as older checkpoints did (see the module)."""
        return cls(**d)

    @property
    def latency_ms(self) -> dict[str, float]:
        """Worst sink's latency percentiles (p50, p95, p99) in milliseconds."""
        out: dict[str, float] = {}
        for sink in self.sinks.values():
            for p, v in (("p50", sink.latency_p50_ms), ("p95", sink.latency_p95_ms), ("p99", sink.latency_p99_ms)):
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
            by_batch[int(d["batch_id"])] = BatchMetrics.from_dict(d)
        except (KeyError, TypeError, ValueError, AttributeError):
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
