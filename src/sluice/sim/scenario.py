"""Scenarios and the discrete-time simulation loop (thesis sections 4.9 and 5.4).

A :class:`Scenario` names a dataflow, an input-rate process, the cloud (VM classes, start-up
latency, performance variability), a scheduler and its QoS goal; :func:`simulate` runs it:

    t = 0          the scheduler deploys for the estimated (mean) rate and rated VMs
    every step k   Eq. 4.4-4.7 with the *actual* rates and VM speeds give Omega(t); Gamma(t)
                   (Eq. 4.3) and the bill mu(t) (Eq. 4.2) are recorded
                   the scheduler sees what monitoring measured in step k (and forecasts, if
                   it uses them) and its decision takes effect at the start of step k + 1

Each step costs one Eq. 4.4-4.7 scan over the operators (numpy over VMs and edges) plus the
scheduler's own time: a 12-hour run at 5-minute steps (144 steps) of Linear Road at 8,000
msg/s (about 600 VMs) takes about 3.5 s of CPU with CE, most of it in the scheduler. Runs
are deterministic by ``seed``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np

from sluice.errors import ConfigError
from sluice.models.dynamic import (
    DynamicDataflow,
    ProfitModel,
    VMClass,
    application_value,
    ec2_m1_classes,
    edge_network,
    operator_capacity,
    throughput,
)
from sluice.plan.elastic.base import Forecast, SchedulerInput
from sluice.plan.elastic.brute import BruteForceScheduler
from sluice.plan.elastic.forecast import ESTIMATORS, perturb
from sluice.plan.elastic.genetic import GeneticScheduler
from sluice.plan.elastic.greedy import GreedyScheduler
from sluice.plan.elastic.plasticc import PlasticcScheduler
from sluice.sim.cloud import Cloud
from sluice.sim.dataflows import linear_road, lrb_input_rates, synthetic
from sluice.sim.traces import VMTraces, _rng, random_walk_rates, sinusoid_rates


@dataclass
class Scenario:
    """Everything one simulated run needs; loadable from YAML (see examples/scenarios/)."""

    name: str = "scenario"
    dataflow: str = "linear-road"  # 'linear-road' or 'synthetic'
    dataflow_seed: int = 7
    single_implementation: bool = False  # keep only the best-value alternate per PE
    hours: float = 12.0
    step_s: float = 300.0
    rate: dict = field(default_factory=lambda: {"kind": "random_walk", "mean": 50.0})
    infra_variability: bool = True
    scheduler: str = "CE"
    scheduler_options: dict = field(default_factory=dict)
    adapt: bool = True
    omega_target: float = 0.8
    epsilon: float = 0.05
    break_even: dict | None = None  # {'cost_at_gamma_max': $, 'cost_at_gamma_min': $, 'offset': x}
    startup_s: float = 120.0
    queue_intervals: float = 0.0  # backlog kept, in intervals of input; the rest is shed
    forecast: dict = field(default_factory=lambda: {"horizon_steps": 4, "error": 0.0, "bias": 0.0, "every_steps": 2})
    seed: int = 1

    @property
    def n_steps(self) -> int:
        return round(self.hours * 3600.0 / self.step_s)

    @classmethod
    def from_dict(cls, data: dict) -> Scenario:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"scenario: unknown keys {sorted(unknown)} (known: {sorted(known)})")
        sc = cls(**data)
        if sc.dataflow not in ("linear-road", "synthetic"):
            raise ConfigError(f"scenario {sc.name!r}: dataflow must be 'linear-road' or 'synthetic', got {sc.dataflow!r}")
        if sc.step_s <= 0 or sc.hours <= 0:
            raise ConfigError(f"scenario {sc.name!r}: hours and step_s must be > 0")
        return sc

    @classmethod
    def from_yaml(cls, path: str | Path) -> Scenario:
        import yaml

        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except OSError as exc:
            raise ConfigError(f"cannot read scenario {path}: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"scenario {path}: the top level must be a mapping")
        data.setdefault("name", Path(path).stem)
        return cls.from_dict(data)

    def to_dict(self) -> dict:
        return asdict(self)


# ----------------------------------------------------------------------------- building


def build_dataflow(sc: Scenario) -> DynamicDataflow:
    df = linear_road() if sc.dataflow == "linear-road" else synthetic(sc.dataflow_seed)
    return df.single_implementation() if sc.single_implementation else df


def build_rates(sc: Scenario, df: DynamicDataflow) -> np.ndarray:
    """External rates (steps x operators) and the rate the deployment is planned for."""
    r = dict(sc.rate)
    kind = r.pop("kind", "constant")
    n = sc.n_steps
    inputs = list(df.inputs)
    if sc.dataflow == "linear-road":
        streams = 1
    else:
        streams = len(inputs)
    series = []
    for s in range(streams):
        if kind == "constant":
            series.append(np.full(n, float(r.get("mean", 50.0))))
        elif kind == "random_walk":
            series.append(
                random_walk_rates(
                    float(r.get("mean", 50.0)),
                    n,
                    sc.seed,
                    float(r.get("bound", 0.5)),
                    float(r.get("step_sd", 0.08)),
                    stream=f"rate{s}",
                )
            )
        elif kind == "sinusoid":
            series.append(
                sinusoid_rates(
                    float(r.get("peak", 75.0)),
                    float(r.get("trough", 2.0)),
                    n,
                    sc.step_s,
                    sc.seed,
                    float(r.get("period_s", 86400.0)),
                    float(r.get("noise", 0.2)),
                    float(r.get("phase_s", 0.0)),
                    stream=f"sine{s}",
                )
            )
        else:
            raise ConfigError(f"scenario {sc.name!r}: rate kind must be constant, random_walk or sinusoid, got {kind!r}")
    if sc.dataflow == "linear-road":
        return lrb_input_rates(series[0])
    out = np.zeros((n, df.n_ops))
    for s, i in enumerate(inputs):
        out[:, i] = series[s]
    return out


def planned_rate(sc: Scenario, df: DynamicDataflow) -> np.ndarray:
    """The user's estimate the initial deployment is made for: the process's mean level."""
    r = sc.rate
    if r.get("kind") == "sinusoid":
        level = (float(r.get("peak", 75.0)) + float(r.get("trough", 2.0))) / 2.0
    else:
        level = float(r.get("mean", 50.0))
    if sc.dataflow == "linear-road":
        return lrb_input_rates(level)
    out = np.zeros(df.n_ops)
    out[list(df.inputs)] = level
    return out


def build_profit(sc: Scenario, df: DynamicDataflow) -> ProfitModel:
    """Break-even costs: as given, else the thesis's LRB rule (C = 0.5 / 1.0 x T x rate / 10,
    section 4.9.2), applied to any dataflow with the mean input rate per input stream."""
    if sc.break_even:
        be = sc.break_even
        return ProfitModel.for_dataflow(df, float(be["cost_at_gamma_min"]), float(be["cost_at_gamma_max"]), be.get("offset"))
    mean = float(planned_rate(sc, df)[list(df.inputs)].max())
    return ProfitModel.thesis_lrb(df, sc.hours, mean)


def make_scheduler(name: str, options: dict | None = None, centralized_default: bool = True):
    """Scheduler by name: BR, GA, CE, SH, PLASTICC, or CE driven by CAF/WAAF/WPA/WPO/WPP."""
    opts = dict(options or {})
    key = name.upper()
    if key == "BR":
        return BruteForceScheduler(**opts)
    if key == "GA":
        return GeneticScheduler(**opts)
    if key == "CE":
        return GreedyScheduler(centralized=True, **opts)
    if key == "SH":
        return GreedyScheduler(centralized=False, **opts)
    if key == "PLASTICC":
        return PlasticcScheduler(**opts)
    if key in ESTIMATORS:
        return GreedyScheduler(centralized=True, estimator=ESTIMATORS[key], name=key, **opts)
    raise ConfigError(f"unknown scheduler {name!r} (BR, GA, CE, SH, PLASTICC, CAF, WAAF, WPA, WPO, WPP)")


# ----------------------------------------------------------------------------- result


@dataclass
class SimulationResult:
    scenario: Scenario
    time_s: np.ndarray
    rate: np.ndarray  # total external msg/s per step
    omega: np.ndarray
    gamma: np.ndarray
    cost: np.ndarray  # cumulative bill at the end of each step
    profit: np.ndarray  # Theta so far: mean Gamma so far against the bill so far
    vms: np.ndarray
    cores: np.ndarray
    shed: np.ndarray  # messages dropped by bounded queues per step
    decide_s: np.ndarray  # scheduler time per step (index 0: deployment)
    profit_model: ProfitModel

    def summary(self) -> dict:
        sc = self.scenario
        lo, hi = sc.omega_target - sc.epsilon, sc.omega_target + sc.epsilon
        return {
            "scenario": sc.name,
            "scheduler": sc.scheduler,
            "omega": float(self.omega.mean()),
            "gamma": float(self.gamma.mean()),
            "cost": float(self.cost[-1]),
            "profit": float(self.profit[-1]),
            "violations": int((self.omega < lo).sum()),  # steps below Omega-hat - eps
            "excursions": int(((self.omega < lo) | (self.omega > hi)).sum()),  # chi: outside the band
            "max_vms": int(self.vms.max()),
            "mean_cores": float(self.cores.mean()),
            "deploy_s": float(self.decide_s[0]),
            "adapt_s_mean": float(self.decide_s[1:].mean()) if len(self.decide_s) > 1 else 0.0,
            "meets_qos": bool(self.omega.mean() >= lo),
        }


# ----------------------------------------------------------------------------- the loop


def simulate(
    sc: Scenario,
    progress: Callable[[int, int], None] | None = None,
    scheduler=None,
    vm_classes: tuple[VMClass, ...] | None = None,
) -> SimulationResult:
    df = build_dataflow(sc)
    classes = vm_classes or ec2_m1_classes(sc.startup_s)
    rates = build_rates(sc, df)
    n = sc.n_steps
    dt = sc.step_s
    profit = build_profit(sc, df)
    sched = scheduler or make_scheduler(sc.scheduler, sc.scheduler_options)
    cloud = Cloud(df.n_ops, VMTraces(sc.seed, n, sc.infra_variability), dt)
    fc_cfg = {"horizon_steps": 4, "error": 0.0, "bias": 0.0, "every_steps": 2, **(sc.forecast or {})}

    def base_input(**kw) -> SchedulerInput:
        return SchedulerInput(
            df, classes, profit, period_s=sc.hours * 3600.0, step_s=dt, omega_target=sc.omega_target, epsilon=sc.epsilon, **kw
        )

    out = {k: np.zeros(n) for k in ("omega", "gamma", "cost", "profit", "vms", "cores", "shed", "decide")}
    t0 = time.perf_counter()
    decision = sched.deploy(base_input(external_rate=planned_rate(sc, df)))
    out["decide"][0] = time.perf_counter() - t0
    cloud.apply(decision, 0.0, ready_now=True)
    active = np.array(decision.active)
    queue = np.zeros(df.n_ops)
    gamma_sum = 0.0
    forecast_cache: tuple[int, Forecast] | None = None
    speed_hist: dict[str, list[float]] = {}

    for k in range(n):
        counts, speed, bw = cloud.step_state(k)
        if len(speed):
            cap = operator_capacity(counts, speed)
            local, remote = edge_network(df, counts, speed, bw)
        else:
            cap, local, remote = np.zeros(df.n_ops), None, None
        thr = throughput(df, active, cap, rates[k], dt, queue, local, remote)
        offered = queue + thr.input_rate * dt
        left = offered - thr.processed
        keep = np.minimum(left, sc.queue_intervals * thr.input_rate * dt)
        out["shed"][k] = float((left - keep).sum())
        queue = keep
        out["omega"][k] = float(thr.omega)
        out["gamma"][k] = float(application_value(df, active))
        gamma_sum += out["gamma"][k]
        end = (k + 1) * dt
        out["cost"][k] = cloud.cost(end)
        out["profit"][k] = float(profit.profit(gamma_sum / (k + 1), out["cost"][k]))
        running = cloud.running(k * dt)
        out["vms"][k] = len(running)
        out["cores"][k] = sum(vm.vm_class.cores for vm in running)
        if progress:
            progress(k + 1, n)
        if not sc.adapt or k == n - 1:
            continue
        observed = cloud.observed(k)
        for vm in observed:
            speed_hist.setdefault(vm.vm_id, []).append(vm.speed)
        forecast = None
        if fc_cfg["horizon_steps"] > 0 and getattr(sched, "uses_forecast", False):
            every = max(int(fc_cfg["every_steps"]), 1)
            if forecast_cache is None or k % every == 0:
                forecast_cache = (
                    k,
                    _forecast(sc, cloud, rates, k, int(fc_cfg["horizon_steps"]), float(fc_cfg["error"]), float(fc_cfg["bias"])),
                )
            forecast = _shift(forecast_cache[1], k - forecast_cache[0], observed, cloud, k)
        inp = base_input(
            external_rate=rates[k],
            active=tuple(int(a) for a in active),
            vms=observed,
            now_s=end,
            observed_omega=float(thr.omega),
            queue=queue if sc.queue_intervals > 0 else None,
            forecast=forecast,
            rate_history=rates[max(0, k - 11) : k + 1],
            speed_history={vid: np.array(v[-12:]) for vid, v in speed_hist.items()},
        )
        t0 = time.perf_counter()
        decision = sched.adapt(inp)
        out["decide"][k + 1] = time.perf_counter() - t0
        cloud.apply(decision, end)
        active = np.array(decision.active)

    return SimulationResult(
        sc,
        np.arange(n) * dt,
        rates.sum(axis=1),
        out["omega"],
        out["gamma"],
        out["cost"],
        out["profit"],
        out["vms"],
        out["cores"],
        out["shed"],
        out["decide"],
        profit,
    )


def _forecast(sc: Scenario, cloud: Cloud, rates: np.ndarray, k: int, horizon: int, error: float, bias: float) -> Forecast:
    """The oracle with the chapter-5 error model: true values of steps k+1..k+horizon, perturbed."""
    n = len(rates)
    idx = np.minimum(np.arange(k + 1, k + 1 + horizon), n - 1)
    rng = _rng(sc.seed, "forecast", k)
    fr = perturb(rates[idx], error, bias, rng)
    vms = cloud.running((k + 1) * sc.step_s)
    if not vms:
        return Forecast(fr, {})
    true = np.stack([cloud.traces.speed(vm.trace)[idx] for vm in vms], axis=1)  # horizon x VMs
    # a biased oracle errs the pessimistic way on both: rates up, speeds down (bias sign flipped)
    pred = np.clip(perturb(true, error, -bias, rng), 0.05, None)
    return Forecast(fr, {vm.vm_id: pred[:, j] for j, vm in enumerate(vms)})


def _shift(fc: Forecast, by: int, observed, cloud: Cloud, k: int) -> Forecast:
    """A forecast made ``by`` steps ago, re-aligned to start at step k+1."""
    if by == 0:
        known = fc.speeds
    else:
        known = {vid: np.concatenate([s[by:], np.repeat(s[-1:], by)]) for vid, s in fc.speeds.items()}
    rates = fc.rates if by == 0 else np.concatenate([fc.rates[by:], np.repeat(fc.rates[-1:], by, axis=0)])
    speeds = {vm.vm_id: known.get(vm.vm_id, np.ones(fc.steps)) for vm in observed}
    return Forecast(rates, speeds)
