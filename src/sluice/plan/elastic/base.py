"""What every elastic scheduler takes and gives, independent of who calls it.

The simulator (``sluice.sim``) and, later, the live engine call the same schedulers: they
describe the world in a :class:`SchedulerInput` (the dataflow with alternates, the VM classes,
the running VMs with their *observed* performance and their mapping, the input rates, and
optionally forecasts) and get back a :class:`Decision` (active alternates, the mapping of
operator instances to VMs, the VMs to start and to stop). Plain dataclasses and arrays only.

:class:`Placement` is the schedulers' scratch copy of a mapping: a matrix of instance counts
(VM x operator) plus per-VM class, observed speed and bandwidth, which the model's Eq. 4.4 to
4.7 evaluate (:meth:`Placement.estimate`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from sluice.errors import PlanError
from sluice.models.dynamic import (
    DynamicDataflow,
    ProfitModel,
    Throughput,
    VMClass,
    application_value,
    edge_network,
    operator_capacity,
    throughput,
)


@dataclass(frozen=True)
class RunningVM:
    """A VM the scheduler may use: its class, when it was started (for the hourly billing
    cycle), its *observed* core speed relative to rated (pi(t)/pi, section 4.3: 1.0 = rated),
    its observed bandwidth (bytes/s, None = rated) and the operator instances it hosts."""

    vm_id: str
    vm_class: VMClass
    started_s: float
    instances: tuple[int, ...]
    speed: float = 1.0
    bandwidth: float | None = None
    ready_s: float = 0.0


@dataclass(frozen=True)
class Forecast:
    """Predictions over the next steps (chapter 5): external input rates (steps x operators,
    msg/s) and each running VM's relative speed (vm_id -> steps)."""

    rates: np.ndarray
    speeds: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def steps(self) -> int:
        return int(self.rates.shape[0])


@dataclass(frozen=True)
class SchedulerInput:
    """Everything a scheduler decides from (section 4.6, 'during each subsequent interval')."""

    dataflow: DynamicDataflow
    vm_classes: tuple[VMClass, ...]
    profit: ProfitModel
    external_rate: np.ndarray  # msg/s arriving at each operator (0 for non-inputs)
    active: tuple[int, ...] | None = None  # current alternates (None before deployment)
    vms: tuple[RunningVM, ...] = ()
    now_s: float = 0.0
    step_s: float = 300.0
    period_s: float = 12 * 3600.0  # optimisation period T (for cost estimates)
    omega_target: float = 0.8  # Omega-hat
    epsilon: float = 0.05  # tolerance around Omega-hat
    observed_omega: float | None = None  # Omega(t) measured over the last interval
    queue: np.ndarray | None = None  # pending input messages per operator
    forecast: Forecast | None = None
    rate_history: np.ndarray | None = None  # recent external rates (steps x operators)
    speed_history: dict[str, np.ndarray] | None = None  # recent observed speeds per VM
    billing_s: float = 3600.0  # a VM is billed in whole periods of this length (the thesis: hours)
    max_vms: int | None = None  # the most VMs the job may hold at once (None: no limit)
    # messages the inputs processed earlier in the optimisation period: given, a forecast-driven
    # scheduler keeps the period's Omega (these pooled with the interval's) >= Omega-hat at every
    # step of the interval, not only over the interval as a whole (the period may end at any step)
    period_processed: float | None = None
    batch_s: float = 0.0  # a message is processed no sooner than this after it arrives (micro-batches)

    def __post_init__(self) -> None:
        rate = np.asarray(self.external_rate, dtype=float)
        if rate.shape != (self.dataflow.n_ops,):
            raise PlanError(f"external_rate has shape {rate.shape}, the dataflow has {self.dataflow.n_ops} operators")
        if not self.vm_classes:
            raise PlanError("no VM class to deploy on")
        if self.batch_s < 0:
            raise PlanError(f"batch_s is {self.batch_s}: a duration, >= 0")
        if self.max_vms is not None and self.max_vms < 1:
            raise PlanError(f"max_vms is {self.max_vms}: a job holds at least one VM")


@dataclass(frozen=True)
class Decision:
    """A scheduler's answer: alternates, the full mapping after the change (vm_id -> instances
    per operator; new VMs have ids 'new-<k>'), the VMs to start (new id -> class) and to stop."""

    active: tuple[int, ...]
    mapping: dict[str, tuple[int, ...]]
    start: dict[str, VMClass]
    stop: tuple[str, ...]
    elapsed_s: float = 0.0

    @property
    def instances(self) -> np.ndarray:
        rows = list(self.mapping.values())
        return np.sum(np.array(rows), axis=0) if rows else np.zeros(0, dtype=int)


class Scheduler(Protocol):
    """Initial deployment (Alg. 3 and its GA/BR counterparts) and run-time adaptation
    (Alg. 4, Alg. 5). Both are pure functions of their input."""

    name: str

    def deploy(self, inp: SchedulerInput) -> Decision: ...

    def adapt(self, inp: SchedulerInput) -> Decision: ...


# ----------------------------------------------------------------------------- placement


class Placement:
    """Mutable scratch mapping: ``counts[v, i]`` instances of operator i on VM v."""

    def __init__(self, dataflow: DynamicDataflow, active) -> None:
        self.dataflow = dataflow
        self.active = np.array(active, dtype=int)
        self.counts = np.zeros((0, dataflow.n_ops), dtype=int)
        self.classes: list[VMClass] = []
        self.speed = np.zeros(0)  # observed relative speed (1 = rated)
        self.bandwidth = np.zeros(0)  # bytes/s
        self.ids: list[str | None] = []  # None for a VM this plan starts
        self.started_s = np.zeros(0)
        self.cores = np.zeros(0, dtype=int)  # per-VM class attributes, kept as arrays for speed
        self.rated_speed = np.zeros(0)
        self.price = np.zeros(0)

    # -- building ---------------------------------------------------------------------
    @classmethod
    def from_input(cls, inp: SchedulerInput, active=None) -> Placement:
        df = inp.dataflow
        p = cls(df, inp.active if active is None else active)
        for vm in inp.vms:
            if len(vm.instances) != df.n_ops:
                raise PlanError(f"VM {vm.vm_id!r} lists {len(vm.instances)} operators, the dataflow has {df.n_ops}")
        if not inp.vms:
            return p
        # built in bulk: appending VM by VM is quadratic for the hundreds of VMs at 8,000 msg/s
        vms = inp.vms
        p.counts = np.array([vm.instances for vm in vms], dtype=int)
        p.classes = [vm.vm_class for vm in vms]
        p.speed = np.array([vm.speed for vm in vms], dtype=float)
        p.bandwidth = np.array([vm.vm_class.bandwidth if vm.bandwidth is None else vm.bandwidth for vm in vms])
        p.ids = [vm.vm_id for vm in vms]
        p.started_s = np.array([vm.started_s for vm in vms], dtype=float)
        p.cores = np.array([vm.vm_class.cores for vm in vms], dtype=int)
        p.rated_speed = np.array([vm.vm_class.core_speed for vm in vms], dtype=float)
        p.price = np.array([vm.vm_class.price_per_hour for vm in vms], dtype=float)
        return p

    def add_vm(
        self,
        vm_class: VMClass,
        speed: float = 1.0,
        bandwidth: float | None = None,
        vm_id: str | None = None,
        started_s: float = 0.0,
        counts=None,
    ) -> int:
        row = np.zeros((1, self.dataflow.n_ops), dtype=int) if counts is None else np.array([counts], dtype=int)
        self.counts = np.vstack([self.counts, row])
        self.classes.append(vm_class)
        self.speed = np.append(self.speed, speed)
        self.bandwidth = np.append(self.bandwidth, vm_class.bandwidth if bandwidth is None else bandwidth)
        self.ids.append(vm_id)
        self.started_s = np.append(self.started_s, started_s)
        self.cores = np.append(self.cores, vm_class.cores)
        self.rated_speed = np.append(self.rated_speed, vm_class.core_speed)
        self.price = np.append(self.price, vm_class.price_per_hour)
        return len(self.classes) - 1

    def copy(self) -> Placement:
        p = Placement(self.dataflow, self.active)
        p.counts = self.counts.copy()
        p.classes = list(self.classes)
        p.speed = self.speed.copy()
        p.bandwidth = self.bandwidth.copy()
        p.ids = list(self.ids)
        p.started_s = self.started_s.copy()
        p.cores = self.cores.copy()
        p.rated_speed = self.rated_speed.copy()
        p.price = self.price.copy()
        return p

    # -- reading ----------------------------------------------------------------------
    @property
    def n_vms(self) -> int:
        return len(self.classes)

    @property
    def free_cores(self) -> np.ndarray:
        return self.cores - self.counts.sum(axis=1) if self.n_vms else np.zeros(0, dtype=int)

    @property
    def core_speed(self) -> np.ndarray:
        """Current normalised core speed of each VM: rated pi times the observed factor."""
        return self.rated_speed * self.speed

    @property
    def used(self) -> np.ndarray:
        return self.counts.sum(axis=1) > 0

    def hourly_cost(self) -> float:
        """Price per hour of the VMs that host at least one instance."""
        return float(self.price[self.used].sum()) if self.n_vms else 0.0

    def capacity(self) -> np.ndarray:
        return operator_capacity(self.counts, self.core_speed) if self.n_vms else np.zeros(self.dataflow.n_ops)

    def estimate(self, external_rate, dt: float, queue=None, speed=None, active=None) -> Throughput:
        """Eq. 4.4 to 4.7 for this mapping (``speed`` overrides the observed factors)."""
        core_speed = self.core_speed if speed is None else self.rated_speed * speed
        if self.n_vms:
            cap = operator_capacity(self.counts, core_speed)
            local, remote = self._network(core_speed)
        else:
            cap, local, remote = np.zeros(self.dataflow.n_ops), None, None
        return throughput(
            self.dataflow,
            self.active if active is None else active,
            cap,
            external_rate,
            dt,
            queue=queue,
            edge_local_fraction=local,
            edge_remote_bandwidth=remote,
        )

    def _network(self, core_speed: np.ndarray):
        """edge_network for the current mapping, cached: the greedy loops re-estimate the
        same mapping many times while only alternates change."""
        key = (self.counts.tobytes(), self.counts.shape, core_speed.tobytes(), self.bandwidth.tobytes())
        cached = getattr(self, "_net_cache", None)
        if cached is None or cached[0] != key:
            cached = (key, edge_network(self.dataflow, self.counts, core_speed, self.bandwidth))
            self._net_cache = cached
        return cached[1]

    def value(self) -> float:
        return float(application_value(self.dataflow, self.active))

    # -- editing ----------------------------------------------------------------------
    def place(self, op: int, vm: int) -> None:
        if self.free_cores[vm] <= 0:
            raise PlanError(f"VM {vm} has no free core for operator {op}")
        self.counts[vm, op] += 1

    def remove(self, op: int, vm: int) -> None:
        if self.counts[vm, op] <= 0:
            raise PlanError(f"VM {vm} hosts no instance of operator {op}")
        self.counts[vm, op] -= 1

    def drop_vms(self, keep: np.ndarray) -> None:
        keep = np.asarray(keep, dtype=bool)
        self.counts = self.counts[keep]
        self.classes = [c for c, k in zip(self.classes, keep) if k]
        self.speed = self.speed[keep]
        self.bandwidth = self.bandwidth[keep]
        self.ids = [i for i, k in zip(self.ids, keep) if k]
        self.started_s = self.started_s[keep]
        self.cores = self.cores[keep]
        self.rated_speed = self.rated_speed[keep]
        self.price = self.price[keep]

    # -- answering --------------------------------------------------------------------
    def decision(self, inp: SchedulerInput, elapsed_s: float = 0.0, stop_empty: str = "all") -> Decision:
        """Turn this placement into a Decision against the VMs of ``inp``.

        ``stop_empty``: 'all' stops every existing VM left without instances; 'hour_end' only
        those whose paid hour ends before the next step (an idle VM whose hour is already
        paid costs nothing more and its cores may be reused, section 4.8.2).
        """
        mapping: dict[str, tuple[int, ...]] = {}
        start: dict[str, VMClass] = {}
        stop: list[str] = []
        new = 0
        kept_ids = set()
        for v in range(self.n_vms):
            row = tuple(int(x) for x in self.counts[v])
            vid = self.ids[v]
            if vid is None:
                if not any(row):
                    continue  # never start an empty VM
                vid = f"new-{new}"
                new += 1
                start[vid] = self.classes[v]
            elif not any(row) and (
                stop_empty == "all" or hour_ends_within(inp.now_s - self.started_s[v], inp.step_s, inp.billing_s)
            ):
                stop.append(vid)
                continue
            mapping[vid] = row
            kept_ids.add(vid)
        for vm in inp.vms:  # VMs the placement dropped entirely
            if vm.vm_id not in kept_ids and vm.vm_id not in stop:
                stop.append(vm.vm_id)
        return Decision(tuple(int(a) for a in self.active), mapping, start, tuple(stop), elapsed_s)


def hour_ends_within(age_s: float, step_s: float, billing_s: float = 3600.0) -> bool:
    """True when the VM's current paid period (an hour, or ``billing_s``) ends before the next
    decision point: billed by the second, an idle VM is worth keeping for no step."""
    left = (-age_s) % billing_s
    return left <= step_s or age_s <= 0


def lease_cost(price_per_hour: float, held_s: float, billing_s: float = 3600.0) -> float:
    """What a VM held for ``held_s`` seconds costs when billed in whole periods of
    ``billing_s`` (3600: every started hour, Eq. 4.2; 1: by the second)."""
    periods = np.ceil(max(held_s, 0.0) / billing_s - 1e-9)
    return float(price_per_hour * periods * billing_s / 3600.0)


def seconds_left_in_hour(age_s) -> np.ndarray:
    """T_c of Eq. 4.10: time to the VM's next hourly billing boundary."""
    left = (-np.asarray(age_s, dtype=float)) % 3600.0
    return np.where(left == 0, 3600.0, left)


def estimated_profit(inp: SchedulerInput, placement: Placement, hours: float | None = None) -> float:
    """Theta (Eq. 4.8) if ``placement`` were held for ``hours`` (default: the period T)."""
    h = inp.period_s / 3600.0 if hours is None else hours
    return float(inp.profit.profit(placement.value(), placement.hourly_cost() * np.ceil(h)))


def largest_class(classes) -> VMClass:
    return max(classes, key=lambda c: (c.capacity, -c.price_per_hour))
