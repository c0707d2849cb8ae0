"""The elastic schedulers (BR, GA, CE, SH, PLAStiCC, averaging estimators) on plain inputs,
without the simulator: the interface the live engine will call."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from sluice.errors import PlanError
from sluice.models.dynamic import ProfitModel, ec2_m1_classes
from sluice.plan.elastic.base import Forecast, Placement, RunningVM, SchedulerInput, estimated_profit
from sluice.plan.elastic.brute import BruteForceScheduler
from sluice.plan.elastic.forecast import ESTIMATORS, horizon_errors, perturb
from sluice.plan.elastic.genetic import GeneticScheduler
from sluice.plan.elastic.greedy import GreedyScheduler, alternate_costs, cheapest_cover
from sluice.plan.elastic.plasticc import PlasticcScheduler
from sluice.sim.dataflows import linear_road, lrb_input_rates

CLASSES = ec2_m1_classes()


def lrb_input(rate=50.0, **kw) -> SchedulerInput:
    df = linear_road()
    return SchedulerInput(df, CLASSES, ProfitModel.thesis_lrb(df, 12, rate), lrb_input_rates(rate), **kw)


def as_placement(inp: SchedulerInput, decision) -> Placement:
    p = Placement(inp.dataflow, decision.active)
    running = {vm.vm_id: vm for vm in inp.vms}
    for vid, row in decision.mapping.items():
        c = decision.start[vid] if vid in decision.start else running[vid].vm_class
        p.add_vm(c, counts=row)
    return p


def running_from(decision, speed=1.0) -> tuple[RunningVM, ...]:
    out = []
    for k, (vid, row) in enumerate(decision.mapping.items()):
        c = decision.start.get(vid)
        out.append(RunningVM(f"vm-{k}", c, 0.0, row, speed=speed))
    return tuple(out)


def test_alternate_selection_differs_between_ce_and_sh():
    df = linear_road()
    # SH: own cost only. P2: 1/0.12, 0.8/0.08, 0.5/0.08 -> the second alternate
    _, sh = alternate_costs(df, centralized=False)
    assert sh[2] == 1
    # CE: c + s * downstream (P4 0.05 + P5 0.03 + P6 0.03, P7 0.05 = 0.16):
    # 1/0.28 = 3.57 > 0.8/0.24 = 3.33 > 0.5/(0.08 + 0.08) = 3.13 -> the first
    costs, ce = alternate_costs(df, centralized=True)
    assert costs[2, 0] == pytest.approx(0.28)
    assert costs[2, 2] == pytest.approx(0.16)
    assert ce[2] == 0
    # P7's alternates tie on value/cost (2.0): ">= best" keeps the later one
    assert sh[7] == ce[7] == 1


def test_cheapest_cover_uses_variable_sized_bins():
    pi2 = [c for c in CLASSES if c.core_speed == 2.0]
    three = cheapest_cover(pi2, 3)
    # three m1.medium ($0.261/h) beat m1.large + m1.medium ($0.262) and one m1.xlarge ($0.35)
    assert sorted(c.name for c in three) == ["m1.medium"] * 3
    assert sum(c.cores for c in cheapest_cover(pi2, 5)) >= 5
    assert cheapest_cover(pi2, 0) == []


@pytest.mark.parametrize(
    "scheduler",
    [BruteForceScheduler(), GeneticScheduler(generations=20), GreedyScheduler(True), GreedyScheduler(False)],
    ids=lambda s: s.name,
)
def test_deployment_meets_omega_hat_and_fits_the_vms(scheduler):
    inp = lrb_input(50.0)
    d = scheduler.deploy(inp)
    assert set(d.mapping) == set(d.start)  # everything is new at deployment
    for vid, row in d.mapping.items():
        assert 0 < sum(row) <= d.start[vid].cores
    p = as_placement(inp, d)
    assert float(p.estimate(inp.external_rate, inp.step_s).omega) >= inp.omega_target - inp.epsilon


def test_static_profit_ordering_br_ga_ce_sh():
    """Table 4.2's ordering of the deployments' profit at 50 msg/s: BR >= GA > CE > SH."""
    inp = lrb_input(50.0)
    theta = {}
    for s in [BruteForceScheduler(), GeneticScheduler(generations=40), GreedyScheduler(True), GreedyScheduler(False)]:
        theta[s.name] = estimated_profit(inp, as_placement(inp, s.deploy(inp)))
    assert theta["BR"] >= theta["GA"] - 1e-9
    assert theta["GA"] >= theta["CE"] - 1e-9
    assert theta["CE"] > theta["SH"]


def test_sharded_scheduler_never_shares_a_vm():
    d = GreedyScheduler(False).deploy(lrb_input(500.0))
    for row in d.mapping.values():
        assert sum(1 for x in row if x) == 1


def test_brute_force_refuses_large_cases():
    with pytest.raises(PlanError, match="small cases"):
        BruteForceScheduler(max_leaves=1000).deploy(lrb_input(2000.0))


def test_adapt_keeps_a_deployment_inside_the_band():
    inp = lrb_input(50.0)
    d = GreedyScheduler(True).deploy(inp)
    vms = running_from(d)
    p = as_placement(inp, d)
    omega = float(p.estimate(inp.external_rate, inp.step_s).omega)
    assert 0.75 < omega < 0.85
    again = GreedyScheduler(True).adapt(lrb_input(50.0, active=d.active, vms=vms, now_s=300))
    assert again.start == {} and again.stop == ()
    assert list(again.mapping.values()) == [vm.instances for vm in vms]


def test_adapt_scales_out_when_the_rate_doubles_and_in_when_it_halves():
    d = GreedyScheduler(True).deploy(lrb_input(100.0))
    vms = running_from(d)
    before = sum(sum(vm.instances) for vm in vms)
    up = lrb_input(200.0, active=d.active, vms=vms, now_s=300)
    d_up = GreedyScheduler(True).adapt(up)
    assert d_up.start, "a doubled rate needs new VMs"
    assert float(as_placement(up, d_up).estimate(up.external_rate, 300).omega) >= 0.8 - 1e-9
    down = lrb_input(40.0, active=d.active, vms=vms, now_s=300)
    d_down = GreedyScheduler(True).adapt(down)
    after = int(np.sum(d_down.instances))
    assert after < before
    assert float(as_placement(down, d_down).estimate(down.external_rate, 300).omega) >= 0.8 - 1e-9
    # idle VMs are released only at the end of their paid hour (section 4.8.2)
    assert d_down.stop == ()
    late = GreedyScheduler(True).adapt(lrb_input(40.0, active=d.active, vms=vms, now_s=3500))
    assert late.stop


def test_adapt_switches_to_a_lighter_alternate_when_resources_fall_short():
    inp = lrb_input(100.0)
    d = GreedyScheduler(True).deploy(inp)
    assert d.active[2] == 0  # the heavy, best-value P2 alternate
    slow = running_from(d, speed=0.7)  # the VMs run at 70 % of rated speed
    d2 = GreedyScheduler(True).adapt(lrb_input(100.0, active=d.active, vms=slow, now_s=300))
    assert d2.active[2] != 0


def test_estimators_summarise_forecasts():
    rates = np.array([[0, 10.0], [0, 30.0], [0, 20.0]])
    fc = Forecast(rates, {"vm-0": np.array([0.9, 0.5, 0.7])})
    vm = RunningVM("vm-0", CLASSES[0], 0.0, (1, 1, 1, 1, 1, 1, 1, 1), speed=0.8)
    df = linear_road()
    base = dict(
        dataflow=df,
        vm_classes=CLASSES,
        profit=ProfitModel.thesis_lrb(df, 12, 20),
        external_rate=np.array([0, 15.0] + [0] * 6),
        vms=(vm,),
    )
    inp = SchedulerInput(**{**base, "forecast": Forecast(np.pad(rates, ((0, 0), (0, 6))), fc.speeds)})
    r, s = ESTIMATORS["WPO"](inp)
    assert r[1] == 10.0 and s["vm-0"] == 0.9
    r, s = ESTIMATORS["WPP"](inp)
    assert r[1] == 30.0 and s["vm-0"] == 0.5
    r, s = ESTIMATORS["WPA"](inp)
    assert r[1] == pytest.approx(20.0) and s["vm-0"] == pytest.approx(0.7)
    r, s = ESTIMATORS["CAF"](inp)
    assert r[1] == 15.0 and s["vm-0"] == 0.8


def test_forecast_error_grows_over_the_horizon():
    e = horizon_errors(0.1, 4)
    np.testing.assert_allclose(e, [0.05, 0.1, 0.15, 0.2])
    assert e.mean() == pytest.approx(0.125)
    rng = np.random.default_rng(0)
    truth = np.full((4, 20000), 100.0)
    pred = perturb(truth, 0.1, 0.0, rng)
    spread = (pred / truth - 1).std(axis=1)
    np.testing.assert_allclose(spread, e, rtol=0.05)
    assert np.allclose(perturb(truth, 0.0, 0.0, rng), truth)
    assert perturb(truth, 0.0, 0.05, rng).mean() == pytest.approx(105.0)


def test_plasticc_starts_vms_ahead_of_a_forecast_surge():
    inp = lrb_input(100.0)
    d = GreedyScheduler(True).deploy(inp)
    vms = running_from(d)
    # the rate holds for the next step and doubles in the one after
    future = lrb_input_rates(np.array([100.0, 200.0, 200.0, 200.0]))
    fc = Forecast(future, {vm.vm_id: np.ones(4) for vm in vms})
    look = lrb_input(100.0, active=d.active, vms=vms, now_s=300, forecast=fc)
    plan = PlasticcScheduler().adapt(look)
    assert plan.start, "PLAStiCC launches VMs before the surge (start-up latency)"
    for vid, c in plan.start.items():  # right-sized (Alg. 5 line 29), not always the largest class
        used = sum(plan.mapping[vid])
        assert used <= c.cores
        assert not [
            o for o in CLASSES if o.core_speed == c.core_speed and o.cores >= used and o.price_per_hour < c.price_per_hour
        ]
    react = GreedyScheduler(True).adapt(look)
    assert not react.start, "the reactive scheduler only sees the current rate"


def test_plasticc_without_forecast_falls_back_to_reactive():
    inp = lrb_input(100.0)
    d = GreedyScheduler(True).deploy(inp)
    look = lrb_input(200.0, active=d.active, vms=running_from(d), now_s=300)
    a = PlasticcScheduler().adapt(look)
    b = GreedyScheduler(True).adapt(look)
    assert a.mapping == b.mapping and a.active == b.active


# ---- PLAStiCC's look-ahead on hand-computed traces: the backlog it starts from, and VM cost under the job's billing


def one_pe(alternates=((1.0, 0.01),), vm_price: float = 1.0, startup_s: float = 0.0):
    """One PE (value, seconds per message of each alternate), one 1-core VM class."""
    from sluice.models.dynamic import Alternate, DynamicDataflow, Operator, VMClass

    df = DynamicDataflow((Operator("p", tuple(Alternate(f"a{i}", v, c) for i, (v, c) in enumerate(alternates))),), ())
    return df, VMClass("one", 1, 1.0, 1e12, vm_price, startup_s)


def look_ahead(df, vm, rate: float, queue: float, steps: int = 4, dt: float = 10.0, billing_s: float = 3600.0, active=(0,)):
    return SchedulerInput(
        dataflow=df,
        vm_classes=(vm,),
        profit=ProfitModel.for_dataflow(df, 3.0, 6.0),
        external_rate=np.array([rate]),
        active=active,
        vms=(RunningVM("vm-0", vm, 0.0, (1,)),),
        now_s=100.0,
        step_s=dt,
        period_s=3600.0,
        omega_target=0.95,
        epsilon=0.05,
        queue=np.array([queue]),
        forecast=Forecast(np.full((steps, 1), rate)),
        billing_s=billing_s,
    )


def test_plasticc_plans_with_the_backlog_it_starts_from():
    from sluice.plan.elastic.plasticc import _Plan

    df, vm = one_pe()
    # 1 core at 0.01 s a message: 100 msg/s. 50 msg/s arrive for 4 steps of 10 s (2,000) on top of
    # 3,000 waiting: 1,000 go out a step, so 4,000 of 5,000 by the end: Omega 0.8 over the interval
    inp = look_ahead(df, vm, rate=50.0, queue=3000.0)
    plan = _Plan(inp)
    thr, _, _ = plan.evaluate()
    assert thr.processed[:, 0].tolist() == [1000.0, 1000.0, 1000.0, 1000.0]
    assert plan.window_omega(thr, 0, 3) == pytest.approx(0.8)
    assert plan.window_omega(thr, 3, 3) == pytest.approx(1000 / 2000)  # 1,500 left waiting + 500 arriving
    # so it adds a core now; with nothing waiting the one it has is enough
    assert len(PlasticcScheduler().adapt(inp).start) == 1
    assert len(PlasticcScheduler().adapt(look_ahead(df, vm, rate=50.0, queue=0.0)).start) == 0


def test_plasticc_weighs_a_new_vm_by_the_jobs_billing():
    # short of cores: the accurate alternate (value 1, 0.01 s) needs 2 cores at 150 msg/s, the cheap
    # one (value 0.6, 0.005 s) fits in 1. sigma = 0.4 / (6 - 3) per $ (Eq. 4.9). A VM billed by the
    # hour costs sigma * 1 $ = 0.133 of value; switching loses 0.4 * 40 s / 3600 s = 0.0044: switch.
    # Billed by the second the VM costs sigma * 40 s / 3600 = 0.0015 only: start one.
    df, vm = one_pe(((1.0, 0.01), (0.6, 0.005)))
    hourly = PlasticcScheduler().adapt(look_ahead(df, vm, rate=150.0, queue=0.0))
    assert hourly.active == (1,) and not hourly.start
    by_second = PlasticcScheduler().adapt(look_ahead(df, vm, rate=150.0, queue=0.0, billing_s=1.0))
    assert by_second.active == (0,) and len(by_second.start) == 1


def test_an_idle_operator_keeps_its_more_valuable_alternate():
    # no input: Omega is 1, over the band; CE re-selects alternates among the heavier ones only
    # (value over cost would otherwise pick the cheap one: 0.6 / 0.005 > 1 / 0.01)
    df, vm = one_pe(((1.0, 0.01), (0.6, 0.005)))
    assert GreedyScheduler(True).adapt(look_ahead(df, vm, rate=0.0, queue=0.0)).active == (0,)


# ---- PLAStiCC with Omega-hat held at every step (SchedulerInput.period_processed): hand-built inputs


def every_step(df, vm, rates, queue: float = 0.0, vms: int = 1, before: float = 0.0, max_vms=None, active=(0,), dt: float = 10.0):
    """One PE on 1-core VMs billed by the second, a forecast of ``rates`` (msg/s a step), the
    period's earlier processed messages ``before``."""
    return SchedulerInput(
        dataflow=df,
        vm_classes=(vm,),
        profit=ProfitModel.for_dataflow(df, 3.0, 6.0),
        external_rate=np.array([rates[0]]),
        active=active,
        vms=tuple(RunningVM(f"vm-{i}", vm, 0.0, (1,)) for i in range(vms)),
        now_s=100.0,
        step_s=dt,
        period_s=3600.0,
        omega_target=0.95,
        epsilon=0.05,
        queue=np.array([queue]),
        forecast=Forecast(np.array(rates, dtype=float)[:, None]),
        billing_s=1.0,
        max_vms=max_vms,
        period_processed=before,
    )


def planned_omegas(inp: SchedulerInput, decision) -> np.ndarray:
    """Every step's Omega (as PLAStiCC counts it) if the decision's deployment were held."""
    from sluice.plan.elastic.plasticc import _Plan

    plan = _Plan(inp)
    counts = [decision.mapping[vm.vm_id][0] if vm.vm_id in decision.mapping else 0 for vm in inp.vms]
    plan.counts[:, :, 0] = np.array(counts)[:, None]
    plan.active[:, 0] = decision.active[0]
    for _ in decision.start:
        v = plan.add_vm(inp.vm_classes[0], 0, 0)
        plan.counts[v, :, 0] = 1
    return plan.step_omegas(plan.evaluate()[0])


def test_plasticc_keeps_a_backlog_from_hiding_behind_a_quiet_future():
    # 3 VMs at 100 msg/s each, 3,000 waiting, the rate falling to nothing: over the interval
    # (the thesis's check) one VM clears it all by the end, so it releases two; held at every
    # step with 10,000 processed earlier, two VMs miss Omega-hat in the first step
    # ((10,000 + 2,000) / (10,000 + 3,000 + 1,000) = 0.857 < 0.9): all three stay
    df, vm = one_pe()
    rates = [100.0, 50.0, 0.0, 0.0, 0.0, 0.0]
    inp = every_step(df, vm, rates, queue=3000.0, vms=3, before=10_000.0)
    held = PlasticcScheduler().adapt(inp)
    assert sum(1 for row in held.mapping.values() if any(row)) == 3 and not held.start
    assert (planned_omegas(inp, held) >= 0.9).all()
    thesis = PlasticcScheduler().adapt(dataclasses.replace(inp, period_processed=None))
    assert sum(1 for row in thesis.mapping.values() if any(row)) < 3


def test_plasticc_switches_alternates_when_no_executor_can_join_in_time():
    # the accurate alternate (value 1, 0.01 s) takes 100 msg/s a core, the rate triples at step 1
    # (100 -> 300 msg/s). A VM takes 30 s to join: too late for steps 1 and 2, so the lighter
    # alternate (0.6, 0.002 s: 500 msg/s) runs from step 1 and Omega stays >= 0.9 at every step
    df, vm = one_pe(((1.0, 0.01), (0.6, 0.002)), startup_s=30.0)
    inp = every_step(df, vm, [100.0, 300.0, 300.0, 300.0, 300.0, 300.0], before=2000.0)
    now = PlasticcScheduler().adapt(inp)
    assert now.active == (0,)  # not yet: the switch is planned for step 1
    later = PlasticcScheduler().adapt(every_step(df, vm, [300.0] * 6, queue=0.0, before=3000.0))
    assert later.active == (1,)
    assert (planned_omegas(every_step(df, vm, [300.0] * 6, before=3000.0), later) >= 0.9).all()


def test_plasticc_holds_no_more_vms_than_the_job_may():
    # 300 msg/s need 3 accurate cores; with at most 2 VMs the lighter alternate on 1 meets the rate
    df, vm = one_pe(((1.0, 0.01), (0.6, 0.002)))
    capped = PlasticcScheduler().adapt(every_step(df, vm, [300.0] * 4, before=3000.0, max_vms=2))
    assert len(capped.mapping) <= 2 and capped.active == (1,)
    free = PlasticcScheduler().adapt(every_step(df, vm, [300.0] * 4, before=3000.0))
    assert free.active == (0,) and len(free.mapping) == 3  # by the second 2 more VMs cost less value


def test_plasticc_counts_the_stall_a_joining_executor_brings():
    # rate 50 then 150 msg/s from step 2; one VM serves 100 (accurate) or 200 (light). A VM started
    # now joins at 10 s and its workers take 10 s more (warmup): the job makes no progress in step 1.
    # With nothing processed before, step 2 misses Omega-hat (2,000 of 2,500) and a VM's stall
    # would take step 1 to 0.5: the light alternate is planned from step 2 (nothing now). With
    # 8,000 processed before, step 4 is the first to miss ((8,000 + 4,000) / 13,500); the stall
    # in step 1 keeps it at (8,000 + 500) / 9,000 = 0.94, and the VM (0.5 an hour, 60 s by the
    # second: 0.4 / 3 * 0.0083 = 0.0011 of value) costs less than the light alternate for steps
    # 4 and 5 (0.4 * 20 / 3,600 = 0.0022): the VM starts now, and no step misses Omega-hat.
    from sluice.models.dynamic import VMClass

    df, _ = one_pe(((1.0, 0.01), (0.6, 0.005)))
    vm = VMClass("one", 1, 1.0, 1e12, 0.5, 20.0, warmup_s=10.0)
    rates = [50.0, 50.0, 150.0, 150.0, 150.0, 150.0]
    fresh = PlasticcScheduler().adapt(every_step(df, vm, rates, before=0.0))
    assert not fresh.start and fresh.active == (0,)
    inp = every_step(df, vm, rates, before=8000.0)
    long_run = PlasticcScheduler().adapt(inp)
    assert len(long_run.start) == 1 and long_run.active == (0,)
    assert (planned_omegas(inp, long_run) >= 0.9).all()


def test_plasticc_leaves_a_step_it_cannot_save_and_meets_the_rest():
    # 5,000 waiting at 100 msg/s with VMs 30 s away: step 0 cannot meet Omega-hat whatever it
    # does, the plan still meets it from the step on where the backlog can be cleared
    df, vm = one_pe(startup_s=30.0)
    inp = every_step(df, vm, [100.0] * 8, queue=5000.0, before=1000.0, max_vms=4)
    d = PlasticcScheduler().adapt(inp)
    assert d.start  # executors now, for the steps they can still save
    assert d.elapsed_s < 5.0


def test_plasticc_counts_a_micro_batchs_latency():
    # 50 msg/s on a 100 msg/s core, two steps of 10 s: all goes out in the fluid model; with
    # batches of 5 s, at each step's end the rows out are those out (and arrived) 5 s before:
    # 250 of 500 and 750 of 1,000, pooled with 1,000 processed earlier: 0.833 and 0.875
    from sluice.plan.elastic.plasticc import _Plan

    df, vm = one_pe()
    fluid = every_step(df, vm, [50.0, 50.0], before=1000.0)
    plan = _Plan(fluid)
    assert plan.step_omegas(plan.evaluate()[0]).tolist() == pytest.approx([1.0, 1.0])
    plan = _Plan(dataclasses.replace(fluid, batch_s=5.0))
    assert plan.step_omegas(plan.evaluate()[0]).tolist() == pytest.approx([1250 / 1500, 1750 / 2000])


@pytest.mark.parametrize("steps", [4, 6, 8])
def test_plasticc_scales_out_though_a_joining_executors_stall_costs_steps_already_missed(steps):
    # one executor at 350 msg/s, 600 msg/s forecast and 1,500 waiting: every step misses
    # Omega-hat. A VM started now (15 s to join, its last 3 s a warm-up during which the job
    # stalls) holds up 1,050 msg in step 2, a step past saving anyway, and from step 3 on
    # processes 1,750 msg more a step: the stall is paid once, the gain by the interval's end
    # outweighs it, so the VM starts now (weighed against every step it made no better, the
    # stall vetoed it and PLAStiCC held one executor whatever the look-ahead)
    from sluice.models.dynamic import VMClass

    df, _ = one_pe(((1.0, 1 / 350),))
    vm = VMClass("executor", 1, 1.0, 1e12, 1.0, 15.0, warmup_s=3.0)
    inp = every_step(df, vm, [600.0] * steps, queue=1500.0, before=1200.0, max_vms=2, dt=5.0)
    d = PlasticcScheduler().adapt(inp)
    assert len(d.start) == 1
    held, grown = planned_omegas(inp, PlasticcScheduler().adapt(dataclasses.replace(inp, max_vms=1))), planned_omegas(inp, d)
    assert (held < 0.9).all()  # one executor misses Omega-hat at every step
    assert grown[2] < held[2]  # the step of the stall is worse
    assert grown[-1] > held[-1] and (grown[3:] > held[3:]).all()  # every step after it better
