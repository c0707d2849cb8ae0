"""Resource acquisition and mapping of task threads to slots (Shukla and Simmhan, Sec. 7).

* :func:`acquire_vms` (Sec. 7.1): as many VMs of the largest class as fit in rho, then the
  smallest class that covers the remaining slots.
* :func:`map_dsm` is Algorithm 4 (Default Storm Mapping): round robin over the slot list.
* :func:`map_rsm` is Algorithm 5 (R-Storm Mapping): BFS sweeps mapping one thread per task to the
  VM nearest by R-Storm's distance that has the CPU (per VM) and, in one of its slots, the
  memory (per slot) for one thread.
* :func:`map_sam` is Algorithm 6 (Slot Aware Mapping): BFS sweeps mapping a full bundle of
  tau_hat threads to an empty slot, or the last partial bundle to the best-fit slot.
* :func:`plan_mapping`: the add-a-slot retry of Sec. 8.4 ("we incrementally increase the
  number of slots by 1 until the mapping is successful").

A slot is (vm index, slot index), both 0-based; it prints as ``s<vm>.<slot>`` 1-based, the
paper's s_j^l. A thread is (task id, k) with k = 1..tau_i, the paper's r_i^k.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from sluice.errors import PlanError
from sluice.models.performance import PerformanceModel
from sluice.plan.allocation import Allocation, Dag

SlotId = tuple[int, int]
ThreadId = tuple[str, int]

# The paper's Azure D-series classes used in Sec. 8.2: D3 = 4 slots, D2 = 2, D1 = 1.
DEFAULT_VM_CLASSES: tuple[int, ...] = (4, 2, 1)

_EPS = 1e-9


class _NeverFits(PlanError):
    """A thread or bundle needs more than one whole slot: adding slots cannot help."""


def slot_name(slot: SlotId) -> str:
    return f"s{slot[0] + 1}.{slot[1] + 1}"


@dataclass(frozen=True)
class Cluster:
    """VMs V with p_j identical slots each (one core and its share of memory per slot)."""

    vm_slots: tuple[int, ...]
    racks: tuple[int, ...] | None = None  # rack of each VM, for RSM's network distance

    def __post_init__(self) -> None:
        if not self.vm_slots or any(p < 1 for p in self.vm_slots):
            raise PlanError(f"a cluster needs VMs with at least one slot, got {self.vm_slots}")

    @property
    def slots(self) -> list[SlotId]:
        """All slots, VM by VM: the list order DSM and SAM walk."""
        return [(j, slot) for j, p in enumerate(self.vm_slots) for slot in range(p)]

    @property
    def total_slots(self) -> int:
        return sum(self.vm_slots)

    def rack(self, vm: int) -> int:
        return self.racks[vm] if self.racks else 0


def acquire_vms(rho: int, classes: Sequence[int] = DEFAULT_VM_CLASSES) -> Cluster:
    """Sec. 7.1: n VMs of the largest class p_hat with n x p_hat <= rho, then the smallest
    class with at least rho - n x p_hat slots (which may add a few unused slots)."""
    if rho < 1:
        raise PlanError(f"cannot acquire VMs for {rho} slots")
    sizes = sorted(set(classes), reverse=True)
    if not sizes or sizes[-1] < 1:
        raise PlanError(f"VM classes must have >= 1 slot, got {classes}")
    p_hat = sizes[0]
    n, rest = divmod(rho, p_hat)
    vms = [p_hat] * n
    if rest:
        vms.append(min(p for p in sizes if p >= rest))
    return Cluster(tuple(vms))


@dataclass
class SlotMapping:
    """The mapping function M: R -> S, with the cluster it maps onto."""

    method: str
    cluster: Cluster
    assignment: dict[ThreadId, SlotId] = field(default_factory=dict)

    def threads_per_slot(self) -> dict[SlotId, dict[str, int]]:
        """For each used slot, how many threads of each task it holds (in mapping order)."""
        out: dict[SlotId, dict[str, int]] = {}
        for (task, _), slot in self.assignment.items():
            per = out.setdefault(slot, {})
            per[task] = per.get(task, 0) + 1
        return dict(sorted(out.items()))

    def slots_of(self, task: str) -> dict[SlotId, int]:
        """Thread count of ``task`` on each slot it uses."""
        return {s: per[task] for s, per in self.threads_per_slot().items() if task in per}

    @property
    def used_slots(self) -> int:
        return len(set(self.assignment.values()))

    def describe(self) -> dict[str, dict[str, int]]:
        return {slot_name(s): per for s, per in self.threads_per_slot().items()}


def _threads(allocation: Allocation, order: Sequence[str]) -> list[ThreadId]:
    return [(tid, k) for tid in order for k in range(1, allocation.tasks[tid].threads + 1)]


# ---- Algorithm 4: DSM ----------------------------------------------------------------------------


def map_dsm(dag: Dag, allocation: Allocation, cluster: Cluster, models: object = None) -> SlotMapping:
    """Round robin: the n-th thread goes to slot (n - 1) mod |S|.

    Threads are listed task by task (B1..B5, O1..O4, ...) and slots VM by VM (s1.1, s1.2, s2.1,
    ...), the "arbitrary" orders of the paper's Fig. 4 example. (Alg. 4 writes m = n mod |S|
    with n starting at 1; the example starts at the first slot, so we index from 0.)
    """
    slots = cluster.slots
    mapping = SlotMapping("DSM", cluster)
    for n, thread in enumerate(_threads(allocation, list(allocation.tasks))):
        mapping.assignment[thread] = slots[n % len(slots)]
    return mapping


# ---- Algorithm 5: RSM ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RsmWeights:
    """R-Storm's distance weights w_M, w_C, w_N and network multipliers (Sec. 7.3)."""

    memory: float = 1.0
    cpu: float = 1.0
    network: float = 1.0
    same_vm: float = 0.0
    same_rack: float = 0.5
    other_rack: float = 1.0


def map_rsm(
    dag: Dag,
    allocation: Allocation,
    cluster: Cluster,
    models: Mapping[str, PerformanceModel] | None = None,
    weights: RsmWeights = RsmWeights(),
) -> SlotMapping:
    """Algorithm 5. CPU is checked per VM (Storm lets a worker's threads use every core of its
    VM) and memory per slot (a worker's heap is bound to its slot), as the paper describes.

    A thread of task i needs c_bar_i = C_i(1), m_bar_i = M_i(1) (sources and sinks: their fixed
    allocation). VMs are tried in ascending distance
        d = w_M (M_j - m_bar)^2 + w_C (C_j - c_bar)^2 + w_N NWDist(v_hat, v_j)
    from the reference VM v_hat (the VM of the last mapped thread); inside the chosen VM the
    thread goes to the first slot with enough memory.
    """
    models = dict(models) if models is not None else dag.models()
    order = [t for t in dag.topological_order() if t in allocation.tasks]
    need: dict[str, tuple[float, float]] = {}
    for tid in order:
        if tid in models:
            need[tid] = (models[tid].single_thread_cpu, models[tid].single_thread_memory)
        else:  # source / sink: fixed per-thread allocation
            a = allocation.tasks[tid]
            need[tid] = (a.cpu / a.threads, a.memory / a.threads)

    vm_cpu = [float(p) for p in cluster.vm_slots]  # C_j
    vm_mem = [float(p) for p in cluster.vm_slots]  # M_j
    slot_mem = dict.fromkeys(cluster.slots, 1.0)  # M_j^l
    pending = {tid: allocation.tasks[tid].threads for tid in order}
    next_k = dict.fromkeys(order, 1)
    mapping = SlotMapping("RSM", cluster)
    ref = 0  # v_hat <- v_1

    def network(j: int) -> float:
        if j == ref:
            return weights.same_vm
        return weights.same_rack if cluster.rack(j) == cluster.rack(ref) else weights.other_rack

    while sum(pending.values()) > 0:
        for tid in order:
            if pending[tid] == 0:
                continue
            c_bar, m_bar = need[tid]
            if m_bar > 1.0 + _EPS or c_bar > max(cluster.vm_slots) + _EPS:
                raise _NeverFits(f"RSM: one thread of task {tid!r} needs more than a slot ({c_bar:.1%} CPU, {m_bar:.1%} memory)")
            distance = [
                weights.memory * (vm_mem[j] - m_bar) ** 2 + weights.cpu * (vm_cpu[j] - c_bar) ** 2 + weights.network * network(j)
                for j in range(len(cluster.vm_slots))
            ]
            chosen: SlotId | None = None
            for j in sorted(range(len(distance)), key=lambda j: (distance[j], j)):
                if vm_cpu[j] + _EPS < c_bar:
                    continue
                for slot in range(cluster.vm_slots[j]):
                    if slot_mem[(j, slot)] + _EPS >= m_bar:
                        chosen = (j, slot)
                        break
                if chosen:
                    break
            if chosen is None:
                raise PlanError(
                    f"RSM: insufficient resources for a thread of task {tid!r} "
                    f"(needs {c_bar:.1%} CPU, {m_bar:.1%} memory) on {cluster.total_slots} slots"
                )
            j, _ = chosen
            mapping.assignment[(tid, next_k[tid])] = chosen
            next_k[tid] += 1
            vm_cpu[j] -= c_bar
            vm_mem[j] -= m_bar
            slot_mem[chosen] -= m_bar
            pending[tid] -= 1
            ref = j
    return mapping


# ---- Algorithm 6: SAM ----------------------------------------------------------------------------


def map_sam(
    dag: Dag, allocation: Allocation, cluster: Cluster, models: Mapping[str, PerformanceModel] | None = None
) -> SlotMapping:
    """Algorithm 6. Per BFS sweep, each task maps either one full bundle of tau_hat_i threads to
    an empty slot (the next one in the current VM, else the following VMs: GetNextFullSlot) and
    marks that slot used up, or, once fewer than tau_hat_i threads remain, all of them to the
    best-fit slot: the one with the smallest available CPU + memory that still holds the
    partial bundle's c_i and m_i (what is left of MBA's c_i, m_i after the full bundles).

    Sources and sinks (no bundle) are always a partial bundle of their fixed allocation.

    Line 8 of Alg. 6 tests tau_i >= tau_hat_i. Read literally, a task whose best bundle is a
    single thread (Parse XML, Batch File Write) would get an exclusive slot for its one thread
    even when MBA allocated it a small fraction of a slot (13.7 % CPU for Parse XML at 50 t/s),
    wasting a slot per such task. We instead map as many full bundles as MBA allocated (its
    lines 9-15) and treat the rest as the partial bundle; this equals line 8 whenever the
    partial bundle has fewer than tau_hat_i threads, as in all of the paper's examples. For an
    allocation that is not MBA's, full bundles are counted as tau_i // tau_hat_i (line 8).
    """
    order = [t for t in dag.topological_order() if t in allocation.tasks]
    slots = cluster.slots
    cpu = dict.fromkeys(slots, 1.0)  # C_j^l
    mem = dict.fromkeys(slots, 1.0)  # M_j^l
    pending = {t: allocation.tasks[t].threads for t in order}
    c_left = {t: allocation.tasks[t].cpu for t in order}
    m_left = {t: allocation.tasks[t].memory for t in order}
    bundle = {t: allocation.tasks[t].bundle for t in order}
    full_left = {
        t: (a.full_bundles if allocation.method == "MBA" else a.threads // a.bundle) if a.bundle else 0
        for t, a in ((t, allocation.tasks[t]) for t in order)
    }
    next_k = dict.fromkeys(order, 1)
    mapping = SlotMapping("SAM", cluster)
    current_vm = 0

    def assign(tid: str, count: int, slot: SlotId) -> None:
        for _ in range(count):
            mapping.assignment[(tid, next_k[tid])] = slot
            next_k[tid] += 1
        pending[tid] -= count

    def next_empty_slot() -> SlotId | None:
        n_vms = len(cluster.vm_slots)
        for step in range(n_vms):
            j = (current_vm + step) % n_vms
            for slot in range(cluster.vm_slots[j]):
                if cpu[(j, slot)] >= 1.0 - _EPS and mem[(j, slot)] >= 1.0 - _EPS:
                    return (j, slot)
        return None

    while sum(pending.values()) > 0:
        for tid in order:
            b = bundle[tid]
            if b is not None and full_left[tid] > 0 and pending[tid] >= b:
                slot = next_empty_slot()
                if slot is None:
                    raise PlanError(
                        f"SAM: insufficient resources for a full bundle of {b} threads of task {tid!r} "
                        f"on {cluster.total_slots} slots"
                    )
                assign(tid, b, slot)
                full_left[tid] -= 1
                c_left[tid] = max(c_left[tid] - 1.0, 0.0)
                m_left[tid] = max(m_left[tid] - 1.0, 0.0)
                cpu[slot] = mem[slot] = 0.0
                current_vm = slot[0]
            elif pending[tid] > 0:
                c_need, m_need = c_left[tid], m_left[tid]
                if c_need > 1.0 + _EPS or m_need > 1.0 + _EPS:
                    raise _NeverFits(
                        f"SAM: the partial bundle of task {tid!r} needs more than one slot "
                        f"({c_need:.1%} CPU, {m_need:.1%} memory); SAM needs MBA's allocation"
                    )
                fits = [s for s in slots if cpu[s] + _EPS >= c_need and mem[s] + _EPS >= m_need]
                if not fits:
                    raise PlanError(
                        f"SAM: insufficient resources for the partial bundle of task {tid!r} "
                        f"({pending[tid]} threads, {c_need:.1%} CPU, {m_need:.1%} memory) "
                        f"on {cluster.total_slots} slots"
                    )
                slot = min(fits, key=lambda s: (cpu[s] + mem[s], s))  # GetBestFitSlot
                assign(tid, pending[tid], slot)
                cpu[slot] -= c_need
                mem[slot] -= m_need
                c_left[tid] = m_left[tid] = 0.0
    return mapping


MAPPERS: dict[str, Callable[..., SlotMapping]] = {"DSM": map_dsm, "RSM": map_rsm, "SAM": map_sam}


@dataclass(frozen=True)
class MappingResult:
    mapping: SlotMapping
    allocated_slots: int  # rho from the allocation
    slots: int  # rho plus the slots the add-a-slot retry needed
    cluster: Cluster

    @property
    def extra_slots(self) -> int:
        return self.slots - self.allocated_slots


def plan_mapping(
    dag: Dag,
    allocation: Allocation,
    method: str,
    models: Mapping[str, PerformanceModel] | None = None,
    vm_classes: Sequence[int] = DEFAULT_VM_CLASSES,
    max_extra_slots: int = 1000,
) -> MappingResult:
    """Acquire VMs for rho slots and map; while the mapper runs out of resources, add a slot
    and try again (Sec. 8.4). DSM never fails, RSM and SAM may."""
    try:
        mapper = MAPPERS[method.upper()]
    except KeyError:
        raise PlanError(f"unknown mapping method {method!r}; choose from {sorted(MAPPERS)}") from None
    models = dict(models) if models is not None else dag.models()
    rho = max(allocation.slots, 1)
    last_error: PlanError | None = None
    for slots in range(rho, rho + max_extra_slots + 1):
        cluster = acquire_vms(slots, vm_classes)
        try:
            mapping = mapper(dag, allocation, cluster, models)
        except _NeverFits:
            raise
        except PlanError as exc:
            last_error = exc
            continue
        return MappingResult(mapping, rho, slots, cluster)
    raise PlanError(f"{method}: no mapping within {max_extra_slots} extra slots: {last_error}")
