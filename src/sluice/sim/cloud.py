"""The simulated IaaS cloud: VMs that take time to start, bill by the hour (Eq. 4.2) and run
at a speed that drifts over time (``sluice.sim.traces``).

The cloud only enacts a scheduler's :class:`~sluice.plan.elastic.base.Decision` and reports
what a monitoring framework would see (:meth:`Cloud.observed`); it knows nothing about how the
scheduler decides.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sluice.errors import PlanError
from sluice.models.dynamic import VMClass, vm_cost
from sluice.plan.elastic.base import Decision, RunningVM
from sluice.sim.traces import VMTraces


@dataclass
class SimVM:
    vm_id: str
    vm_class: VMClass
    trace: int  # index of its performance trace
    start_s: float  # billing starts here
    ready_s: float  # capacity from here (start-up latency)
    instances: np.ndarray
    stop_s: float = float("inf")


@dataclass
class Cloud:
    n_ops: int
    traces: VMTraces
    step_s: float
    vms: list[SimVM] = field(default_factory=list)

    # -- enacting ---------------------------------------------------------------------
    def apply(self, decision: Decision, now_s: float, ready_now: bool = False) -> None:
        """Stop, start and remap VMs as decided at ``now_s``. ``ready_now`` skips the start-up
        latency (the initial deployment happens before the run starts)."""
        by_id = {vm.vm_id: vm for vm in self.vms if vm.stop_s > now_s}
        for vid in decision.stop:
            if vid in by_id:
                by_id[vid].stop_s = now_s
                by_id[vid].instances = np.zeros(self.n_ops, dtype=int)
        for vid, row in decision.mapping.items():
            if vid in decision.start:
                c = decision.start[vid]
                vm = SimVM(
                    f"vm-{len(self.vms)}",
                    c,
                    len(self.vms),
                    now_s,
                    now_s if ready_now else now_s + c.startup_s,
                    np.array(row, dtype=int),
                )
                if vm.instances.sum() > c.cores:
                    raise PlanError(f"decision puts {vm.instances.sum()} instances on a {c.name} with {c.cores} cores")
                self.vms.append(vm)
            elif vid in by_id:
                by_id[vid].instances = np.array(row, dtype=int)
            else:
                raise PlanError(f"decision maps instances to unknown or stopped VM {vid!r}")

    # -- reading ----------------------------------------------------------------------
    def running(self, now_s: float) -> list[SimVM]:
        return [vm for vm in self.vms if vm.stop_s > now_s]

    def step_state(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Instance counts (V x ops), effective core speed and bandwidth of the VMs running
        during step k; a VM still starting contributes the share of the step it is up."""
        t0, t1 = k * self.step_s, (k + 1) * self.step_s
        vms = self.running(t0)
        if not vms:
            return np.zeros((0, self.n_ops)), np.zeros(0), np.zeros(0)
        counts = np.array([vm.instances for vm in vms], dtype=float)
        up = np.clip((t1 - np.array([vm.ready_s for vm in vms])) / self.step_s, 0.0, 1.0)
        speed = np.array([vm.vm_class.core_speed * self.traces.speed(vm.trace)[k] for vm in vms]) * up
        bw = np.array([vm.vm_class.bandwidth * self.traces.bandwidth(vm.trace)[k] for vm in vms])
        return counts, speed, bw

    def observed(self, k: int) -> tuple[RunningVM, ...]:
        """What monitoring reports after step k: running VMs with their measured speed
        (rated, 1.0, for a VM that was not up yet)."""
        now = (k + 1) * self.step_s
        out = []
        for vm in self.running(now):
            ready = vm.ready_s <= k * self.step_s
            out.append(
                RunningVM(
                    vm.vm_id,
                    vm.vm_class,
                    vm.start_s,
                    tuple(int(x) for x in vm.instances),
                    speed=float(self.traces.speed(vm.trace)[k]) if ready else 1.0,
                    bandwidth=float(vm.vm_class.bandwidth * self.traces.bandwidth(vm.trace)[k]),
                    ready_s=vm.ready_s,
                )
            )
        return tuple(out)

    def cost(self, now_s: float) -> float:
        """mu(t): the sum of Eq. 4.2 over every VM ever started."""
        if not self.vms:
            return 0.0
        start = np.array([vm.start_s for vm in self.vms])
        stop = np.array([vm.stop_s for vm in self.vms])
        price = np.array([vm.vm_class.price_per_hour for vm in self.vms])
        return float(vm_cost(start, stop, now_s, price).sum())
