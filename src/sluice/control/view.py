"""What a policy sees: a read-only :class:`ControlView` of the running job.

It holds the recent batches' metrics (``history``, oldest first), the Plan in force, the
job graph, the constraints with their window status (``status``, from the QoS manager), the
admission limits in force and the resources. Helpers derive what policies commonly need:
the offered input rate, each operator's CPU use, the Plan's chains. Pure: no Spark, so the
simulator can build views and drive the very same policies.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sluice.core.resources import Resources
from sluice.graph.alternates import alternates_of
from sluice.graph.constraints import LatencyConstraint

if TYPE_CHECKING:
    from sluice.control.qos import ConstraintStatus
    from sluice.graph import JobGraph
    from sluice.plan.physical import Plan


@dataclass(frozen=True)
class ControlView:
    """What a policy sees after a batch (read-only): the job graph, the plan in force, each
    constraint's status, recent batches' metrics (``history``), the admission in force and
    the resources; helpers such as ``offered_rate()`` and ``backlog()`` derive the rest."""

    batch_id: int  # the batch just finished; actions apply from batch_id + 1
    graph: JobGraph
    plan: Plan
    constraints: tuple[LatencyConstraint, ...]
    status: dict[str, ConstraintStatus]
    history: tuple = ()  # BatchMetrics of recent batches, oldest first, the last is batch_id's
    admission: dict[str, int | None] = field(default_factory=dict)  # source -> rows per batch (None: no cap)
    resources: Resources = Resources()

    @property
    def latest(self):
        return self.history[-1] if self.history else None

    def batches(self, last: int | None = None) -> list:
        """The recent batches that admitted rows (replays skipped), at most ``last`` of them."""
        useful = [m for m in self.history if m.rows_in > 0 and not m.skipped]
        return useful if last is None else useful[-last:]

    @property
    def admission_total(self) -> int | None:
        """The job's rows per batch in force (None if any source is uncapped)."""
        caps = list(self.admission.values()) if self.admission else []
        if not caps or any(v is None for v in caps):
            return None
        return sum(v for v in caps if v is not None)

    @property
    def chains(self) -> tuple[tuple[str, ...], ...]:
        return self.plan.chains

    def alternates(self, op_id: str) -> dict:
        """The alternates of an operator (name -> ``sluice.Alt``); empty when it has none."""
        return alternates_of(self.graph[op_id]) if op_id in self.graph else {}

    def active_alternate(self, op_id: str) -> str | None:
        """The alternate of ``op_id`` the Plan in force runs."""
        return self.plan.alternates.get(op_id)

    def alternate_cost(self, op_id: str, alternate: str) -> float | None:
        """Seconds of task time per input row of one alternate: measured, the mean over the
        batches in the view it ran in (``BatchMetrics.dynamics``); else its declared cost
        (``Alt.cost``) scaled by how the measured costs of the operator's other alternates
        compare with theirs declared (task time carries overheads a profile does not see);
        else as declared; else None."""
        measured = self._measured_costs(op_id)
        if alternate in measured:
            return measured[alternate]
        alts = self.alternates(op_id)
        declared = alts[alternate].cost if alternate in alts else None
        if declared is None:
            return None
        scales = [cost / alts[name].cost for name, cost in measured.items() if alts[name].cost]
        return declared * (sum(scales) / len(scales)) if scales else declared

    def _measured_costs(self, op_id: str) -> dict[str, float]:
        rows: dict[str, float] = {}
        seconds: dict[str, float] = {}
        for m in self.batches():
            entry = ((m.dynamics or {}).get("alternates") or {}).get(op_id) or {}
            name = entry.get("alternate")
            if name is not None and entry.get("cost") is not None:
                n = float(m.operators[op_id].rows_in) if op_id in m.operators else 0.0
                rows[name] = rows.get(name, 0.0) + n
                seconds[name] = seconds.get(name, 0.0) + float(entry["cost"]) * n
        return {name: seconds[name] / n for name, n in rows.items() if n > 0}

    def offered_rate(self, last: int = 4, before: int = 0) -> float | None:
        """Rows per second arriving at the sources over the last batches (ending ``before``
        batches ago), or None when a source reports no backlog (it could produce any number of
        rows at once: pull mode).

        Arrivals between two batches' ends (when each batch's metrics read the backlog) =
        rows the later one admitted + growth of the backlog."""
        batches = [m for m in self.history if not m.skipped]
        batches = batches[: len(batches) - before][-(last + 1) :]
        if len(batches) < 2:
            return None
        arrived, seconds = 0, 0.0
        for prev, cur in itertools.pairwise(batches):
            if (
                not cur.backlog
                or any(v is None for v in cur.backlog.values())
                or not prev.backlog
                or any(v is None for v in prev.backlog.values())
            ):
                return None
            arrived += cur.rows_in + sum(cur.backlog.values()) - sum(prev.backlog.values())
            seconds += (cur.started_at + cur.duration_s) - (prev.started_at + prev.duration_s)
        return max(arrived, 0) / seconds if seconds > 0 else None

    def backlog(self) -> int | None:
        latest = self.latest
        if latest is None or not latest.backlog or any(v is None for v in latest.backlog.values()):
            return None
        return int(sum(latest.backlog.values()))

    def operator_cpu(self, op_id: str, last: int = 10) -> float:
        """Cores the operator kept busy over the last batches: its task time (summed over
        tasks, all its stages) per second of batch. Nephele chains tasks only while their
        summed CPU stays under one core (section 3.5.2)."""
        busy, wall = 0.0, 0.0
        for m in self.batches(last):
            wall += m.duration_s
            if op_id in m.operators:
                busy += m.operators[op_id].busy_s
        return busy / wall if wall > 0 else 0.0

    def source_shares(self, last: int = 10) -> dict[str, float]:
        """Each source's share of the input offered recently: rows admitted plus rows
        waiting now (so a source held back by a small cap still gets its share; equal
        shares before anything was measured)."""
        totals: dict[str, float] = dict.fromkeys(self.admission, 0.0)
        for m in self.batches(last):
            for source, rows in m.rows_by_source.items():
                totals[source] = totals.get(source, 0.0) + rows
        latest = self.latest
        for source, waiting in (latest.backlog or {}).items() if latest is not None else ():
            if waiting and source in totals:
                totals[source] += waiting
        whole = sum(totals.values())
        if whole <= 0:
            return {s: 1 / len(totals) for s in totals} if totals else {}
        return {s: v / whole for s, v in totals.items()}
