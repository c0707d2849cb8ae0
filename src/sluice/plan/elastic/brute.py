"""Pruned brute force (BR of section 4.9.2), for small deployments only.

The search tree: every combination of alternates, then every operator's capacity in units of
the slowest core speed, realised as cores of the fastest speed plus a remainder of slower
ones; each leaf is priced with the cheapest VMs holding those cores (an exact DP per core
speed). Pruning keeps each operator between
* an upper bound: the capacity that serves its whole ideal input (more can never help), and
* a lower bound: the capacity below which the outputs it reaches cannot average Omega-hat
  even if every other output is perfect.
All leaves of one alternate combination are evaluated in one vectorised Eq. 4.4-4.7 call.
With more than two core speeds among the VM classes, only the fastest and the slowest are
used (the m1 classes have two: 1 and 2 ECU per core).
Bandwidth is not modelled here (instances are assumed collocated or the network ample),
which holds for the small rates BR is meant for.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

import numpy as np

from sluice.errors import PlanError
from sluice.models.dynamic import application_value, throughput
from sluice.plan.elastic.base import Decision, Placement, SchedulerInput
from sluice.plan.elastic.greedy import cheapest_cover


@dataclass
class BruteForceScheduler:
    name: str = "BR"
    max_leaves: int = 3_000_000

    def deploy(self, inp: SchedulerInput) -> Decision:
        t0 = time.perf_counter()
        df = inp.dataflow
        speeds = sorted({c.core_speed for c in inp.vm_classes})
        unit = speeds[0]
        fast = speeds[-1]
        ratio = round(fast / unit)
        by_speed = {s: [c for c in inp.vm_classes if c.core_speed == s] for s in speeds}
        rate = np.asarray(inp.external_rate, dtype=float)
        hours = np.ceil(inp.period_s / 3600.0)
        reach = _outputs_reached(df)
        n_out = len(df.outputs)
        slack = n_out * (1.0 - inp.omega_target)

        best: tuple[float, np.ndarray | None, tuple[np.ndarray, np.ndarray] | None] = (-np.inf, None, None)
        leaves = 0
        combos = itertools.product(*[range(int(k)) for k in df.n_alternates])
        for combo in combos:
            active = np.array(combo)
            ideal = throughput(df, active, np.full(df.n_ops, np.inf), rate, inp.step_s)
            need = ideal.input_rate * df.pick(df.cost_table, active) / unit  # in slow-core units
            hi = np.ceil(need - 1e-9).astype(int)
            lo_share = np.clip(1.0 - slack / reach, 0.0, 1.0)
            lo = np.maximum(np.floor(need * lo_share).astype(int), 1)
            hi = np.maximum(hi, lo)
            ranges = [np.arange(a, b + 1) for a, b in zip(lo, hi)]
            n_leaves = int(np.prod([len(r) for r in ranges], dtype=float))
            leaves += n_leaves
            if leaves > self.max_leaves:
                raise PlanError(
                    f"BR: more than {self.max_leaves} leaves; brute force is for small cases (rate {rate.max():.0f} msg/s)"
                )
            grid = np.stack(np.meshgrid(*ranges, indexing="ij"), axis=-1).reshape(-1, df.n_ops)
            fast_cores = grid // ratio
            slow_cores = grid % ratio
            cap = (fast_cores * fast + slow_cores * unit).astype(float)
            omega = throughput(df, active, cap, rate, inp.step_s).omega
            ok = omega >= inp.omega_target - 1e-12
            if not ok.any():
                continue
            n_fast = fast_cores.sum(axis=1)
            n_slow = slow_cores.sum(axis=1)
            price = _price_table(by_speed[fast], int(n_fast.max()))[n_fast]
            if ratio > 1:
                price = price + _price_table(by_speed[unit], int(n_slow.max()))[n_slow]
            gamma = float(application_value(df, active))
            theta = inp.profit.profit(gamma, price * hours)
            theta = np.where(ok, theta, -np.inf)
            k = int(np.argmax(theta))
            if theta[k] > best[0]:
                best = (float(theta[k]), active, (fast_cores[k], slow_cores[k]))
        _, best_active, best_cores = best
        if best_active is None or best_cores is None:
            raise PlanError("BR: no deployment reaches Omega-hat")
        active, (fast_cores, slow_cores) = best_active, best_cores
        placement = Placement(df, active)
        for speed, cores in ((fast, fast_cores), (unit, slow_cores)):
            if speed == unit and ratio == 1 and cores is slow_cores:
                continue
            _fill(placement, cheapest_cover(by_speed[speed], int(cores.sum())), cores)
        return placement.decision(inp, time.perf_counter() - t0)

    def adapt(self, inp: SchedulerInput) -> Decision:
        raise PlanError("BR is a deployment-time baseline; it is too slow for run-time adaptation (section 4.9.2)")


def _outputs_reached(df) -> np.ndarray:
    reach = np.zeros(df.n_ops)
    outs = set(df.outputs)
    for i in range(df.n_ops):
        seen, stack = set(), [i]
        while stack:
            j = stack.pop()
            if j in seen:
                continue
            seen.add(j)
            stack.extend(df.successors[j])
        reach[i] = len(seen & outs)
    return np.maximum(reach, 1)


def _price_table(classes, max_cores: int) -> np.ndarray:
    """Cheapest hourly price of VMs holding k cores, for k = 0..max_cores."""
    return np.array([sum(c.price_per_hour for c in cheapest_cover(classes, k)) for k in range(max_cores + 1)])


def _fill(placement: Placement, vms, cores_per_op) -> None:
    order = [i for i in placement.dataflow.dfs_order for _ in range(int(cores_per_op[i]))]
    k = 0
    for c in sorted(vms, key=lambda c: -c.cores):
        v = placement.add_vm(c)
        for _ in range(c.cores):
            if k < len(order):
                placement.place(order[k], v)
                k += 1
