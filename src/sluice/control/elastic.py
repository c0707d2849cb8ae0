"""The thesis's elastic schedulers as live control-loop policies: CE, SH, GA and PLAStiCC
choose the executors a job holds and the active alternate of each operator with alternates,
for the best profit at the offered rate (Kumbhare's thesis, chapters 4 and 5).

The schedulers (``sluice.plan.elastic``) decide on a model of the world: a dynamic dataflow
of processing elements (PEs) with alternates, VM classes, running VMs with their operator
instances, input rates and, for PLAStiCC, forecasts. :class:`ElasticPolicy` builds that
model from a ``ControlView`` every ``interval_s`` seconds, asks its scheduler to adapt, and
turns the decision into actions:

- **PEs.** Every operator with alternates is a PE; operators without (Python maps, keyed
  stages) run in the same Spark stages and add their measured cost per input record to the
  PE upstream of them (the first PE when they come before any), so a PE's alternates carry
  the whole pipeline's work. Without any operator with alternates the pipeline is one PE
  with one alternate (the policies then only scale executors).
- **Costs.** Seconds of one executor core per record: the active alternate's as measured
  (useful task time over rows in, as DS2 measures true rates), the others' from their
  declared costs in proportion (``Alt.cost``), or as last measured while they ran, or the
  active one's when nothing else is known. Selectivity likewise, measured when active.
- **VMs.** An executor is a VM of one class: ``cores_per_executor`` cores of speed 1 (the
  reference core is an executor core), the given price per hour and start-up time (how long
  a requested executor takes to join). Held executors are the running VMs; their cores are
  spread over the PEs in proportion to what each needs (at least one each), as Spark's
  scheduler shares task slots between stages over a batch.
- **Decision.** The executors held afterwards are the VMs the decision keeps or starts; the
  active alternates are its ``active``. Executors joining from an earlier decision make the
  policy wait (no decision on a half-applied one).

PLAStiCC plans over a forecast of the input rate: ``forecaster(view, now_s, steps, step_s)``
returns the rates of the next ``steps`` intervals (``plan.elastic.forecast.TraceForecast``
is the thesis's evaluation method: the true future rate with its error model). Without a
forecaster PLAStiCC adapts like CE.

Pure: no Spark. The simulator (``sim.elastic``) drives the very same policy objects.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sluice.control.actions import Action, Executors, SwitchAlternate
from sluice.control.forecast import make_forecaster
from sluice.control.policy import Policy
from sluice.control.view import ControlView
from sluice.models.dynamic import Alternate, DynamicDataflow, Operator, ProfitModel, VMClass
from sluice.plan.elastic.base import Forecast, RunningVM, SchedulerInput
from sluice.plan.elastic.genetic import GeneticScheduler
from sluice.plan.elastic.greedy import GreedyScheduler
from sluice.plan.elastic.plasticc import PlasticcScheduler

PLENTY_BANDWIDTH = 1e12  # bytes/s: executors on one cluster; the model's network limit does not bind

Forecaster = Callable[[ControlView, float, int, float], np.ndarray]


@dataclass(frozen=True)
class PE:
    """A processing element of the model: an operator with alternates (or the whole
    pipeline), and the operators without alternates whose work it carries."""

    op_id: str
    alternates: tuple[str, ...]  # names, in the model's order
    carried: tuple[str, ...]  # operators without alternates folded into this PE


class ElasticPolicy(Policy):
    """A thesis scheduler (``GreedyScheduler`` CE/SH, ``GeneticScheduler``,
    ``PlasticcScheduler``) as a control policy over executors and alternates.

    ``price_per_hour``: what one executor costs an hour; ``cost_at_best`` / ``cost_at_worst``:
    the break-even cost of ``period_s`` at the best and the worst application value (the
    profit model of Eq. 4.8/4.9); ``omega_target``/``epsilon``: the throughput band the
    schedulers keep (Omega-hat +- eps); ``utilization``: the share of a core's time that
    does a record's work (measured costs are divided by it: a batch's fixed cost and the gaps
    between batches take the rest, as DS2's target utilization leaves them); ``interval_s``: seconds between decisions (the
    schedulers' interval; PLAStiCC's forecast steps are as long); ``horizon``: PLAStiCC's
    forecast steps; ``startup_s``: how long a requested executor takes to be useful;
    ``warmup_s``: the last part of it, from when the executor registers until its Python
    workers run the tasks Spark gives it at once (the batch waits for them meanwhile).

    Omega-hat is ``omega_target - epsilon``. PLAStiCC holds it as a constraint at every step
    of its forecast: the Omega of the rows processed over the last ``horizon`` intervals
    pooled with the plan's steps up to that one must not fall below it, with the backlog, the
    executors still joining or warming, and the stall a new one brings.
    """

    def __init__(
        self,
        scheduler,
        *,
        price_per_hour: float = 1.0,
        cost_at_best: float | None = None,
        cost_at_worst: float | None = None,
        period_s: float = 3600.0,
        omega_target: float = 0.95,
        epsilon: float = 0.05,
        interval_s: float = 20.0,
        horizon: int = 4,
        startup_s: float = 15.0,
        forecaster: Forecaster | None = None,
        window: int = 3,
        utilization: float = 0.7,
        name: str | None = None,
        warmup_s: float = 0.0,
    ):
        if interval_s <= 0 or horizon < 1 or window < 1 or price_per_hour < 0 or not 0 < utilization <= 1:
            raise ValueError(
                "elastic policy: interval_s > 0, horizon >= 1, window >= 1, price_per_hour >= 0 and "
                "0 < utilization <= 1 are required"
            )
        if not 0 <= warmup_s <= startup_s:
            raise ValueError(f"elastic policy: 0 <= warmup_s ({warmup_s}) <= startup_s ({startup_s}) is required")
        self.warmup_s = warmup_s
        self.started_at: float | None = None  # the first decision: executors held before it are warm
        self.utilization = utilization
        self.scheduler = scheduler
        self.name = name or f"elastic_{scheduler.name.lower()}"
        self.price_per_hour = price_per_hour
        self.cost_at_best, self.cost_at_worst = cost_at_best, cost_at_worst
        self.period_s, self.omega_target, self.epsilon = period_s, omega_target, epsilon
        self.interval_s, self.horizon, self.startup_s, self.window = interval_s, horizon, startup_s, window
        self.forecaster = forecaster
        self.last_decision_at: float | None = None
        self.measured: dict[tuple[str, str], tuple[float, float]] = {}  # (op, alternate) -> (cost, selectivity)
        self.rate_history: list[float] = []

    def describe(self) -> dict:
        return {
            "policy": self.name,
            "scheduler": self.scheduler.name,
            "price_per_hour": self.price_per_hour,
            "omega_target": self.omega_target,
            "epsilon": self.epsilon,
            "interval_s": self.interval_s,
            "horizon": self.horizon,
            "forecast": self.forecaster is not None,
        }

    # ---- the loop ------------------------------------------------------------------------------
    def propose(self, view: ControlView) -> list[Action]:
        latest = view.latest
        if latest is None:
            return []
        now = latest.started_at + latest.duration_s
        self._measure(view)
        rate = view.offered_rate(self.window)
        if rate is None:
            batches = view.batches(self.window)
            seconds = sum(m.duration_s for m in batches)
            rate = sum(m.rows_in for m in batches) / seconds if seconds > 0 else None
        if rate is None:
            return []
        if self.last_decision_at is not None and now - self.last_decision_at < self.interval_s:
            return []
        resources = view.resources
        if resources.requested is not None and resources.requested != resources.executors:
            return []  # executors still joining (or leaving): decide on what the last decision gave
        self.rate_history.append(rate)
        if self.started_at is None:
            self.started_at = now
        inp, pes = self.scheduler_input(view, rate, now)
        decision = self.scheduler.adapt(inp)
        self.last_decision_at = now
        return self._actions(view, pes, inp, decision, rate)

    # ---- the model -----------------------------------------------------------------------------
    def pes(self, view: ControlView) -> list[PE]:
        """The model's PEs: operators with alternates, with the others folded in."""
        order = [op for op in view.graph.topological_order() if op.is_python or op.is_keyed]
        with_alts = [op.id for op in order if view.alternates(op.id)]
        if not with_alts:
            return [PE("*", ("*",), tuple(op.id for op in order))]
        carried: dict[str, list[str]] = {op_id: [] for op_id in with_alts}
        current = with_alts[0]
        for op in order:
            if op.id in carried:
                current = op.id
            else:
                carried[current].append(op.id)
        return [PE(op_id, tuple(view.alternates(op_id)), tuple(carried[op_id])) for op_id in with_alts]

    def scheduler_input(self, view: ControlView, rate: float, now: float) -> tuple[SchedulerInput, list[PE]]:
        pes = self.pes(view)
        operators, active = [], []
        for pe in pes:
            carried_cost = sum(self._op_cost(view, op_id)[0] for op_id in pe.carried)
            alts = []
            for name in pe.alternates:
                cost, selectivity, value = self._alternate(view, pe, name)
                alts.append(Alternate(name, value, max((cost + carried_cost) / self.utilization, 1e-9), selectivity))
            operators.append(Operator(pe.op_id, tuple(alts)))
            current = view.active_alternate(pe.op_id) if pe.op_id != "*" else "*"
            active.append(pe.alternates.index(current) if current in pe.alternates else 0)
        dataflow = DynamicDataflow(
            tuple(operators),
            tuple((i, i + 1) for i in range(len(pes) - 1)),
            name=view.graph.name if hasattr(view.graph, "name") else "job",
        )
        resources = view.resources
        vm_class = VMClass(
            "executor",
            max(resources.cores_per_executor, 1),
            1.0,
            PLENTY_BANDWIDTH,
            self.price_per_hour,
            self.startup_s,
            self.warmup_s,
        )
        need = np.array([rate * op.alternates[a].cost for op, a in zip(operators, active)])
        vms = self._running(resources, need, now, vm_class)
        profit = self._profit(dataflow, view)
        external = np.zeros(len(pes))
        external[0] = rate
        queue = np.zeros(len(pes))
        queue[0] = float(view.backlog() or 0)
        forecast = None
        if self.forecaster is not None and getattr(self.scheduler, "uses_forecast", False):
            future = np.asarray(self.forecaster(view, now, self.horizon, self.interval_s), dtype=float)
            rates = np.zeros((len(future), len(pes)))
            rates[:, 0] = future
            forecast = Forecast(rates)
        inp = SchedulerInput(
            dataflow=dataflow,
            vm_classes=(vm_class,),
            profit=profit,
            external_rate=external,
            active=tuple(active),
            vms=tuple(vms),
            now_s=now,
            step_s=self.interval_s,
            period_s=self.period_s,
            omega_target=self.omega_target,
            epsilon=self.epsilon,
            observed_omega=observed_omega(view, self.window),
            queue=queue,
            forecast=forecast,
            billing_s=self._billing_s(view),
            max_vms=resources.max_executors or None,
            period_processed=self._processed_within(view, now),
            batch_s=float(np.mean([m.duration_s for m in view.batches(self.window)] or [0.0])),
            rate_history=np.array([[r] + [0.0] * (len(pes) - 1) for r in self.rate_history[-8:]]),
        )
        return inp, pes

    def _processed_within(self, view: ControlView, now: float) -> float:
        """Rows the job processed over the last look-ahead's length: pooled with the plan's
        steps, the Omega PLAStiCC keeps >= Omega-hat is over a window as long as its
        interval (over the whole period, a long run's past would hide a new backlog)."""
        since = now - self.horizon * self.interval_s
        return float(sum(m.rows_in for m in view.batches() if m.started_at >= since))

    def _running(self, resources, need: np.ndarray, now: float, vm_class: VMClass) -> list[RunningVM]:
        """Held executors as running VMs, their cores spread over the PEs by need."""
        n_exec = max(resources.executors, 1)
        per = max(resources.cores_per_executor, 1)
        total = n_exec * per
        n = len(need)
        shares = need / need.sum() if need.sum() > 0 else np.full(n, 1.0 / n)
        cores = np.maximum(1, np.floor(shares * total)).astype(int)
        while cores.sum() > max(total, n):
            cores[int(np.argmax(cores))] -= 1
        while cores.sum() < total:
            cores[int(np.argmax(shares * total - cores))] += 1
        slots = [i for i in range(n) for _ in range(int(cores[i]))]
        since = list(resources.since) + [now] * max(0, n_exec - len(resources.since))
        vms = []
        for v in range(n_exec):
            counts = [0] * n
            for i in slots[v * per : (v + 1) * per]:
                counts[i] += 1
            if v == n_exec - 1:  # more PEs than cores: the last executor hosts the rest
                for i in slots[(v + 1) * per :]:
                    counts[i] += 1
            # registered less than warmup_s ago: its Python workers are not up yet
            joined_since = self.started_at is not None and since[v] > self.started_at
            ready = since[v] + self.warmup_s if joined_since and now - since[v] < self.warmup_s else 0.0
            vms.append(
                RunningVM(f"executor-{v}", _with_cores(vm_class, max(per, sum(counts))), since[v], tuple(counts), ready_s=ready)
            )
        return vms

    def _profit(self, dataflow: DynamicDataflow, view: ControlView) -> ProfitModel:
        """Theta's model over ``period_s``: the job's break-even costs per hour
        (``Pipeline.economics``, what the running job measures its profit by) when it has them,
        else the policy's ``cost_at_best``/``cost_at_worst`` (default: 2 and 1 executors' price)."""
        hours = self.period_s / 3600.0
        economics = getattr(view.graph, "economics", None)
        if economics is not None and self.cost_at_best is None:
            best_rate, worst_rate = economics.break_even_rates
            return ProfitModel.for_dataflow(dataflow, worst_rate * hours, best_rate * hours)
        best = self.cost_at_best if self.cost_at_best is not None else 2 * self.price_per_hour * hours
        worst = self.cost_at_worst if self.cost_at_worst is not None else best / 2
        return ProfitModel.for_dataflow(dataflow, worst, best)

    @staticmethod
    def _billing_s(view: ControlView) -> float:
        """How executors are billed (``Pipeline.economics``): in whole hours (the thesis's VMs,
        the default without economics) or by the second."""
        economics = getattr(view.graph, "economics", None)
        return 1.0 if economics is not None and economics.billing == "second" else 3600.0

    # ---- measuring -----------------------------------------------------------------------------
    def _measure(self, view: ControlView) -> None:
        """Remember each active alternate's measured cost and selectivity."""
        for pe in self.pes(view):
            if pe.op_id == "*":
                continue
            name = view.active_alternate(pe.op_id)
            cost, selectivity = self._op_cost(view, pe.op_id)
            if name is not None and cost > 0:
                self.measured[(pe.op_id, name)] = (cost, selectivity)

    def _op_cost(self, view: ControlView, op_id: str) -> tuple[float, float]:
        """(seconds of a core per input record, output records per input record) of an
        operator over the recent batches; (0, 1) before it has run."""
        batches = view.batches(self.window)
        rows_in = rows_out = useful = 0.0
        for m in batches:
            if op_id in m.operators:
                progress = m.operators[op_id]
                rows_in += float(progress.rows_in)
                rows_out += float(progress.rows_out)
                useful += progress.own_busy_s
        if rows_in <= 0:
            return 0.0, 1.0
        return useful / rows_in, rows_out / rows_in

    def _alternate(self, view: ControlView, pe: PE, name: str) -> tuple[float, float, float]:
        """(cost, selectivity, value) of one alternate of a PE."""
        if pe.op_id == "*":
            return 0.0, 1.0, 1.0
        alts = view.alternates(pe.op_id)
        alt = alts[name]
        active = view.active_alternate(pe.op_id)
        value = float(alt.value)
        if (pe.op_id, name) in self.measured and name == active:
            cost, selectivity = self.measured[(pe.op_id, name)]
            return cost, selectivity, value
        active_measured = self.measured.get((pe.op_id, active)) if active is not None else None
        declared, declared_active = alt.cost, alts[active].cost if active in alts else None
        if active_measured is not None and declared is not None and declared_active:
            cost = active_measured[0] * declared / declared_active  # declared costs in proportion
        elif (pe.op_id, name) in self.measured:
            cost = self.measured[(pe.op_id, name)][0]
        elif declared is not None:
            cost = float(declared)
        elif active_measured is not None:
            cost = active_measured[0]
        else:
            cost = 1e-4
        selectivity = alt.selectivity if alt.selectivity is not None else self.measured.get((pe.op_id, name), (0.0, 1.0))[1]
        return cost, float(selectivity), value

    # ---- answering -----------------------------------------------------------------------------
    def _actions(self, view: ControlView, pes: list[PE], inp: SchedulerInput, decision, rate: float) -> list[Action]:
        actions: list[Action] = []
        executors = sum(1 for vm_id, row in decision.mapping.items() if any(row))
        executors = max(1, min(executors, view.resources.max_executors or view.resources.executors))
        omega = observed_omega(view, self.window)
        why = (
            f"{self.scheduler.name}: {rate:,.0f} rows/s offered, Omega {omega if omega is None else round(omega, 3)} "
            f"(target {self.omega_target} +- {self.epsilon})"
        )
        for pe, a in zip(pes, decision.active):
            if pe.op_id == "*":
                continue
            name = pe.alternates[int(a)]
            if name != view.active_alternate(pe.op_id):
                actions.append(
                    SwitchAlternate(
                        target=pe.op_id,
                        alternate=name,
                        reason=f"{why}: alternate {name!r}",
                        expected={"value": float(view.alternates(pe.op_id)[name].value)},
                    )
                )
        if executors != view.resources.target:
            actions.append(
                Executors(count=executors, reason=f"{why}: hold {executors} executors", expected={"executors": executors})
            )
        return actions


def observed_omega(view: ControlView, last: int) -> float | None:
    """Throughput ratio over the last batches: rows admitted over rows offered (capped at 1)."""
    rate = view.offered_rate(last)
    batches = view.batches(last)
    seconds = sum(m.duration_s for m in batches)
    if rate is None or rate <= 0 or seconds <= 0:
        return None
    return min(1.0, sum(m.rows_in for m in batches) / seconds / rate)


def _with_cores(vm_class: VMClass, cores: int) -> VMClass:
    if cores == vm_class.cores:
        return vm_class
    from dataclasses import replace

    return replace(vm_class, cores=cores)


def ce_policy(**options) -> ElasticPolicy:
    return ElasticPolicy(GreedyScheduler(centralized=True), **options)


def plasticc_policy(forecaster: Forecaster | str | dict | None = "holt_winters", **options) -> ElasticPolicy:
    """PLAStiCC over a forecast of the input rate: by default Holt-Winters learned from the
    job's own arrivals (``control.forecast``); a name or ``{name: {options}}`` from YAML, or
    any ``forecaster(view, now_s, steps, step_s)``; None: no forecast (it then plans like CE)."""
    if isinstance(forecaster, (str, dict)):
        forecaster = make_forecaster(forecaster)
    return ElasticPolicy(PlasticcScheduler(), forecaster=forecaster, **options)


def ga_policy(**options) -> ElasticPolicy:
    return ElasticPolicy(GeneticScheduler(), **options)
