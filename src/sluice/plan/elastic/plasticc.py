"""PLAStiCC: predictive look-ahead scheduling (thesis chapter 5, Algorithm 5).

Given forecasts of the input rates and of every VM's speed over the next ``h`` steps (the
prediction interval), PLAStiCC plans adaptation actions at *cross-over* steps: working back
from the end of the interval it finds the farthest step up to which the aggregate (cumulative)
Omega of the current plan stays within [Omega-hat - eps, Omega-hat + eps]; the step after it
is a cross-over, where one incremental action is planned for the rest of the interval:

* ScaleUpOrDecAppValue: for the bottleneck PE (lowest cumulative operator Omega), either add
  an instance (free if some VM has a spare core, else the price of a new VM-hour) or switch to
  the alternate with the next lower processing need (losing value) - whichever changes Theta
  less (Theta's sigma converts cost to value, Eq. 4.9);
* ScaleDownOrIncAppValue: for the most over-provisioned PE, either remove an instance (from the
  lightest VM, Eq. 4.10; saving a VM-hour if the VM empties) or switch to the alternate with the
  next higher value - whichever gains more, provided the rest of the interval still meets
  Omega-hat.

and the search resumes from that step until the plan meets the constraint to the end of the
interval. Only the actions due now are enacted - plus VM starts due within the start-up
latency, which is how the look-ahead launches VMs *before* the load arrives. The plan is
recomputed whenever a new forecast arrives (sliding window), retracting planned actions for
free.

Fixes to the printed Algorithm 5: line 26 passes ``bpe`` (the bottleneck of the scale-up
branch) to ScaleDown; the over-provisioned ``ope`` computed on line 25 is meant. And when no
scale-down action keeps Omega-hat, the printed loop would re-plan the same cross-over forever;
we stop there (the plan is as lean as it can be).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from sluice.errors import PlanError
from sluice.models.dynamic import Throughput, required_capacity, throughput, vm_weight
from sluice.plan.elastic.base import (
    Decision,
    SchedulerInput,
    hour_ends_within,
    largest_class,
    lease_cost,
    seconds_left_in_hour,
)
from sluice.plan.elastic.greedy import GreedyScheduler


class _Plan:
    """Per-step deployment over the prediction interval: counts[v, j, i] and active[j, i]."""

    def __init__(self, inp: SchedulerInput):
        fc = inp.forecast
        if fc is None:
            raise PlanError("PLASTICC plans over a forecast: the scheduler input has none")
        self.inp = inp
        self.df = inp.dataflow
        self.h = fc.steps
        self.dt = inp.step_s
        self.now = inp.now_s
        n = self.df.n_ops
        self.rates = np.asarray(fc.rates, dtype=float)
        self.active = np.tile(np.array(inp.active, dtype=int), (self.h, 1))
        self.classes = [vm.vm_class for vm in inp.vms]
        self.ids: list[str | None] = [vm.vm_id for vm in inp.vms]
        self.started = np.array([vm.started_s for vm in inp.vms], dtype=float)
        self.ready = np.array([vm.ready_s for vm in inp.vms], dtype=float)
        self.warmup = np.array([vm.vm_class.warmup_s for vm in inp.vms], dtype=float)
        self.start_step = np.zeros(len(inp.vms), dtype=int)
        self.speed = np.array(
            [np.asarray(fc.speeds.get(vm.vm_id, np.full(self.h, vm.speed)), dtype=float) for vm in inp.vms]
        ).reshape(len(inp.vms), self.h)
        self.counts = np.array([np.tile(np.array(vm.instances, dtype=int), (self.h, 1)) for vm in inp.vms], dtype=int).reshape(
            len(inp.vms), self.h, n
        )

    # -- structure --------------------------------------------------------------------
    @property
    def cores(self) -> np.ndarray:
        return np.array([c.cores for c in self.classes], dtype=int)

    @property
    def price(self) -> np.ndarray:
        return np.array([c.price_per_hour for c in self.classes])

    def eff_speed(self) -> np.ndarray:
        """(V, h): rated pi x forecast speed x the share of each step the VM is up."""
        if not self.classes:
            return np.zeros((0, self.h))
        ends = self.now + (np.arange(self.h) + 1) * self.dt
        up = np.clip((ends[None, :] - self.ready[:, None]) / self.dt, 0.0, 1.0)
        pi = np.array([c.core_speed for c in self.classes])
        return pi[:, None] * self.speed * up

    def stalled(self) -> np.ndarray:
        """(h,): the share of each step during which the job waits for a joined VM's workers
        (``VMClass.warmup_s``: from when it joins until it is ready, no batch progresses)."""
        if not self.classes:
            return np.zeros(self.h)
        begins = self.now + np.arange(self.h) * self.dt
        lo = np.maximum(self.ready - self.warmup, self.now)[:, None]
        hi = self.ready[:, None]
        overlap = np.clip(np.minimum(hi, begins[None, :] + self.dt) - np.maximum(lo, begins[None, :]), 0.0, self.dt)
        return overlap.max(axis=0) / self.dt

    def remove_vm(self) -> None:
        """Drop the VM added last (a candidate action tried and not taken)."""
        self.classes.pop()
        self.ids.pop()
        self.started, self.ready, self.warmup = self.started[:-1], self.ready[:-1], self.warmup[:-1]
        self.start_step, self.speed, self.counts = self.start_step[:-1], self.speed[:-1], self.counts[:-1]

    def alive(self) -> np.ndarray:
        """(h,): the VMs held at each step (started by then and hosting an instance then)."""
        if not self.classes:
            return np.zeros(self.h, dtype=int)
        started = self.start_step[:, None] <= np.arange(self.h)[None, :]
        return ((self.counts.sum(axis=2) > 0) & started).sum(axis=0)

    def add_vm(self, vm_class, at_step: int, lead: int) -> int:
        s = max(at_step - lead, 0)
        start = self.now + s * self.dt
        self.classes.append(vm_class)
        self.ids.append(None)
        self.started = np.append(self.started, start)
        self.ready = np.append(self.ready, start + vm_class.startup_s)
        self.warmup = np.append(self.warmup, vm_class.warmup_s)
        self.start_step = np.append(self.start_step, s)
        self.speed = np.vstack([self.speed, np.ones((1, self.h))])
        self.counts = np.concatenate([self.counts, np.zeros((1, self.h, self.df.n_ops), dtype=int)])
        return len(self.classes) - 1

    # -- evaluation -------------------------------------------------------------------
    def evaluate(self):
        """Eq. 4.4 to 4.7 step by step over the interval, each step's unprocessed input carried
        to the next as its queue q_i (the backlog the scheduler starts from, ``inp.queue``,
        included): a plan that leaves rows waiting pays for them in the steps after."""
        cap = (
            np.einsum("vjn,vj->jn", self.counts.astype(float), self.eff_speed())
            if self.classes
            else np.zeros((self.h, self.df.n_ops))
        )
        cap = cap * (1.0 - self.stalled())[:, None]
        q = np.zeros(self.df.n_ops) if self.inp.queue is None else np.asarray(self.inp.queue, dtype=float)
        steps, arrivals_only = [], []
        for j in range(self.h):
            t = throughput(self.df, self.active[j], cap[j], self.rates[j], self.dt, queue=q)
            steps.append(t)
            arrivals_only.append(throughput(self.df, self.active[j], cap[j], self.rates[j], self.dt).ideal_output_rate)
            q = np.maximum(q + t.input_rate * self.dt - t.processed, 0.0)
        thr = Throughput(
            *(
                np.stack([getattr(t, f) for t in steps])
                for f in ("input_rate", "output_rate", "ideal_output_rate", "processed", "operator_omega", "omega")
            )
        )
        self.ideal_arrivals = np.stack(arrivals_only)  # ideal output of each step's arrivals alone
        need = required_capacity(self.df, self.active, thr.input_rate)
        return thr, cap, need

    def window_omega(self, thr, start: int, end: int) -> float:
        """CumulativeThroughput over steps start..end (inclusive): messages out over the
        messages that could have gone out: the queue at ``start`` and what arrives in the window
        (a queued message counts once, not at every step it waits)."""
        outs = list(self.df.outputs)
        got = thr.output_rate[start : end + 1, outs].sum(axis=0)
        ideal = self.ideal_arrivals[start : end + 1, outs].sum(axis=0) + (
            thr.ideal_output_rate[start, outs] - self.ideal_arrivals[start, outs]
        )
        return float(np.mean(np.where(ideal > 0, np.minimum(got / np.where(ideal > 0, ideal, 1), 1.0), 1.0)))

    def step_omegas(self, thr) -> np.ndarray:
        """(h,): the period's Omega if it ended with each step: the messages out from the
        interval's start to that step's end over those that could have gone out (the queue
        at the start and the arrivals), both with the period's earlier messages
        (``period_processed`` at the inputs, as output messages at the ideal selectivity).
        With ``batch_s``, the messages out at a step's end are those out, and at most those
        that arrived, ``batch_s`` before it."""
        outs = list(self.df.outputs)
        got = np.cumsum(thr.output_rate[:, outs], axis=0) * self.dt
        queued = (thr.ideal_output_rate[0, outs] - self.ideal_arrivals[0, outs]) * self.dt
        arrived = np.cumsum(self.ideal_arrivals[:, outs], axis=0) * self.dt
        ideal = arrived + queued
        if self.inp.batch_s > 0:
            # micro-batches: a batch processes what arrived before it started, and its rows are
            # out when it ends; at each step's end, the rows of about a batch's length (in
            # arrivals, and in the work of the batch still running) are not out yet
            ends = (np.arange(self.h) + 1) * self.dt - self.inp.batch_s
            grid = np.arange(self.h + 1) * self.dt
            zero = np.zeros((1, len(outs)))

            def at(cumulative):
                knots = np.concatenate([zero, cumulative])
                return np.stack([np.interp(ends, grid, knots[:, o]) for o in range(len(outs))], axis=1)

            got = np.minimum(at(got), queued + at(arrived))
        offered = float(self.rates.sum())
        per_input = self.ideal_arrivals[:, outs].sum(axis=0) / offered if offered > 0 else np.ones(len(outs))
        before = float(self.inp.period_processed or 0.0) * per_input
        ratio = np.where(ideal + before > 0, (got + before) / np.maximum(ideal + before, 1e-12), 1.0)
        return np.minimum(ratio, 1.0).mean(axis=1)

    def vm_cost(self, vm_class, from_step: int) -> float:
        """What holding a VM of ``vm_class`` from ``from_step`` to the end of the interval adds
        to mu under the job's billing (a whole hour when billed hourly, Eq. 4.2; its seconds
        when billed by the second)."""
        return lease_cost(vm_class.price_per_hour, (self.h - from_step) * self.dt, self.inp.billing_s)


@dataclass
class PlasticcScheduler:
    name: str = "PLASTICC"
    max_actions: int = 2000
    uses_forecast: bool = True

    def deploy(self, inp: SchedulerInput) -> Decision:
        # "we retain our earlier initial deployment algorithm" (section 5.3)
        return GreedyScheduler(centralized=True).deploy(inp)

    def adapt(self, inp: SchedulerInput) -> Decision:
        if inp.forecast is None:
            return GreedyScheduler(centralized=True).adapt(inp)
        if inp.active is None:
            raise PlanError("PLAStiCC: adapt() needs a deployed dataflow")
        t0 = time.perf_counter()
        plan = _Plan(inp)
        if inp.period_processed is not None:
            self._plan_every_step(plan, inp)
            return self._decision(plan, inp, time.perf_counter() - t0)
        lo, hi = inp.omega_target - inp.epsilon, inp.omega_target + inp.epsilon
        h = plan.h
        big = largest_class(inp.vm_classes)
        lead = math.ceil(big.startup_s / inp.step_s)
        start = 0
        for _ in range(self.max_actions):
            thr, cap, need = plan.evaluate()
            ft = h - 1
            while ft >= start:  # lines 5-13
                if lo < plan.window_omega(thr, start, ft) < hi:
                    break
                ft -= 1
            if ft == h - 1:  # line 14: met at the end
                break
            ot = ft + 1  # the cross-over step
            rest = plan.window_omega(thr, ot, h - 1)
            if rest < inp.omega_target:
                self._scale_up(plan, thr, ot, big, lead)
            elif not self._scale_down(plan, thr, cap, need, ot):
                break
            start = ot
        return self._decision(plan, inp, time.perf_counter() - t0)

    # -- Omega-hat at every step ------------------------------------------------------
    def _plan_every_step(self, plan: _Plan, inp: SchedulerInput) -> None:
        """Algorithm 5 with the QoS constraint held at every step of the interval (the
        period's Omega, ``period_processed`` pooled in, must stay >= Omega-hat - eps however
        soon the period ends): the cross-over is the first step that misses it;
        ScaleUpOrDecAppValue takes, of the actions that bring it closer there (an alternate
        switched, or an instance added, from any step up to it), miss it at no step that met
        it and leave no fewer messages out by the interval's end, the one that loses the least
        Theta for the shortfall it removes. A new VM's warm-up stall is so paid once, against
        what the VM adds over the interval: the steps it holds up may get further from
        Omega-hat only where they miss it anyway. With no step missing,
        ScaleDownOrIncAppValue takes the action that gains Theta most (an instance released
        or a more valuable alternate, from the earliest step that keeps every step as it
        was). A step no action can bring up to Omega-hat (a backlog no start-up can clear in
        time) is left as close as the actions bring it."""
        lo = inp.omega_target - inp.epsilon
        big = largest_class(inp.vm_classes)
        lead = math.ceil(big.startup_s / inp.step_s)
        given_up = -1
        for _ in range(self.max_actions):
            omegas = plan.step_omegas(plan.evaluate()[0])
            missed = [k for k in np.flatnonzero(omegas < lo - 1e-9) if k > given_up]
            if missed:
                if not self._raise_at(plan, int(missed[0]), lo, big, lead):
                    given_up = int(missed[0])
            elif not self._lower(plan, lo):
                return

    def _shortfall(self, plan: _Plan, lo: float) -> np.ndarray:
        return np.maximum(lo - plan.step_omegas(plan.evaluate()[0]), 0.0)

    def _raise_at(self, plan: _Plan, k: int, lo: float, big, lead: int) -> bool:
        """ScaleUpOrDecAppValue at cross-over step ``k``; False when no action helps there."""
        df, inp = plan.df, plan.inp
        sigma = inp.profit.sigma
        thr, _, _ = plan.evaluate()
        omegas_before = plan.step_omegas(thr)
        before = np.maximum(lo - omegas_before, 0.0)
        met = before <= 1e-9
        end_before = float(omegas_before[-1])
        offered = thr.input_rate[: k + 1].sum(axis=0)
        done = thr.processed[: k + 1].sum(axis=0) / plan.dt
        omega_i = np.where(offered > 0, done / np.where(offered > 0, offered, 1), 1.0)
        bpe = int(np.argmin(omega_i))
        options = []  # (shortfall at k after it, Theta lost, apply)

        def judge(loss: float, apply, undo) -> bool:
            """Weigh one action; True when it meets Omega-hat at k (then the same action from an
            earlier step, which loses more, need not be weighed)."""
            apply()
            omegas = plan.step_omegas(plan.evaluate()[0])
            undo()
            after = np.maximum(lo - omegas, 0.0)
            # it must bring step k closer and miss Omega-hat at no step that met it. A new
            # executor's warm-up stall costs the rows it holds up once: steps that already miss
            # (the stall falls before k, on steps past saving) may get further from Omega-hat,
            # as long as no fewer rows are out by the end of the interval than without it
            if after[k] < before[k] - 1e-12 and (after[met] <= 1e-9).all() and omegas[-1] >= end_before - 1e-9:
                options.append((after[k], loss, apply))
                return bool(after[k] <= 1e-9)
            return False

        costs = df.cost_table[bpe, : int(df.n_alternates[bpe])]
        lighter = [a for a in range(len(costs)) if costs[a] < costs[plan.active[k, bpe]]]
        if lighter:
            alt = max(lighter, key=lambda a: costs[a])
            for s in range(k, -1, -1):
                old = plan.active[s:, bpe].copy()

                def switch(s=s, alt=alt):
                    plan.active[s:, bpe] = alt

                def unswitch(s=s, old=old):
                    plan.active[s:, bpe] = old

                if judge(-self._delta_value(plan, bpe, alt, s), switch, unswitch):
                    break
        if plan.classes:  # a free core on a VM held from s to the end
            free = plan.cores[:, None] - plan.counts.sum(axis=2)
            for s in range(k, -1, -1):
                ok = np.flatnonzero((free[:, s:].min(axis=1) > 0) & (plan.start_step <= s))
                if len(ok):
                    v = int(ok[0])

                    def place(v=v, s=s):
                        plan.counts[v, s:, bpe] += 1

                    def unplace(v=v, s=s):
                        plan.counts[v, s:, bpe] -= 1

                    if judge(0.0, place, unplace):
                        break
        alive = plan.alive()
        for s in range(max(k - lead, 0), -1, -1):
            if inp.max_vms is not None and alive[s:].max(initial=0) >= inp.max_vms:
                continue

            def start(s=s):
                v = plan.add_vm(big, s, 0)
                plan.counts[v, s:, bpe] += 1

            if judge(sigma * plan.vm_cost(big, s), start, plan.remove_vm):
                break
        if not options:
            return False
        # the least Theta lost for the shortfall it removes at k (one action seldom removes it all)
        pick = min(options, key=lambda o: (o[1] / max(before[k] - o[0], 1e-12), o[0]))
        pick[2]()
        return True

    def _lower(self, plan: _Plan, lo: float) -> bool:
        """ScaleDownOrIncAppValue: the action that gains Theta most and misses Omega-hat at no
        step it met it at, from the earliest step it can; False when there is none."""
        df, inp = plan.df, plan.inp
        sigma = inp.profit.sigma
        before = self._shortfall(plan, lo)
        best = None  # (gain, apply)

        def earliest(steps, gain_from, apply_from, undo_from) -> None:
            nonlocal best
            for s in steps:
                gain = gain_from(s)
                if gain <= 1e-12:
                    continue
                if best is not None and gain <= best[0]:
                    return  # gains only fall with later steps
                apply_from(s)
                after = self._shortfall(plan, lo)
                undo_from(s)
                if (after <= before + 1e-9).all():
                    best = (gain, lambda s=s: apply_from(s))
                    return

        for op in range(df.n_ops):
            n_alt = int(df.n_alternates[op])

            def better(s, op=op, n_alt=n_alt):
                """The next more valuable alternate than the one run from ``s`` to the end."""
                run = plan.active[s:, op]
                up = [a for a in range(n_alt) if df.value_table[op, a] > df.value_table[op, run[0]]]
                return min(up, key=lambda a: df.value_table[op, a]) if up and (run == run[0]).all() else None

            saved_alts = plan.active[:, op].copy()

            def upgrade(s, op=op, better=better):
                plan.active[s:, op] = better(s)

            def restore(s, op=op, saved=saved_alts):
                plan.active[:, op] = saved

            def gained(s, op=op, better=better):
                alt = better(s)
                return 0.0 if alt is None else self._delta_value(plan, op, alt, s)

            earliest(range(plan.h), gained, upgrade, restore)
            for v in range(len(plan.classes)):
                if plan.counts[v, -1, op] < 1:
                    continue  # an instance held to the end of the interval, whose VM then empties

                def release(s, v=v, op=op):
                    plan.counts[v, s:, op] -= 1

                def keep(s, v=v, op=op):
                    plan.counts[v, s:, op] += 1

                def saved(s, v=v, op=op):
                    rows = plan.counts[v, s:]
                    if (rows[:, op] < 1).any() or (rows.sum(axis=1) > 1).any():
                        return 0.0
                    return sigma * plan.vm_cost(plan.classes[v], s)

                earliest(range(int(plan.start_step[v]), plan.h), saved, release, keep)
        if best is None:
            return False
        best[1]()
        return True

    # -- actions ----------------------------------------------------------------------
    def _delta_value(self, plan: _Plan, op: int, new_alt: int, ot: int) -> float:
        df = plan.df
        d_gamma = df.value_table[op, new_alt] - df.value_table[op, plan.active[ot, op]]
        return float(d_gamma / df.n_ops * (plan.h - ot) * plan.dt / plan.inp.period_s)

    def _scale_up(self, plan: _Plan, thr, ot: int, big, lead: int) -> None:
        df = plan.df
        offered = thr.input_rate[ot:].sum(axis=0)
        done = thr.processed[ot:].sum(axis=0) / plan.dt
        omega_i = np.where(offered > 0, done / np.where(offered > 0, offered, 1), 1.0)
        bpe = int(np.argmin(omega_i))
        sigma = plan.inp.profit.sigma
        # option A: one more instance
        free = plan.cores[:, None] - plan.counts[:, ot:, :].sum(axis=2) if plan.classes else np.zeros((0, 1))
        exists = plan.start_step <= ot
        ok = np.flatnonzero((free.min(axis=1) > 0) & exists) if len(free) else np.array([], dtype=int)
        gain_instance = 0.0 if len(ok) else -sigma * plan.vm_cost(big, max(ot - lead, 0))
        # option B: the alternate with the next lower processing need
        cur = plan.active[ot, bpe]
        n_alt = int(df.n_alternates[bpe])
        costs = df.cost_table[bpe, :n_alt]
        lighter = [a for a in range(n_alt) if costs[a] < costs[cur]]
        if lighter:
            alt = max(lighter, key=lambda a: costs[a])
            if self._delta_value(plan, bpe, alt, ot) > gain_instance:
                plan.active[ot:, bpe] = alt
                return
        if len(ok):
            hosts = plan.counts[ok, ot, :]
            near = hosts[:, list(df.predecessors[bpe]) + list(df.successors[bpe]) + [bpe]].sum(axis=1) > 0
            v = int(ok[np.argmax(near)]) if near.any() else int(ok[0])
        else:
            v = plan.add_vm(big, ot, lead)
        plan.counts[v, ot:, bpe] += 1

    def _scale_down(self, plan: _Plan, thr, cap, need, ot: int) -> bool:
        df = plan.df
        inp = plan.inp
        sigma = inp.profit.sigma
        c = cap[ot:].sum(axis=0)
        nd = need[ot:].sum(axis=0)
        over = np.where(nd > 0, c / np.where(nd > 0, nd, 1), np.inf)
        per_op = plan.counts[:, ot:, :].sum(axis=0).min(axis=0)  # instances held at every step
        for ope in np.argsort(-over):
            if not over[ope] > 1.0:
                break
            options = []
            # option A: remove an instance from the lightest VM hosting it at every step >= ot
            hosts = np.flatnonzero(plan.counts[:, ot:, ope].min(axis=1) > 0) if per_op[ope] > 1 else np.zeros(0, int)
            if len(hosts):
                age = plan.now + ot * plan.dt - plan.started[hosts]
                used = plan.counts[hosts, ot, :].sum(axis=1)
                w = vm_weight(
                    seconds_left_in_hour(age),
                    plan.cores[hosts] - used,
                    plan.cores[hosts],
                    plan.counts[hosts, ot, ope],
                    per_op[ope],
                    np.array([plan.classes[v].core_speed for v in hosts]),
                    plan.price[hosts],
                )
                v = int(hosts[np.argmin(w)])
                empties = plan.counts[v, ot:, :].sum(axis=1).max() == 1
                options.append((sigma * plan.vm_cost(plan.classes[v], ot) if empties else 0.0, "remove", v))
            # option B: the alternate with the next higher value
            cur = plan.active[ot, ope]
            n_alt = int(df.n_alternates[ope])
            better = [a for a in range(n_alt) if df.value_table[ope, a] > df.value_table[ope, cur]]
            if better:
                alt = min(better, key=lambda a: df.value_table[ope, a])
                options.append((self._delta_value(plan, int(ope), alt, ot), "switch", alt))
            for _gain, kind, arg in sorted(options, key=lambda o: -o[0]):
                if kind == "remove":
                    plan.counts[arg, ot:, ope] -= 1
                else:
                    old = plan.active[ot:, ope].copy()
                    plan.active[ot:, ope] = arg
                thr2, _, _ = plan.evaluate()
                if plan.window_omega(thr2, ot, plan.h - 1) >= inp.omega_target:
                    return True
                if kind == "remove":
                    plan.counts[arg, ot:, ope] += 1
                else:
                    plan.active[ot:, ope] = old
        return False

    # -- enacting ---------------------------------------------------------------------
    @staticmethod
    def _right_size(planned, cores_used: int, classes):
        """RepackAndShutdownVMs (line 29) for a VM the plan starts: the cheapest class with the
        same core speed that holds the instances the plan ever puts on it (scale-up opened it
        as the largest class, one instance at a time)."""
        fits = [c for c in classes if c.core_speed == planned.core_speed and c.cores >= cores_used]
        return min(fits, key=lambda c: (c.price_per_hour, -c.cores)) if fits else planned

    def _decision(self, plan: _Plan, inp: SchedulerInput, elapsed: float) -> Decision:
        mapping: dict[str, tuple[int, ...]] = {}
        start = {}
        stop = []
        k = 0
        for v in range(len(plan.classes)):
            vid = plan.ids[v]
            if vid is None:
                if plan.start_step[v] > 0:
                    continue  # planned for later: decided again with fresher forecasts
                used = np.flatnonzero(plan.counts[v].sum(axis=1) > 0)
                if not len(used):
                    continue
                vid = f"new-{k}"
                k += 1
                start[vid] = self._right_size(plan.classes[v], int(plan.counts[v].sum(axis=1).max()), inp.vm_classes)
                mapping[vid] = tuple(int(x) for x in plan.counts[v, used[0]])
                continue
            row = plan.counts[v, 0]
            if (
                not row.any()
                and not plan.counts[v].any()
                and hour_ends_within(inp.now_s - plan.started[v], inp.step_s, inp.billing_s)
            ):
                stop.append(vid)
                continue
            mapping[vid] = tuple(int(x) for x in row)
        return Decision(tuple(int(a) for a in plan.active[0]), mapping, start, tuple(stop), elapsed)
