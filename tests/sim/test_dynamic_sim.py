"""The discrete-time simulator: traces, cloud billing, scenarios and whole runs."""

from __future__ import annotations

import numpy as np
import pytest

from sluice.errors import ConfigError
from sluice.models.dynamic import ec2_m1_classes
from sluice.plan.elastic.base import Decision
from sluice.sim.cloud import Cloud
from sluice.sim.scenario import Scenario, build_dataflow, build_rates, simulate
from sluice.sim.traces import VMTraces, random_walk_rates, sinusoid_rates


def test_vm_traces_match_the_thesis_measurements():
    traces = VMTraces(seed=3, n_steps=144)
    speeds = np.array([traces.speed(i) for i in range(1500)])
    assert speeds.max() <= 1.0 and speeds.min() > 0
    slow = (speeds.mean(axis=1) < 0.8).mean()
    assert slow == pytest.approx(0.23, abs=0.04)  # 23 % of EC2 VMs below 0.8 of rated
    change = np.abs(np.diff(speeds, axis=1)) / speeds[:, :-1]
    assert (change > 0.2).mean() == pytest.approx(0.25, abs=0.04)  # a quarter of steps move > 20 %


def test_traces_are_deterministic_and_order_independent():
    a, b = VMTraces(seed=5, n_steps=20), VMTraces(seed=5, n_steps=20)
    b.speed(7)
    np.testing.assert_array_equal(a.speed(3), b.speed(3))
    assert not np.array_equal(a.speed(3), a.speed(4))
    assert not np.array_equal(a.speed(3), VMTraces(seed=6, n_steps=20).speed(3))
    assert np.all(VMTraces(seed=5, n_steps=20, variable=False).speed(3) == 1.0)


def test_random_walk_stays_within_half_of_the_mean():
    r = random_walk_rates(8000.0, 2000, seed=1)
    assert r.min() >= 4000.0 - 1e-9 and r.max() <= 12000.0 + 1e-9
    assert abs(r.mean() / 8000.0 - 1) < 0.2
    np.testing.assert_array_equal(r, random_walk_rates(8000.0, 2000, seed=1))


def test_sinusoid_spans_trough_to_peak_over_a_day():
    r = sinusoid_rates(75.0, 2.0, 288, 300.0, seed=1, noise=0.0)
    assert r[0] == pytest.approx(2.0) and r.max() == pytest.approx(75.0, rel=1e-3)
    assert np.argmax(r) == 144  # the peak 12 hours in
    noisy = sinusoid_rates(75.0, 2.0, 288, 300.0, seed=1, noise=0.2)
    assert np.all(np.abs(noisy / r - 1) <= 0.2 + 1e-9)


def test_cloud_bills_whole_hours_and_honours_startup_latency():
    small = ec2_m1_classes(startup_s=120.0)[0]
    cloud = Cloud(2, VMTraces(seed=1, n_steps=48, variable=False), step_s=300.0)
    cloud.apply(Decision((0, 0), {"new-0": (1, 0)}, {"new-0": small}, ()), 0.0, ready_now=True)
    cloud.apply(Decision((0, 0), {"vm-0": (1, 0), "new-0": (0, 1)}, {"new-0": small}, ()), 3600.0)
    counts, speed, _ = cloud.step_state(12)  # the step starting at 1 h
    np.testing.assert_allclose(speed, [1.0, 0.6])  # the new VM is up for 180 of 300 s
    assert cloud.cost(3660.0) == pytest.approx(2 * small.price_per_hour + small.price_per_hour)
    cloud.apply(Decision((0, 0), {"vm-0": (1, 0)}, {}, ("vm-1",)), 3900.0)
    assert cloud.cost(10 * 3600.0) == pytest.approx(10 * small.price_per_hour + small.price_per_hour)


def test_scenario_from_yaml_rejects_unknown_keys(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("scheduler: CE\nspeed: fast\n")
    with pytest.raises(ConfigError, match="speed"):
        Scenario.from_yaml(path)
    good = tmp_path / "good.yaml"
    good.write_text("scheduler: SH\nrate: {kind: constant, mean: 20}\nhours: 1\n")
    sc = Scenario.from_yaml(good)
    assert sc.name == "good" and sc.n_steps == 12


def test_simulation_is_deterministic_by_seed():
    sc = Scenario(hours=2, rate={"kind": "random_walk", "mean": 100.0}, seed=4)
    a, b = simulate(sc), simulate(sc)
    np.testing.assert_array_equal(a.omega, b.omega)
    np.testing.assert_array_equal(a.cost, b.cost)
    c = simulate(Scenario(hours=2, rate={"kind": "random_walk", "mean": 100.0}, seed=5))
    assert not np.array_equal(a.omega, c.omega)


def test_static_run_without_variability_holds_omega_and_bills_every_hour():
    sc = Scenario(hours=3, rate={"kind": "constant", "mean": 50.0}, infra_variability=False, adapt=False)
    r = simulate(sc)
    assert np.allclose(r.omega, r.omega[0]) and r.omega[0] >= 0.8 - 1e-9
    hourly = r.cost[11]  # the bill after the first hour
    assert r.cost[-1] == pytest.approx(3 * hourly)
    assert r.summary()["violations"] == 0


def test_adaptation_recovers_qos_that_a_static_deployment_loses():
    base = dict(hours=6, rate={"kind": "random_walk", "mean": 200.0}, seed=2)
    static = simulate(Scenario(adapt=False, **base)).summary()
    adaptive = simulate(Scenario(adapt=True, **base)).summary()
    assert adaptive["omega"] > static["omega"]
    assert adaptive["omega"] >= 0.75


def test_bounded_queue_carries_backlog_instead_of_shedding():
    base = dict(hours=1, rate={"kind": "random_walk", "mean": 100.0}, seed=3, adapt=False)
    shed = simulate(Scenario(queue_intervals=0.0, **base))
    kept = simulate(Scenario(queue_intervals=2.0, **base))
    assert kept.shed.sum() < shed.shed.sum()


def test_single_implementation_dataflow_has_constant_value():
    sc = Scenario(hours=1, single_implementation=True)
    r = simulate(sc)
    assert np.all(r.gamma == 1.0)
    assert build_dataflow(sc).n_alternates.max() == 1


def test_synthetic_scenario_has_three_input_streams():
    sc = Scenario(dataflow="synthetic", rate={"kind": "sinusoid", "peak": 75, "trough": 2}, hours=1)
    df = build_dataflow(sc)
    assert df.n_ops == 30 and len(df.inputs) == 3 and len(df.outputs) == 3
    assert 35 <= int(df.n_alternates.sum()) <= 75
    rates = build_rates(sc, df)
    assert np.count_nonzero(rates.sum(axis=0)) == 3
    r = simulate(
        Scenario(dataflow="synthetic", rate={"kind": "sinusoid", "peak": 75, "trough": 2}, hours=1, scheduler="PLASTICC")
    )
    assert len(r.omega) == 12
