"""A job as its checkpoint shows it: the per-batch metrics, the controller's decisions and the
current plan, read incrementally and tolerantly.

The files are written by other parts of Sluice while we read them, and each of them grows
new fields over time, so nothing here insists on a field: a record is a plain dict, a field
that is absent is shown as absent, and a line still being written is read on the next poll.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow.fs as pafs

from sluice.core.decisions import Decision, Escalation, LoggedAction, LogRecord, Measured, OtherRecord, Rejected, parse_record
from sluice.core.metrics import KeyGroupLoad, OperatorProgress, SinkProgress, operators_of
from sluice.credentials import redact
from sluice.runtime.files import filesystem
from sluice.runtime.planlog import PlanLog
from sluice.runtime.retention import read_summary

PERCENTILES = ("p50", "p95", "p99")


class JsonLinesFollower:
    """Reads the complete lines appended to a JSON-lines file since the last call."""

    def __init__(self, fs: pafs.FileSystem, path: str):
        self.fs, self.path = fs, path
        self.offset = 0
        self.skipped = 0  # lines that were not JSON objects (reported, never fatal)

    def new_records(self) -> list[dict]:
        try:
            with self.fs.open_input_file(self.path) as f:
                size = f.size()
                if size < self.offset:  # the file was replaced: start again
                    self.offset = 0
                f.seek(self.offset)
                data = f.read(size - self.offset)
        except (FileNotFoundError, OSError):
            return []
        end = data.rfind(b"\n") + 1  # a last line without its newline is still being written
        self.offset += end
        out = []
        for line in data[:end].splitlines():
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                self.skipped += 1
                continue
            if isinstance(record, dict):
                out.append(record)
            else:
                self.skipped += 1
        return out


def operators(m: dict) -> dict[str, OperatorProgress]:
    """The record's operators, typed (as the record is written now, or as older ones were)."""
    value = m.get("operators")
    return operators_of({op: v for op, v in value.items() if isinstance(v, dict)}) if isinstance(value, dict) else {}


def sinks(m: dict) -> dict[str, SinkProgress]:
    value = m.get("sinks")
    return {s: SinkProgress.from_dict(v) for s, v in value.items() if isinstance(v, dict)} if isinstance(value, dict) else {}


def key_groups(m: dict) -> dict[str, KeyGroupLoad]:
    value = m.get("key_groups")
    return {op: KeyGroupLoad.from_dict(v) for op, v in value.items() if isinstance(v, dict)} if isinstance(value, dict) else {}


def late_records(m: dict) -> int:
    """Late records of one batch: the runtime's own count if it reports one, else the window
    operators' ``late_seen``."""
    for name in ("late_records", "late"):
        if isinstance(m.get(name), (int, float)):
            return int(m[name])
    return int(sum(op.counters.get("late_seen", 0) or 0 for op in operators(m).values()))


def sink_latencies(m: dict) -> dict[str, dict[str, float]]:
    """sink -> {p50, p95, p99} in ms, for sinks that measured latency this batch."""
    out = {}
    for sink, progress in sinks(m).items():
        lat = {p: getattr(progress, f"latency_{p}_ms") for p in PERCENTILES if getattr(progress, f"latency_{p}_ms") is not None}
        if lat:
            out[sink] = lat
    return out


def action_text(action) -> str:
    """``admission * -> 4000`` for the controller's action dicts, the text itself otherwise."""
    logged = LoggedAction.parse(action)
    return "" if logged is None else logged.text()


@dataclass
class DecisionRow:
    """One row of the decisions table (the dashboard's, ``sluice status``'s)."""

    type: str
    batch_id: int | None
    policy: str
    action: str
    reason: str
    expected: Any = None
    measured: Any = None

    def to_dict(self) -> dict:
        return asdict(self)


def decision_rows(records: list[LogRecord]) -> list[DecisionRow]:
    """The records of ``decisions.jsonl`` as rows to show, oldest first: each decision with
    its reason, expected effect and (once a batch ran with it) measured effect; escalations
    as rows of their own. Records of other types show their action and reason, if any."""
    rows: list[DecisionRow] = []
    by_id: dict[int, DecisionRow] = {}
    for r in records:
        if isinstance(r, Measured):
            row = by_id.get(r.decision) if r.decision is not None else None
            if row is not None:
                row.measured = dict(r.measured) or None
            continue
        if isinstance(r, Escalation):
            row = DecisionRow(
                type=r.type,
                batch_id=r.batch_id,
                policy=r.policy or "escalation",
                action=f"escalation {r.state}: {r.constraint}".strip(),
                reason=r.reason,
                expected=r.details,
            )
        else:
            action = r.action if isinstance(r, (Decision, Rejected)) else LoggedAction.parse(r.raw.get("action"))
            reason = r.reason or (action.reason if action is not None else "")
            row = DecisionRow(
                type=r.kind if isinstance(r, OtherRecord) else r.type,
                batch_id=r.batch_id,
                policy=r.policy,
                action="" if action is None else action.text(),
                reason=reason,
                expected=r.expected if isinstance(r, Decision) else (None if action is None else action.expected),
            )
        rows.append(row)
        if isinstance(r, Decision) and r.id is not None:
            by_id[r.id] = row
    return rows


def constraints_of(record: dict) -> dict[str, dict]:
    """Constraints a metrics or decision record reports, as name -> {bound_ms, value_ms, holds}.

    Accepts a dict by name or a list of dicts with a ``name``; a bound may be called
    ``bound_ms`` or ``bound``, the measured value ``mean_ms``, ``value_ms`` or ``value``;
    whether it holds ``holds``, ``met`` or ``state`` ("met" / "violated").
    """
    raw = record.get("constraints")
    if isinstance(raw, list):
        raw = {str(c.get("name", i)): c for i, c in enumerate(raw) if isinstance(c, dict)}
    if not isinstance(raw, dict):
        return {}
    out = {}
    for name, c in raw.items():
        if not isinstance(c, dict):
            continue
        bound = _first_number(c, "bound_ms", "bound")
        value = _first_number(c, "mean_ms", "value_ms", "measured_ms", "value", "mean")
        holds = c.get("holds", c.get("met"))
        if holds is None and c.get("state") in ("met", "violated"):
            holds = c["state"] == "met"
        out[str(name)] = {
            "bound_ms": bound,
            "value_ms": value,
            "holds": holds,
            "state": c.get("state"),
            "p95_bound_ms": _first_number(c, "p95_bound_ms"),
            "path": c.get("path"),
        }
    return out


def _first_number(d: dict, *names: str) -> float | None:
    for n in names:
        if isinstance(d.get(n), (int, float)):
            return float(d[n])
    return None


def recorded_pipeline_name(checkpoint: str) -> str | None:
    """The pipeline's name in ``<checkpoint>/pipeline.json`` (None without one)."""
    fs, base = filesystem(checkpoint)
    try:
        with fs.open_input_file(posixpath.join(base, "pipeline.json")) as f:
            name = json.loads(f.read()).get("pipeline")
    except (OSError, ValueError, AttributeError):
        return None
    return name if isinstance(name, str) and name else None


FAR_FUTURE_US = 10**17  # a watermark past this is the end of input's "end of time", no event time


def event_lag_s(m: dict) -> float | None:
    """How far the watermark is behind the batch's start (processing time), in seconds:
    None without event time (or at the end of input, whose watermark is the end of time)."""
    wm, started = m.get("watermark"), m.get("started_at")
    if not isinstance(wm, (int, float)) or not isinstance(started, (int, float)) or not 0 < wm < FAR_FUTURE_US:
        return None
    return round(max(float(started) - wm / 1e6, 0.0), 3)


def dead_letters_by_operator(m: dict) -> dict[str, int]:
    """Dead letters of the batch per operator that sent them; those no operator counted (a
    source that could not parse a record) under ``"sources"``."""
    out = {
        op: int(progress.counters.get("dead_letters") or 0)
        for op, progress in operators(m).items()
        if progress.counters.get("dead_letters")
    }
    rest = int(m.get("dead_letters") or 0) - sum(out.values())
    if rest > 0:
        out["sources"] = rest
    return out


def batch_point(m: dict, previous_start: float | None) -> dict:
    """One batch as the dashboard plots it (small: the page keeps hundreds of them)."""
    started = float(m.get("started_at") or 0.0)
    duration = float(m.get("duration_s") or 0.0)
    rows = int(m.get("rows_in") or 0)
    # rows/s over the time since the previous batch started (the batch plus the wait before it)
    span = started - previous_start if previous_start is not None and started > previous_start else duration
    backlog = {k: v for k, v in (m.get("backlog") or {}).items() if isinstance(v, (int, float))}
    by_operator = operators(m)
    # an operator's time in all its stages (its map-side combine's too)
    times = {op: round(float(sum(stage.time_s for stage in progress.stages())), 4) for op, progress in by_operator.items()}
    rows_by_group, state_bytes = {}, {}
    for op, load in key_groups(m).items():
        state_bytes[op] = load.total_state_bytes
        groups = load.groups()
        if groups:
            rows_by_kg = [0] * (max(groups) + 1)
            for kg, n in load.rows.items():
                rows_by_kg[kg] = int(n)
            rows_by_group[op] = rows_by_kg
    return {
        "batch_id": m.get("batch_id"),
        "t": started,
        "duration_s": duration,
        "rows_in": rows,
        "rows_per_s": rows / span if span > 0 else 0.0,
        "rows_by_source": m.get("rows_by_source") or {},
        "backlog": backlog,
        "latency": sink_latencies(m),
        "operators": times,
        "operator_rows": {op: int(progress.rows_out or 0) for op, progress in by_operator.items()},
        "sink_rows": {sink: int(progress.rows or 0) for sink, progress in sinks(m).items()},
        "key_groups": rows_by_group,
        "state_bytes": state_bytes,
        "dead_letters": int(m.get("dead_letters") or 0),
        "dead_letters_by_operator": dead_letters_by_operator(m),
        "late": late_records(m),
        # each latency constraint's path: mean latency of the records on it this batch
        "paths": {
            name: p["mean_ms"]
            for name, p in (m.get("paths") or {}).items()
            if isinstance(p, dict) and isinstance(p.get("mean_ms"), (int, float))
        },
        "executors": m.get("executors"),
        "plan_version": m.get("plan_version"),
        "watermark": m.get("watermark"),
        "event_lag_s": event_lag_s(m),
        "skipped": bool(m.get("skipped")),
    }


MAX_BATCHES = 5000
"""Batches a view keeps in memory (the page shows at most 600; the totals keep counting)."""
MAX_RECORDS = 5000
"""Lines of ``decisions.jsonl`` a view keeps in memory."""


@dataclass
class JobView:
    """The checkpoint of one job, followed as it grows."""

    checkpoint: str
    # constraints known up front (the pipeline's, when the job is served by `sluice run --ui`)
    declared: list[dict] = field(default_factory=list)
    batches: list[dict] = field(default_factory=list)  # batch_point()s, one per batch id
    raw_latest: dict | None = None  # the latest metrics record as written
    records: list[LogRecord] = field(default_factory=list)  # decisions.jsonl, typed

    @property
    def decisions(self) -> list[DecisionRow]:
        return decision_rows(self.records)

    def __post_init__(self) -> None:
        self.fs, self.base = filesystem(self.checkpoint)
        self._metrics = JsonLinesFollower(self.fs, posixpath.join(self.base, "metrics.jsonl"))
        self._decisions = JsonLinesFollower(self.fs, posixpath.join(self.base, "decisions.jsonl"))
        self._index: dict[int, int] = {}  # batch id -> position in self.batches
        # batches let go of to keep memory bounded: (batch id, t, rows, dead letters, late), for the totals
        self._evicted: list[tuple[int, float, int, int, int]] = []

    def refresh(self) -> None:
        evicted_through = self._evicted[-1][0] if self._evicted else -1
        for m in self._metrics.new_records():
            if not isinstance(m.get("batch_id"), int) or m["batch_id"] <= evicted_through:
                continue  # (the second: a log rewritten by retention, read again)
            previous = self.batches[-1]["t"] if self.batches else None
            point = batch_point(m, previous)
            if m["batch_id"] in self._index:  # a replayed batch: its latest record wins
                self.batches[self._index[m["batch_id"]]] = point
            else:
                self._index[m["batch_id"]] = len(self.batches)
                self.batches.append(point)
            self.raw_latest = m
        if len(self.batches) > MAX_BATCHES:
            self._evict(len(self.batches) - MAX_BATCHES)
        self.records.extend(parse_record(r) for r in self._decisions.new_records())
        if len(self.records) > MAX_RECORDS:
            del self.records[: len(self.records) - MAX_RECORDS]

    def _evict(self, n: int) -> None:
        """Let go of the ``n`` oldest batches' points, keeping what the totals need."""
        self._evicted.extend(
            (b["batch_id"], b["t"], b["rows_in"], b["dead_letters"], b["late"]) for b in self.batches[:n] if not b["skipped"]
        )
        del self.batches[:n]
        self._index = {b["batch_id"]: i for i, b in enumerate(self.batches)}

    def constraints(self) -> dict[str, dict]:
        """Each constraint's bound and latest state: the declared bounds, updated by the latest
        record (metrics, else a decision) that reports constraints."""
        out = constraints_of({"constraints": self.declared})
        decided = ({"constraints": r.constraints} for r in reversed(self.records) if isinstance(r, Decision))
        reported = [self.raw_latest or {}, *decided]
        latest = next((constraints_of(r) for r in reported if constraints_of(r)), {})
        for name, c in latest.items():
            out[name] = {**out.get(name, c), **{k: v for k, v in c.items() if v is not None}}
        return out

    def event_time(self) -> dict:
        """The job's watermark and each event-time source's latest event time, from the
        latest committed batch's record: {"watermark_us", "lag_s", "sources": {source:
        {"max_event_us", "lag_s"}}} (lags against the batch's start; empty without event time).
        Sluice keeps one watermark for the job (the least over its event-time sources), so
        it is every stateful operator's."""
        done = [b for b in self.batches if not b["skipped"]]
        if not done:
            return {}
        last = done[-1]
        try:
            with self.fs.open_input_file(posixpath.join(self.base, "batches", f"{int(last['batch_id']):09d}.done.json")) as f:
                record = json.loads(f.read())
        except (OSError, ValueError, TypeError):
            record = {}
        started = float(last["t"])
        sources = {}
        for name, us in (record.get("max_event_us_so_far") or {}).items():
            if isinstance(us, (int, float)) and 0 < us < FAR_FUTURE_US:
                sources[str(name)] = {"max_event_us": int(us), "lag_s": round(max(started - us / 1e6, 0.0), 3)}
        wm = last.get("watermark")
        ended = isinstance(wm, (int, float)) and wm >= FAR_FUTURE_US  # the end-of-input batch's end of time
        if not sources and not ended and not (isinstance(wm, (int, float)) and 0 < wm < FAR_FUTURE_US):
            return {}
        return {
            "watermark_us": wm if isinstance(wm, (int, float)) and 0 < wm < FAR_FUTURE_US else None,
            "lag_s": last.get("event_lag_s"),
            "sources": sources,
            "ended": ended,
        }

    def stateful_operators(self) -> list[str]:
        """The stateful operators the checkpoint records (``pipeline.json``), else those
        whose state size the batches report."""
        try:
            with self.fs.open_input_file(posixpath.join(self.base, "pipeline.json")) as f:
                return sorted(json.loads(f.read()).get("operators") or {})
        except (OSError, ValueError, AttributeError):
            return sorted({op for b in self.batches for op in b["state_bytes"]})

    def plan(self) -> dict | None:
        """The current plan's shape: partitions and key groups per partition of each keyed stage."""
        try:
            plan = PlanLog(self.checkpoint).latest()
        except (OSError, ValueError, KeyError):
            return None
        if plan is None:
            return None
        keyed = {}
        for op, stage in plan.keyed.items():
            counts = [0] * stage.partitions
            for p in stage.routing:
                counts[p] += 1
            keyed[op] = {"partitions": stage.partitions, "key_groups_per_partition": counts}
        return {
            "version": plan.version,
            "max_parallelism": plan.max_parallelism,
            "keyed": keyed,
            "chains": [list(c) for c in plan.chains],
        }

    def totals(self) -> dict:
        """The whole run's totals: the batches in memory, those let go of, and those the
        checkpoint's retention pruned (``metrics.summary.json``)."""
        done = [b for b in self.batches if not b["skipped"]]
        try:
            pruned = read_summary(self.checkpoint)
        except (OSError, ValueError):
            pruned = {}
        through = pruned.get("through_batch")
        evicted = [e for e in self._evicted if through is None or e[0] > through]
        firsts = [
            t
            for t in (pruned.get("first_started_at"), evicted[0][1] if evicted else None, done[0]["t"] if done else None)
            if t is not None
        ]
        return {
            "batches": len(done) + len(evicted) + int(pruned.get("batches") or 0),
            "rows": sum(b["rows_in"] for b in done) + sum(e[2] for e in evicted) + int(pruned.get("rows_in") or 0),
            "dead_letters": sum(b["dead_letters"] for b in done)
            + sum(e[3] for e in evicted)
            + int(pruned.get("dead_letters") or 0),
            "late": sum(b["late"] for b in done) + sum(e[4] for e in evicted) + int(pruned.get("late_records") or 0),
            "first_t": min(firsts) if firsts else None,
            "last_t": done[-1]["t"] + done[-1]["duration_s"] if done else None,
        }

    def state(self, since: int = -1, max_batches: int = 600, max_decisions: int = 200) -> dict:
        """What the page asks for every second: batches after ``since`` and the rest whole."""
        self.refresh()
        new = [b for b in self.batches if (b["batch_id"] or 0) > since][-max_batches:]
        latest = self.raw_latest or {}
        return {
            "checkpoint": redact(self.checkpoint),
            "batches": new,
            "decisions": [d.to_dict() for d in self.decisions[-max_decisions:]],
            "constraints": self.constraints(),
            "plan": self.plan(),
            "executors": latest.get("executors"),
            "totals": self.totals(),
            "event_time": self.event_time(),
            "stateful_operators": self.stateful_operators(),
        }
