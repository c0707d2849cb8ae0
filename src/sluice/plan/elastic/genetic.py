"""The genetic-algorithm scheduler of section 4.7.

Chromosome (Fig. 4.4): strand S1 holds the active alternate of every PE; strand S2 holds, per
VM slot of a fixed budget, the PE instances mapped to it (a slot with no instance is a VM not
acquired). The budget of slots is what the chromosome size is "fixed based on": the VMs the
greedy CE heuristic needs, times ``budget_factor``, plus one slot of every class, so the
chromosome grows with the input rate and so does the GA's running time.

Fitness: Theta (Eq. 4.8) of the deployment held over the period, minus the penalty
    deployment: alpha * |Omega - Omega-hat| * it
    run time:   alpha * |Omega - Omega-hat| * it + alpha' * v * it
applied when Omega < Omega-hat, where ``it`` is the generation (so an unfit chromosome is
tolerated early and squeezed out as it survives) and v counts genes changed from the running
deployment.

Operators: ranked (roulette-like) selection of parents with the top 5% kept as they are
(elitism); random pairing and a random bit mask choosing each gene from either parent; and
independent mutation of the strands: S1 switches an alternate at random, S2 adds or removes
one PE instance on a VM.

Seeding (our choice; the thesis starts from a random population): one chromosome is the CE
deployment (at run time: the running deployment, plus CE's reactive decision as a second), a
third of the population are mutants of the first, the rest random. This keeps the GA from wasting
generations on hopeless random fleets.
The whole population is evaluated in one vectorised call of Eq. 4.4 to 4.7.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from sluice.errors import PlanError
from sluice.models.dynamic import edge_network, operator_capacity, throughput
from sluice.plan.elastic.base import Decision, Placement, SchedulerInput, largest_class
from sluice.plan.elastic.greedy import GreedyScheduler


@dataclass
class GeneticScheduler:
    name: str = "GA"
    population: int = 40
    generations: int = 60
    elite_share: float = 0.05
    mutation: float = 0.05
    alpha: float = 1.0
    alpha_changes: float = 0.002
    budget_factor: float = 1.5
    seed: int = 0

    def deploy(self, inp: SchedulerInput) -> Decision:
        t0 = time.perf_counter()
        greedy = GreedyScheduler(centralized=True).deploy(inp)
        seed_p = Placement(inp.dataflow, greedy.active)
        for vid, row in greedy.mapping.items():
            seed_p.add_vm(greedy.start[vid], counts=row)
        best = self._evolve(inp, seed_p, runtime=False)
        return best.decision(inp, time.perf_counter() - t0, stop_empty="all")

    def adapt(self, inp: SchedulerInput) -> Decision:
        t0 = time.perf_counter()
        if inp.active is None:
            raise PlanError("GA: adapt() needs a deployed dataflow")
        current = Placement.from_input(inp)
        reactive = GreedyScheduler(centralized=True).adapt(inp)
        best = self._evolve(inp, current, runtime=True, also=reactive)
        return best.decision(inp, time.perf_counter() - t0, stop_empty="hour_end")

    # ---------------------------------------------------------------------------------
    def _evolve(self, inp: SchedulerInput, seed: Placement, runtime: bool, also: Decision | None = None) -> Placement:
        df = inp.dataflow
        rng = np.random.default_rng(self.seed)
        # slots: the seed's VMs, the VMs ``also`` would start, then extra slots of every class
        slots = seed.copy()
        also_rows: dict[str, int] = {}
        if also is not None:
            for vid, c in also.start.items():
                also_rows[vid] = slots.add_vm(c)
        extra = max(int(np.ceil(seed.n_vms * (self.budget_factor - 1.0))), 1)
        big = largest_class(inp.vm_classes)
        for c in inp.vm_classes:
            slots.add_vm(c)
        for _ in range(extra):
            slots.add_vm(big)
        n_v, n_op = slots.n_vms, df.n_ops
        cores = slots.cores
        speed = slots.core_speed
        price = slots.price
        # the rest of the period the VMs are paid for: ``now_s`` is the simulator's clock from 0,
        # or a live job's epoch clock, so the time into the period is taken modulo its length
        # (read as the time since the start, an epoch clock made the rest negative, the VMs'
        # cost a gain, and every VM slot worth filling)
        hours = np.ceil((inp.period_s - ((inp.now_s % inp.period_s) if runtime else 0.0)) / 3600.0)
        rate = np.asarray(inp.external_rate, dtype=float)
        n_alt = df.n_alternates

        seed_alt = np.array(seed.active)
        seed_counts = np.zeros((n_v, n_op), dtype=int)
        seed_counts[: seed.n_vms] = seed.counts

        P = self.population
        alts = np.tile(seed_alt, (P, 1))
        counts = np.tile(seed_counts, (P, 1, 1))
        n_mut = P // 3
        first = 1
        if also is not None:  # a second seed: the reactive CE decision (our choice, see module doc)
            row_of = {vid: v for v, vid in enumerate(slots.ids) if vid is not None}
            row_of.update(also_rows)
            counts[1] = 0
            for vid, row in also.mapping.items():
                counts[1, row_of[vid]] = row
            alts[1] = also.active
            first = 2
        for k in range(first, P):
            if k <= n_mut:
                alts[k], counts[k] = self._mutate(alts[k], counts[k], rng, cores, n_alt, rate=0.2)
            else:
                alts[k] = rng.integers(0, n_alt)
                counts[k] = self._random_fleet(seed_counts, cores, rng)

        def fitness(alts, counts, it):
            cap = operator_capacity(counts, speed)
            local, remote = edge_network(df, counts, speed, slots.bandwidth)
            omega = throughput(df, alts, cap, rate, inp.step_s, inp.queue, local, remote).omega
            used = counts.sum(axis=2) > 0
            cost = (used * price).sum(axis=1) * hours
            gamma = df.pick(df.value_table, alts).mean(axis=1)
            theta = inp.profit.profit(gamma, cost)
            short = np.clip(inp.omega_target - omega, 0.0, None)
            penalty = self.alpha * short * it
            if runtime:
                changes = (alts != seed_alt).sum(axis=1) + (counts != seed_counts).any(axis=2).sum(axis=1)
                penalty = penalty + self.alpha_changes * changes * it
            return theta - penalty, omega, theta

        n_elite = max(1, round(self.elite_share * P))
        for it in range(1, self.generations + 1):
            fit, _, _ = fitness(alts, counts, it)
            order = np.argsort(-fit)
            alts, counts = alts[order], counts[order]
            ranks = np.arange(P, 0, -1, dtype=float)
            prob = ranks / ranks.sum()
            new_alts = [alts[:n_elite]]
            new_counts = [counts[:n_elite]]
            n_child = P - n_elite
            pa = rng.choice(P, size=n_child, p=prob)
            pb = rng.choice(P, size=n_child, p=prob)
            mask_s1 = rng.random((n_child, n_op)) < 0.5
            mask_s2 = rng.random((n_child, n_v)) < 0.5
            child_alts = np.where(mask_s1, alts[pb], alts[pa])
            child_counts = np.where(mask_s2[:, :, None], counts[pb], counts[pa])
            for k in range(n_child):
                child_alts[k], child_counts[k] = self._mutate(
                    child_alts[k], child_counts[k], rng, cores, n_alt, rate=self.mutation
                )
            alts = np.concatenate([*new_alts, child_alts])
            counts = np.concatenate([*new_counts, child_counts])

        fit, omega, theta = fitness(alts, counts, self.generations)
        # the fittest deployment meeting Omega-hat; failing that, within the tolerance
        score = fit
        for floor in (inp.omega_target, inp.omega_target - inp.epsilon):
            feasible = omega >= floor - 1e-12
            if feasible.any():
                score = np.where(feasible, theta, -np.inf)
                break
        k = int(np.argmax(score))
        out = slots.copy()
        out.active = alts[k].copy()
        out.counts = counts[k].copy()
        return out

    @staticmethod
    def _mutate(alt, count, rng, cores, n_alt, rate):
        alt = alt.copy()
        count = count.copy()
        flip = rng.random(len(alt)) < rate
        if flip.any():
            alt[flip] = rng.integers(0, n_alt[flip])
        for v in np.flatnonzero(rng.random(len(cores)) < rate):
            if rng.random() < 0.5 and count[v].sum() < cores[v]:
                count[v, rng.integers(0, count.shape[1])] += 1
            elif count[v].sum() > 0:
                ops = np.flatnonzero(count[v] > 0)
                count[v, rng.choice(ops)] -= 1
        return alt, count

    @staticmethod
    def _random_fleet(seed_counts, cores, rng):
        """Random mapping with about the seed's number of instances per PE."""
        per_op = seed_counts.sum(axis=0)
        out = np.zeros_like(seed_counts)
        free = cores.copy()
        for op in rng.permutation(len(per_op)):
            want = int(rng.integers(max(per_op[op] // 2, 1), per_op[op] * 2 + 2))
            for _ in range(want):
                open_ = np.flatnonzero(free > 0)
                if len(open_) == 0:
                    break
                v = int(rng.choice(open_))
                out[v, op] += 1
                free[v] -= 1
        return out
