"""Actuators: how an accepted action takes effect, always at a batch boundary.

- Admission (rows per batch) goes to the sources' admission files
  (``runtime.sources.control.set_max_rows``); the reader re-reads its file each time it plans
  a batch, and Spark logs the planned offsets, so a replayed batch admits exactly what it
  did before, whatever the file says now.
- Chains, threads, partitions, routing, the active alternate of an operator and the
  executors held make the next Plan (``plan_change``), which the executor
  writes to the plan log for ``batch_id + 1``; a replayed batch uses the plan it ran with.
- The trigger interval of a running query cannot change: Spark fixes a query's trigger when
  it starts. A constrained job runs with trigger 0 (the next batch starts as soon as the
  last one ends), so the time a record waits at the source is set by the batch size alone,
  and admission is the one buffer knob; a different interval needs a restart
  (``sluice run --trigger-interval``), which the checkpoint survives.

``MemoryAdmission`` keeps the limits in memory, for the simulator and pure tests.
"""

from __future__ import annotations

import math

from sluice.control.actions import ALL_SOURCES, Action, Admission
from sluice.core.admission import get_max_rows, set_max_rows
from sluice.plan.physical import Plan


class MemoryAdmission:
    """Admission limits held in memory: ``limits[source]`` rows per batch (None: no cap)."""

    def __init__(self, sources: list[str], limits: dict[str, int | None] | None = None):
        self.limits: dict[str, int | None] = dict.fromkeys(sources)
        self.limits.update(limits or {})

    def current(self) -> dict[str, int | None]:
        return dict(self.limits)

    def set(self, source: str, rows: int) -> None:
        self.limits[source] = rows


class SourceAdmission(MemoryAdmission):
    """Admission limits in the sources' ``<name>.admission.json`` files under ``control_dir``."""

    def __init__(self, control_dir: str, sources: list[str]):
        self.control_dir = control_dir
        super().__init__(sources, {s: get_max_rows(control_dir, s) for s in sources})

    def set(self, source: str, rows: int) -> None:
        set_max_rows(self.control_dir, source, rows)
        super().set(source, rows)


def apply_admission(admission: MemoryAdmission, action: Admission, shares: dict[str, float]) -> dict[str, int]:
    """Set the limits an admission action asks for; returns what was set per source.

    Target ``*`` is the whole job's batch: each source gets its share of the input (at
    least one row, so none is starved)."""
    rows = int(action.rows)
    if action.target != ALL_SOURCES:
        admission.set(action.target, max(1, rows))
        return {action.target: max(1, rows)}
    out = {}
    for source in admission.current():
        out[source] = max(1, math.ceil(rows * shares.get(source, 1 / len(admission.current()))))
        admission.set(source, out[source])
    return out


def plan_change(plan: Plan, action: Action, version: int) -> Plan:
    """The Plan from ``version`` on with a structural action applied (``Action.apply``:
    each action class knows how it changes the Plan)."""
    return action.apply(plan, version)
