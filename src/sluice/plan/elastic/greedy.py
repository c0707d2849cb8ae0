"""The greedy CE (centralised) and SH (sharded) heuristics: Alg. 3 and Alg. 4 of the thesis.

Initial deployment (Alg. 3) picks each operator's alternate by value over cost, then adds one
core at a time to the next operator (depth-first until every operator has one, then the
bottleneck: lowest operator Omega_i) until the estimated Omega reaches Omega-hat, opening a VM
of the largest class when no core is free. Table 4.1 says how the two variants differ:

* cost of an alternate: SH its own c; CE c + s * (cost of the successors), by dynamic
  programming in reverse breadth-first order (a high-selectivity upstream loads downstream);
* SH has one scheduler per operator that sees only its own instances: each shard opens its
  own VMs (no VM is shared between operators) and never repacks;
* CE repacks: the last instance of an over-provisioned operator moves to the smallest class
  big enough for what it still has to do (RepackPEInstances), then the partly-filled VMs are
  repacked onto the cheapest set of VMs (RepackFreeVMs, iterative repacking).

Run-time adaptation (Alg. 4): when the estimated Omega leaves [Omega-hat - eps, Omega-hat +
eps], first the alternates are re-selected against the resources in place; if Omega is still
outside the band, resources are added to the bottleneck (as in deployment) or removed from the
most over-provisioned operator, from the VM of least weight (Eq. 4.10).

Defects of the printed pseudocode, fixed here (each is what the prose describes):
* Alg. 4 never clears ``feasible`` between operators: alternates of one operator would be
  switched onto another. It is per operator here.
* ``SwitchAlternate(A); done`` is read as "switch to the first feasible alternate that fits,
  then stop" (the prose: "select the first alternate which can be accommodated").
* When the dataflow is under-provisioned and no lighter alternate fits in the allocation, the
  printed loop switches nothing although any lighter alternate helps; we take the lightest.
* Alg. 3's ``while Omega <= Omega-hat`` would keep adding cores when Omega equals the target;
  we stop at Omega >= Omega-hat.
* Alg. 4's scale-in loop ``while Omega >= Omega-hat`` removes one instance too many (it stops
  only after falling below the target); we undo the removal that crosses the target, and try
  the next over-provisioned operator instead of stopping.
* The over-provisioned operator "with the maximum relative throughput" is ambiguous because
  Omega_i saturates at 1 for every operator with spare cores; we rank by allocated over
  required capacity, which is what "over-provisioned" measures.

Estimators (chapter 5.3.2) decide what conditions the reactive scheduler plans for: CAF (the
last observed rates and VM speeds, the classic reactive scheduler), WAAF, WPA, WPO, WPP; see
``sluice.plan.elastic.forecast``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sluice.errors import PlanError
from sluice.models.dynamic import DynamicDataflow, VMClass, required_capacity, vm_weight
from sluice.plan.elastic.base import (
    Decision,
    Placement,
    SchedulerInput,
    largest_class,
    seconds_left_in_hour,
)

Estimator = Callable[[SchedulerInput], tuple[np.ndarray, dict[str, float]]]


def caf(inp: SchedulerInput) -> tuple[np.ndarray, dict[str, float]]:
    """Current After-the-Fact: the last observation holds (the reactive scheduler)."""
    return np.asarray(inp.external_rate, dtype=float), {vm.vm_id: vm.speed for vm in inp.vms}


# ----------------------------------------------------------------------------- alternates


def alternate_costs(dataflow: DynamicDataflow, centralized: bool) -> tuple[np.ndarray, np.ndarray]:
    """GetCostOfAlternate of Table 4.1 for every alternate, and the alternate picked by
    value/cost (Alg. 3 lines 2-11). CE: c + s * sum of the successors' chosen costs."""
    costs = dataflow.cost_table.copy()
    chosen = np.zeros(dataflow.n_ops, dtype=int)
    downstream = np.zeros(dataflow.n_ops)
    for i in reversed(dataflow.topological_order):
        if centralized:
            succ = sum(downstream[j] for j in dataflow.successors[i])
            costs[i] = dataflow.cost_table[i] + dataflow.selectivity_table[i] * succ
        n_alt = int(dataflow.n_alternates[i])
        ratio = dataflow.value_table[i, :n_alt] / costs[i, :n_alt]
        k = int(np.argmax(ratio[::-1]))  # ties go to the later alternate: ">= best" in Alg. 3
        chosen[i] = n_alt - 1 - k
        downstream[i] = costs[i, chosen[i]]
    return costs, chosen


# ----------------------------------------------------------------------------- the scheduler


@dataclass
class GreedyScheduler:
    """CE (``centralized=True``) or SH; ``estimator`` chooses the conditions adapted for."""

    centralized: bool = True
    estimator: Estimator = caf
    name: str = ""
    max_added_cores: int = 200_000

    def __post_init__(self) -> None:
        if not self.name:
            self.name = "CE" if self.centralized else "SH"

    @property
    def uses_forecast(self) -> bool:
        """Whether the caller should pass forecasts (only the WP* estimators read them)."""
        return bool(getattr(self.estimator, "uses_forecast", False))

    # -- Alg. 3 -----------------------------------------------------------------------
    def deploy(self, inp: SchedulerInput) -> Decision:
        t0 = time.perf_counter()
        df = inp.dataflow
        _, chosen = alternate_costs(df, self.centralized)
        placement = Placement(df, chosen)
        rate = np.asarray(inp.external_rate, dtype=float)
        self._scale_out(placement, inp, rate, inp.omega_target)
        if self.centralized:
            self._repack_instances(placement, inp, rate)
            self._repack_free_vms(placement, inp, only_new=True)
        return placement.decision(inp, time.perf_counter() - t0, stop_empty="all")

    # -- Alg. 4 -----------------------------------------------------------------------
    def adapt(self, inp: SchedulerInput) -> Decision:
        t0 = time.perf_counter()
        if inp.active is None:
            raise PlanError(f"{self.name}: adapt() needs the active alternates of a deployed dataflow")
        rate, speeds = self.estimator(inp)
        placement = Placement.from_input(inp)
        placement.speed = np.array([s if i is None else speeds.get(i, s) for i, s in zip(placement.ids, placement.speed)])
        dt = inp.step_s
        omega = float(placement.estimate(rate, dt, inp.queue).omega)
        lo, hi = inp.omega_target - inp.epsilon, inp.omega_target + inp.epsilon
        if lo < omega < hi:
            return placement.decision(inp, time.perf_counter() - t0, stop_empty="hour_end")
        self._switch_alternates(placement, rate, dt, inp.queue, under=omega <= lo)
        omega = float(placement.estimate(rate, dt, inp.queue).omega)
        if omega < inp.omega_target:
            self._scale_out(placement, inp, rate, inp.omega_target)
            if self.centralized:
                self._repack_free_vms(placement, inp, only_new=True)
        elif omega >= hi:
            self._scale_in(placement, inp, rate)
        return placement.decision(inp, time.perf_counter() - t0, stop_empty="hour_end")

    # -- stages -----------------------------------------------------------------------
    def _switch_alternates(self, p: Placement, rate, dt, queue, under: bool) -> None:
        """AlternateReDeploy (Alg. 4), with the fixes listed in the module docstring."""
        df = p.dataflow
        costs, _ = alternate_costs(df, self.centralized)
        est = p.estimate(rate, dt, queue)
        cap = p.capacity()
        for i in df.topological_order:
            n_alt = int(df.n_alternates[i])
            if n_alt == 1:
                continue
            alloc = float(cap[i])
            in_rate = float(est.input_rate[i])
            need = in_rate * df.cost_table[i, :n_alt]  # RequiredRes per alternate
            current = int(p.active[i])
            # lighter or heavier by cost per message, not by need: with no input every need is
            # 0 and an idle operator would "move up" to a cheaper, less valuable alternate
            per_msg = df.cost_table[i, :n_alt]
            if under:
                feasible = [a for a in range(n_alt) if per_msg[a] <= per_msg[current]]
            else:
                feasible = [a for a in range(n_alt) if per_msg[a] >= per_msg[current]]
            feasible.sort(key=lambda a: -df.value_table[i, a] / costs[i, a])
            pick = next((a for a in feasible if need[a] <= alloc), None)
            if pick is None and under and feasible:
                pick = min(feasible, key=lambda a: need[a])
            if pick is not None and pick != current:
                p.active[i] = pick
                est = p.estimate(rate, dt, queue)  # downstream input rates may change

    def _scale_out(self, p: Placement, inp: SchedulerInput, rate, target: float) -> None:
        """Alg. 3 lines 12-19: cores to the next PE until Omega >= target.

        The thesis adds one core per iteration. When the chosen PE lacks several cores we add
        half of its deficit at once (cores one-at-a-time would add too, since it stays the
        bottleneck while that deficit lasts), so the loop runs in O(PEs log cores) iterations
        instead of O(cores); near the target it is one core at a time again.
        """
        df = p.dataflow
        dt = inp.step_s
        big = largest_class(inp.vm_classes)
        best, stale = -1.0, 0
        added = 0
        while added < self.max_added_cores:
            est = p.estimate(rate, dt, inp.queue)
            omega = float(est.omega)
            if omega >= target:
                return
            if omega > best + 1e-12:
                best, stale = omega, 0
            else:
                stale += 1
                if stale > 4 * df.n_ops:  # more cores do not help (e.g. bandwidth-bound)
                    return
            op = self._next_pe(p, est)
            need = float(est.input_rate[op] * df.cost_table[op, p.active[op]])
            deficit = need * target - float(p.capacity()[op])
            batch = max(1, int(deficit / 2.0 / big.core_speed)) if deficit > 2 * big.core_speed else 1
            for _ in range(batch):
                vm = self._vm_for(p, op)
                if vm is None:
                    vm = p.add_vm(big)
                p.place(op, vm)
            added += batch

    @staticmethod
    def _next_pe(p: Placement, est) -> int:
        """GetNextPE (Table 4.1): DFS order until every PE has a core, then the bottleneck."""
        per_op = p.counts.sum(axis=0)
        for i in p.dataflow.dfs_order:
            if per_op[i] == 0:
                return i
        omega_i = np.asarray(est.operator_omega)
        return int(np.argmin(omega_i))

    def _vm_for(self, p: Placement, op: int) -> int | None:
        """A VM with a free core: SH only its own (or empty) VMs; CE prefers collocation."""
        free = p.free_cores
        if not p.n_vms or not (free > 0).any():
            return None
        df = p.dataflow
        candidates = np.flatnonzero(free > 0)
        if not self.centralized:
            others = np.delete(p.counts, op, axis=1).sum(axis=1)
            candidates = candidates[others[candidates] == 0]
            return int(candidates[0]) if len(candidates) else None
        neighbours = list(df.predecessors[op]) + list(df.successors[op]) + [op]
        near = p.counts[candidates][:, neighbours].sum(axis=1) > 0
        return int(candidates[np.argmax(near)]) if near.any() else int(candidates[0])

    def _repack_instances(self, p: Placement, inp: SchedulerInput, rate) -> None:
        """RepackPEInstances (CE): move an over-provisioned operator's last instance to the
        smallest class whose one core still covers what that instance has to do."""
        df = p.dataflow
        est = p.estimate(rate, inp.step_s, inp.queue)
        need = required_capacity(df, p.active, est.input_rate)
        cap = p.capacity()
        speeds = p.core_speed
        for i in range(df.n_ops):
            hosts = np.flatnonzero(p.counts[:, i] > 0)
            if len(hosts) == 0:
                continue
            v = int(hosts[np.argmax(speeds[hosts])])
            residual = need[i] - (cap[i] - speeds[v])  # what the last instance must do
            if residual <= 0:
                continue
            fits = [c for c in inp.vm_classes if c.core_speed >= residual]
            if not fits:
                continue
            small = min(fits, key=lambda c: (c.price_per_hour, c.cores))
            share = p.classes[v].price_per_hour / p.classes[v].cores  # price of the core it frees
            if small.cores == 1 and small.price_per_hour < share and small.core_speed < p.classes[v].core_speed:
                p.remove(i, v)
                p.place(i, p.add_vm(small))

    def _repack_free_vms(self, p: Placement, inp: SchedulerInput, only_new: bool) -> None:
        """RepackFreeVMs (CE): instances on partly-filled VMs move to the cheapest set of VMs
        of the same core speed (so no instance gets slower). At run time only VMs this plan
        starts are repacked: moving off a running VM buys nothing until its paid hour ends."""
        movable = (p.free_cores > 0) & p.used
        if only_new:
            movable &= np.array([i is None for i in p.ids])
        if movable.sum() < 1:
            return
        for speed in sorted({p.classes[v].core_speed for v in np.flatnonzero(movable)}):
            group = np.flatnonzero(movable & (np.array([c.core_speed for c in p.classes]) == speed))
            if len(group) == 0:
                continue
            instances = p.counts[group].sum(axis=0)
            n = int(instances.sum())
            same = [c for c in inp.vm_classes if c.core_speed == speed]
            plan = cheapest_cover(same, n)
            old_cost = sum(p.classes[v].price_per_hour for v in group)
            if sum(c.price_per_hour for c in plan) >= old_cost - 1e-12:
                continue
            keep = np.ones(p.n_vms, dtype=bool)
            keep[group] = False
            p.drop_vms(keep)
            order = [i for i in p.dataflow.dfs_order for _ in range(int(instances[i]))]
            k = 0
            for c in sorted(plan, key=lambda c: -c.cores):
                v = p.add_vm(c)
                for _ in range(c.cores):
                    if k < len(order):
                        p.place(order[k], v)
                        k += 1

    def _scale_in(self, p: Placement, inp: SchedulerInput, rate) -> None:
        """ResourceReDeploy's scale-in: remove instances of over-provisioned operators from
        the lightest VM (Eq. 4.10) while the estimated Omega stays >= Omega-hat. A PE with a
        large surplus first loses half of it at once (undone if that crosses the target)."""
        df = p.dataflow
        dt = inp.step_s
        exhausted: set[int] = set()
        t_c = seconds_left_in_hour(inp.now_s - p.started_s)
        while len(exhausted) < df.n_ops:
            est = p.estimate(rate, dt, inp.queue)
            need = required_capacity(df, p.active, est.input_rate)
            cap = p.capacity()
            per_op = p.counts.sum(axis=0)
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(need > 0, cap / np.where(need > 0, need, 1), np.inf)
            ratio[(per_op <= 1) | np.isin(np.arange(df.n_ops), list(exhausted))] = -np.inf
            op = int(np.argmax(ratio))
            if ratio[op] == -np.inf:
                return
            surplus = cap[op] - need[op] * inp.omega_target
            top = float(p.core_speed.max()) if p.n_vms else 1.0
            batch = max(1, int(surplus / 2.0 / top)) if surplus > 8 * top else 1
            batch = min(batch, int(per_op[op]) - 1)
            removed = []
            for _ in range(batch):
                hosts = np.flatnonzero(p.counts[:, op] > 0)
                w = vm_weight(
                    t_c[hosts],
                    p.free_cores[hosts],
                    p.cores[hosts],
                    p.counts[hosts, op],
                    p.counts[:, op].sum(),
                    p.core_speed[hosts],
                    p.price[hosts],
                )
                v = int(hosts[np.argmin(w)])
                p.remove(op, v)
                removed.append(v)
            if float(p.estimate(rate, dt, inp.queue).omega) < inp.omega_target:
                for v in removed:
                    p.place(op, v)
                if batch == 1:
                    exhausted.add(op)
                else:  # retry this PE one instance at a time
                    self._scale_in_one(p, inp, rate, op, t_c)
                    exhausted.add(op)

    def _scale_in_one(self, p: Placement, inp: SchedulerInput, rate, op: int, t_c) -> None:
        while p.counts[:, op].sum() > 1:
            hosts = np.flatnonzero(p.counts[:, op] > 0)
            w = vm_weight(
                t_c[hosts],
                p.free_cores[hosts],
                p.cores[hosts],
                p.counts[hosts, op],
                p.counts[:, op].sum(),
                p.core_speed[hosts],
                p.price[hosts],
            )
            v = int(hosts[np.argmin(w)])
            p.remove(op, v)
            if float(p.estimate(rate, inp.step_s, inp.queue).omega) < inp.omega_target:
                p.place(op, v)
                return


def cheapest_cover(classes: list[VMClass], cores: int) -> list[VMClass]:
    """The cheapest multiset of VMs from ``classes`` with at least ``cores`` cores (DP)."""
    if cores <= 0:
        return []
    if not classes:
        raise PlanError("no VM class to cover the cores with")
    top = max(c.cores for c in classes)
    n = cores + top
    best = np.full(n + 1, np.inf)
    pick = np.full(n + 1, -1)
    best[0] = 0.0
    for k in range(1, n + 1):
        for j, c in enumerate(classes):
            prev = max(k - c.cores, 0)
            if best[prev] + c.price_per_hour < best[k] - 1e-12:
                best[k], pick[k] = best[prev] + c.price_per_hour, j
    k = int(np.argmin(best[cores:])) + cores
    out: list[VMClass] = []
    while k > 0:
        c = classes[int(pick[k])]
        out.append(c)
        k = max(k - c.cores, 0)
    return out
