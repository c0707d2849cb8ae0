"""Predicting the sustainable input rate and the CPU and memory of any mapping (Sec. 8.5).

Given where every thread runs, the performance models say what each group of k threads of
task i on one slot sustains, I_i(k), and what it uses at that rate, C_i(k) and M_i(k). A group
that receives less than its peak uses proportionally less (the paper's own assumption, which it
notes over-estimates lightly loaded groups, Sec. 8.5.2). Thread counts beyond a model's measured
range hold the last measured value (the profiler stopped adding threads there because the rate
stopped rising).

How a task's input is split across its groups is the *routing*:

* ``"even"``: every thread gets the same share, 1 / q_i (Storm's shuffle grouping; Spark's
  round-robin repartition into equally sized partitions). A group of k threads gets k / q_i.
  The task is limited by its most loaded group.
* ``"capacity"``: shares proportional to each group's I_i(k) (the slot-aware routing the paper
  wishes Storm had, and what ``repartitionById`` can do on Spark). The task carries sum_s I_i(k_s).

How slots share time is the *execution*:

* ``"pipelined"`` (Storm, the paper): all groups run at once, so the rate is also limited by
  CPU: the predicted CPU of a VM (``cpu_scope="vm"``, Storm threads use any core of their VM) or
  of a slot (``cpu_scope="slot"``) cannot exceed its capacity.
* ``"staged"`` (a micro-batch engine such as Spark): a batch runs the tasks' stages one after
  another, each task using its own slots while its stage runs, so the time per input tuple adds
  up over tasks: 1 / Omega* = sum_i g_i / capacity_i, with g_i = omega_i / Omega.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from sluice.errors import PlanError
from sluice.models.performance import PerformanceModel
from sluice.plan.allocation import FIXED_ALLOCATION, Dag, task_rates
from sluice.plan.mapping import SlotId, SlotMapping, slot_name

Routing = Literal["even", "capacity"]
Execution = Literal["pipelined", "staged"]


@dataclass(frozen=True)
class Prediction:
    rate: float  # predicted sustainable DAG input rate Omega*
    bottleneck: str  # what limits it: a task id or a VM / slot name
    task_limits: dict[str, float]  # highest Omega each task alone would allow
    at_rate: float  # the rate the resource figures below are for
    slot_cpu: dict[str, float] = field(default_factory=dict)  # fraction of a slot
    slot_memory: dict[str, float] = field(default_factory=dict)
    vm_cpu: dict[str, float] = field(default_factory=dict)  # sum over the VM's slots (4 slots -> up to 4.0)
    vm_memory: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "rate": self.rate,
            "bottleneck": self.bottleneck,
            "task_limits": self.task_limits,
            "at_rate": self.at_rate,
            "vm_cpu": self.vm_cpu,
            "vm_memory": self.vm_memory,
            "slot_cpu": self.slot_cpu,
            "slot_memory": self.slot_memory,
        }


def predict(
    dag: Dag,
    mapping: SlotMapping,
    models: Mapping[str, PerformanceModel] | None = None,
    *,
    routing: Routing = "even",
    execution: Execution = "pipelined",
    cpu_scope: Literal["vm", "slot"] = "vm",
    at_rate: float | None = None,
) -> Prediction:
    """Predicted sustainable rate of ``dag`` mapped by ``mapping``, and the CPU and memory per
    slot and per VM at ``at_rate`` (default: at the predicted rate)."""
    if routing not in ("even", "capacity"):
        raise PlanError(f"routing must be 'even' or 'capacity', got {routing!r}")
    if execution not in ("pipelined", "staged"):
        raise PlanError(f"execution must be 'pipelined' or 'staged', got {execution!r}")
    models = dict(models) if models is not None else dag.models()
    gain = task_rates(dag, 1.0)  # g_i: omega_i per unit of Omega
    groups = _groups(mapping)  # task -> {slot: k}
    for tid in groups:
        if tid not in dag.by_id:
            raise PlanError(f"the mapping places threads of {tid!r}, which is not in DAG {dag.name!r}")

    # Share of task i's input each of its groups receives, and each group's capacity.
    share: dict[str, dict[SlotId, float]] = {}
    capacity: dict[str, dict[SlotId, float]] = {}
    for tid, per_slot in groups.items():
        if tid not in models:
            continue  # source / sink: fixed allocation, not rate-limited
        model = models[tid]
        capacity[tid] = {s: model.rate(k, beyond=True) for s, k in per_slot.items()}
        if routing == "even":
            total = sum(per_slot.values())
            share[tid] = {s: k / total for s, k in per_slot.items()}
        else:
            total_cap = sum(capacity[tid].values())
            share[tid] = {s: c / total_cap for s, c in capacity[tid].items()}

    # Highest Omega each task allows on its own.
    task_limits: dict[str, float] = {}
    for tid in capacity:
        if gain[tid] <= 0:
            task_limits[tid] = math.inf
            continue
        # the group that saturates first: omega_i x share_s = I(k_s)
        omega_i = min(capacity[tid][s] / share[tid][s] for s in capacity[tid])
        task_limits[tid] = omega_i / gain[tid]
    for tid, t in dag.by_id.items():
        if t.kind == "task" and tid not in groups:
            raise PlanError(f"the mapping places no thread of task {tid!r}")

    if execution == "staged":
        seconds_per_tuple = sum(1.0 / lim for lim in task_limits.values() if lim > 0 and math.isfinite(lim))
        rate = 1.0 / seconds_per_tuple if seconds_per_tuple > 0 else math.inf
        bottleneck = min(task_limits, key=lambda t: task_limits[t]) if task_limits else ""
    else:
        rate, bottleneck = min(((v, k) for k, v in task_limits.items()), default=(math.inf, ""))

    # Resource use, linear in Omega: usage(Omega) = fixed + per_unit x Omega on every slot.
    fixed = {s: [0.0, 0.0] for s in mapping.cluster.slots}
    per_unit = {s: [0.0, 0.0] for s in mapping.cluster.slots}
    for tid, per_slot in groups.items():
        kind = dag.by_id[tid].kind
        if tid not in models:
            _threads, cpu, mem = FIXED_ALLOCATION.get(kind, (1, 0.0, 0.0))
            total = sum(per_slot.values())
            for s, k in per_slot.items():
                fixed[s][0] += cpu * k / total
                fixed[s][1] += mem * k / total
            continue
        model = models[tid]
        for s, k in per_slot.items():
            # load on this group per unit Omega, over its peak rate, scales C(k) and M(k)
            frac = gain[tid] * share[tid][s] / capacity[tid][s]
            per_unit[s][0] += model.cpu(k, beyond=True) * frac
            per_unit[s][1] += model.memory(k, beyond=True) * frac

    if execution == "pipelined":
        # CPU cannot exceed what the VM (or slot) has: a further limit on Omega.
        scopes: dict[str, list[SlotId]] = {}
        for s in mapping.cluster.slots:
            key = f"vm{s[0] + 1}" if cpu_scope == "vm" else slot_name(s)
            scopes.setdefault(key, []).append(s)
        for key, members in scopes.items():
            cap = float(len(members))
            f = sum(fixed[s][0] for s in members)
            u = sum(per_unit[s][0] for s in members)
            if u > 0:
                limit = max(cap - f, 0.0) / u
                if limit < rate:
                    rate, bottleneck = limit, f"CPU of {key}"

    at = rate if at_rate is None else at_rate
    at_eff = at if math.isfinite(at) else 0.0
    slot_cpu = {slot_name(s): fixed[s][0] + per_unit[s][0] * at_eff for s in mapping.cluster.slots}
    slot_mem = {slot_name(s): fixed[s][1] + per_unit[s][1] * at_eff for s in mapping.cluster.slots}
    vm_cpu: dict[str, float] = {}
    vm_mem: dict[str, float] = {}
    for s in mapping.cluster.slots:
        key = f"vm{s[0] + 1}"
        vm_cpu[key] = vm_cpu.get(key, 0.0) + slot_cpu[slot_name(s)]
        vm_mem[key] = vm_mem.get(key, 0.0) + slot_mem[slot_name(s)]
    return Prediction(rate, bottleneck, task_limits, at, slot_cpu, slot_mem, vm_cpu, vm_mem)


def _groups(mapping: SlotMapping) -> dict[str, dict[SlotId, int]]:
    out: dict[str, dict[SlotId, int]] = {}
    for (tid, _), slot in mapping.assignment.items():
        per = out.setdefault(tid, {})
        per[slot] = per.get(slot, 0) + 1
    return out
