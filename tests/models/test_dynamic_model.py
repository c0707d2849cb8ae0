"""Every equation of the dynamic-dataflow model (thesis Eq. 4.2 to 4.10) on hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.errors import ModelError
from sluice.models.dynamic import (
    Alternate,
    DynamicDataflow,
    Operator,
    ProfitModel,
    application_value,
    billed_hours,
    edge_network,
    operator_capacity,
    required_capacity,
    throughput,
    value_bounds,
    vm_cost,
    vm_weight,
)
from sluice.sim.dataflows import linear_road


def chain(*alts: tuple[float, float, float], message_bytes: float = 100.0) -> DynamicDataflow:
    ops = tuple(Operator(f"op{i}", (Alternate(f"a{i}", *a),)) for i, a in enumerate(alts))
    return DynamicDataflow(ops, tuple((i, i + 1) for i in range(len(ops) - 1)), message_bytes)


# ----------------------------------------------------------------------------- Eq. 4.2


@pytest.mark.parametrize("minutes, hours", [(0, 0), (1, 1), (60, 1), (61, 2), (119, 2), (120, 2), (121, 3)])
def test_billing_charges_whole_started_hours(minutes, hours):
    assert billed_hours(0.0, np.inf, minutes * 60.0) == hours


def test_billing_stops_at_release_and_prices_per_hour():
    # released after 30 minutes: one hour, however late we look
    assert billed_hours(0.0, 1800.0, 5 * 3600.0) == 1
    # started at minute 10, now minute 71: 61 minutes active = 2 hours
    costs = vm_cost([0.0, 600.0], [np.inf, np.inf], 71 * 60.0, [0.35, 0.044])
    np.testing.assert_allclose(costs, [2 * 0.35, 2 * 0.044])


# ----------------------------------------------------------------------------- Eq. 4.3


def test_application_value_is_mean_of_active_alternates():
    df = linear_road()
    active = np.zeros(df.n_ops, dtype=int)
    active[2], active[7] = 2, 0  # P2 gamma 0.5, P7 gamma 0.6
    assert application_value(df, active) == pytest.approx((6 + 0.5 + 0.6) / 8)
    lo, hi = value_bounds(df)
    assert (lo, hi) == (pytest.approx(0.8875), pytest.approx(1.0))


def test_alternate_value_must_be_relative():
    with pytest.raises(ModelError, match="gamma"):
        Alternate("x", 1.5, 0.1)


# ----------------------------------------------------------------------------- Eq. 4.4-4.7


def test_omega_is_one_with_enough_cores():
    df = chain((1, 0.1, 1), (1, 0.2, 1))
    r = throughput(df, [0, 0], [1.0, 2.0], [10.0, 0.0], dt=300)
    assert r.omega == pytest.approx(1.0)
    np.testing.assert_allclose(r.output_rate, [10, 10])


def test_omega_limited_by_cores_of_an_upstream_bottleneck():
    # op0 costs 0.1 s/msg on one reference core: at most 10 msg/s of 20 arriving
    df = chain((1, 0.1, 1), (1, 0.1, 1))
    r = throughput(df, [0, 0], [1.0, 5.0], [20.0, 0.0], dt=60)
    np.testing.assert_allclose(r.output_rate, [10, 10])
    # the output PE itself keeps up with its input (its own Omega_i is 1) ...
    assert r.operator_omega[1] == pytest.approx(1.0)
    # ... but the application only delivers half of what its input rate asks for (Def. 5)
    assert r.omega == pytest.approx(0.5)


def test_omega_capped_by_bandwidth_with_rates_not_counts():
    # 1000 B/s between the VMs and 100-byte messages: at most 10 msg/s cross the edge.
    df = chain((1, 0.01, 1), (1, 0.01, 1), message_bytes=100.0)
    r = throughput(df, [0, 0], [10.0, 10.0], [20.0, 0.0], dt=300, edge_local_fraction=[0.0], edge_remote_bandwidth=[1000.0])
    assert r.input_rate[1] == pytest.approx(10.0)  # Eq. 4.5 as printed would allow 3,000 msg/s here
    assert r.omega == pytest.approx(0.5)
    # collocated instances exchange in memory: no cap
    r = throughput(df, [0, 0], [10.0, 10.0], [20.0, 0.0], dt=300, edge_local_fraction=[1.0], edge_remote_bandwidth=[1000.0])
    assert r.omega == pytest.approx(1.0)


def test_selectivity_below_one_cascades_downstream():
    df = chain((1, 0.01, 0.5), (1, 0.01, 0.5), (1, 0.02, 1.0))
    r = throughput(df, [0, 0, 0], [100.0, 100.0, 100.0], [100.0, 0, 0], dt=60)
    np.testing.assert_allclose(r.input_rate, [100, 50, 25])
    np.testing.assert_allclose(required_capacity(df, [0, 0, 0], r.input_rate), [1.0, 0.5, 0.5])
    # op1 gets a quarter of the cores it needs: op2 sees 12.5 msg/s of an ideal 25
    r = throughput(df, [0, 0, 0], [100.0, 0.125, 100.0], [100.0, 0, 0], dt=60)
    assert r.input_rate[2] == pytest.approx(6.25)
    assert r.omega == pytest.approx(0.25)


def test_multi_merge_sums_incoming_flows():
    ops = tuple(Operator(f"o{i}", (Alternate("a", 1, 0.01, s),)) for i, s in enumerate([1.0, 2.0, 1.0]))
    df = DynamicDataflow(ops, ((0, 2), (1, 2)))
    r = throughput(df, [0, 0, 0], [10, 10, 10], [5.0, 3.0, 0.0], dt=10)
    assert r.input_rate[2] == pytest.approx(5 + 6)  # Eq. 4.6


def test_queue_adds_pending_messages_to_the_interval():
    df = chain((1, 0.1, 1))
    # 300 queued + 5 msg/s * 60 s = 600 to do; 1 core does 600 in 60 s; o = 10 msg/s
    r = throughput(df, [0], [1.0], [5.0], dt=60, queue=[300.0])
    assert r.output_rate[0] == pytest.approx(10.0)
    assert r.omega == pytest.approx(1.0)
    r = throughput(df, [0], [0.5], [5.0], dt=60, queue=[300.0])
    assert r.omega == pytest.approx(0.5)


def test_throughput_broadcasts_over_batch_axes():
    df = chain((1, 0.1, 1), (1, 0.1, 1))
    caps = np.array([[1.0, 1.0], [2.0, 2.0], [0.5, 2.0]])
    r = throughput(df, [0, 0], caps, [20.0, 0.0], dt=60)
    np.testing.assert_allclose(r.omega, [0.5, 1.0, 0.25])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.0, 50.0), min_size=3, max_size=3), st.floats(0.1, 500.0))
def test_omega_between_zero_and_one_and_monotone_in_cores(caps, rate):
    df = chain((1, 0.05, 0.7), (1, 0.1, 1.3), (1, 0.02, 1.0))
    r1 = throughput(df, [0, 0, 0], caps, [rate, 0, 0], dt=300)
    r2 = throughput(df, [0, 0, 0], np.array(caps) + 1.0, [rate, 0, 0], dt=300)
    assert 0.0 <= r1.omega <= 1.0
    assert r2.omega >= r1.omega - 1e-12


def test_capacity_and_network_of_a_mapping():
    df = chain((1, 0.1, 1), (1, 0.1, 1))
    counts = np.array([[2, 1], [1, 0]])  # VM0 hosts both PEs, VM1 only op0
    speed = np.array([2.0, 1.0])
    np.testing.assert_allclose(operator_capacity(counts, speed), [5.0, 2.0])
    local, remote = edge_network(df, counts, speed, np.array([1e6, 5e5]))
    assert local[0] == pytest.approx(4.0 / 5.0)  # op0's capacity on VM0, which hosts op1
    assert remote[0] == pytest.approx(5e5)


# ----------------------------------------------------------------------------- Eq. 4.8, 4.9


def lrb_profit(offset=None) -> ProfitModel:
    return ProfitModel(gamma_min=0.8875, gamma_max=1.0, cost_at_gamma_min=30.0, cost_at_gamma_max=60.0, offset=offset)


def test_sigma_is_the_break_even_slope():
    assert lrb_profit().sigma == pytest.approx(0.1125 / 30.0)


@pytest.mark.parametrize("value, cost", [(1.0, 60.0), (0.8875, 30.0), (0.94375, 45.0)])
def test_theta_is_zero_on_the_break_even_line(value, cost):
    m = lrb_profit()
    assert m.profit(value, cost) == pytest.approx(0.0)
    assert m.break_even_cost(value) == pytest.approx(cost)


def test_theta_profit_below_the_line_loss_above():
    m = lrb_profit()
    assert m.profit(1.0, 40.0) == pytest.approx(20 * 0.1125 / 30)
    assert m.profit(1.0, 80.0) < 0


def test_break_even_offset_is_a_parameter():
    # offset = -1 is Eq. 4.8 exactly as printed: Gamma - sigma (mu - C) + 1
    printed = lrb_profit(offset=-1.0)
    assert printed.profit(1.0, 60.0) == pytest.approx(2.0)
    assert printed.profit(0.9, 50.0) == pytest.approx(0.9 - printed.sigma * (50 - 60) + 1)
    assert lrb_profit(offset=0.5).profit(1.0, 60.0) == pytest.approx(0.5)


def test_thesis_lrb_break_even_costs():
    m = ProfitModel.thesis_lrb(linear_road(), hours=12, mean_rate=50)
    assert (m.cost_at_gamma_min, m.cost_at_gamma_max) == (30.0, 60.0)


# ----------------------------------------------------------------------------- Eq. 4.10


def test_vm_weight_hand_computed():
    # T_c 600 s, 3 of 4 cores used, 1 of the PE's 4 instances, pi 2, $0.35/h
    w = vm_weight(600.0, 1, 4, 1, 4, 2.0, 0.35)
    assert w == pytest.approx(600 * 0.75 * 0.75 * 4 * 2 / 0.35)


def test_vm_weight_prefers_cheap_to_release_vms():
    base = dict(
        seconds_left_in_hour=1800.0,
        free_cores=1,
        total_cores=4,
        instances_of_op_on_vm=1,
        instances_of_op=4,
        core_speed=2.0,
        price_per_hour=0.35,
    )
    w0 = vm_weight(**base)
    assert vm_weight(**{**base, "seconds_left_in_hour": 300.0}) < w0  # hour about to end
    assert vm_weight(**{**base, "free_cores": 3}) < w0  # fewer cores used
    assert vm_weight(**{**base, "instances_of_op_on_vm": 3}) < w0  # more of the PE there
    assert vm_weight(**{**base, "price_per_hour": 0.7}) < w0  # costlier per core


def test_dataflow_structure_of_linear_road():
    df = linear_road()
    assert df.n_ops == 8
    assert df.inputs == (0, 1)
    assert set(df.outputs) == {5, 6, 7}
    assert [len(op.alternates) for op in df.operators] == [1, 1, 3, 1, 1, 1, 1, 2]
    single = df.single_implementation()
    assert all(len(op.alternates) == 1 for op in single.operators)
    assert value_bounds(single) == (1.0, 1.0)
