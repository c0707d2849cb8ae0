"""benchmarks/autopilot_live.py's pure parts, without Spark: the compressed day's phases and
rates, the hot-key shift, the figures a live run is judged by, and the reference its outputs
are compared with."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import autopilot_live as al


def test_the_day_keeps_every_phase_in_order_and_ramps_to_eight_times_the_base():
    trace = al.LiveTrace(day_s=300.0, outage_s=20.0)
    assert 0 < trace.base_until < trace.ramp_until < trace.shift_at < trace.kill_at < trace.peak_until
    assert trace.peak_until < trace.fall_until < trace.outage[0] < trace.outage[1] < trace.day_s
    rates = [r for _, r in trace.steps()]
    assert rates[0] == al.BASE and max(rates) == al.PEAK == 8 * al.BASE and rates[-1] == al.BASE
    times = [t for t, _ in trace.steps()]
    assert times == sorted(times) and len(set(times)) == len(times)  # a valid RateSchedule
    assert trace.rate(trace.kill_at) == al.PEAK and trace.rate(trace.outage[0]) == al.BASE
    # rows arrived: the integral of the steps
    assert trace.arrived(trace.base_until) == pytest.approx(al.BASE * trace.base_until)
    assert trace.arrived(trace.day_s) == pytest.approx(trace.mean_rate() * trace.day_s)
    assert al.BASE < trace.mean_rate() < al.PEAK
    with pytest.raises(ValueError, match="outage"):
        al.LiveTrace(day_s=60.0, outage_s=60.0)


def test_the_peak_needs_every_worker_and_the_base_one():
    assert al.executors_for_rate(al.PEAK) == al.WORKERS
    assert al.executors_for_rate(al.BASE) == 1


def test_the_hot_key_shift_moves_keys_from_the_shift_on():
    keys = np.array([0, 1, 0, 1])
    ts = np.array([9.0, 9.9, 10.0, 11.0])
    assert al.shifted_keys(keys, ts, 10.0).tolist() == [0, 1, al.KEYS // 2, al.KEYS // 2 + 1]


def test_figures_count_the_outage_against_the_goal_and_time_recovery_and_drain():
    trace = al.LiveTrace(day_s=200.0, outage_s=20.0)
    kill, (down, up) = trace.kill_at, trace.outage
    batches = []
    t = 0.0
    while t < trace.day_s:
        if down <= t < up:
            t = up
            continue
        slow = kill <= t < kill + 10 or up <= t < up + 4  # after the kill and the outage
        p95 = 2 * al.BOUND_S if slow else al.BOUND_S / 2
        backlog = int(2 * al.BOUND_S * al.BASE) if up <= t < up + 4 else 100
        batches.append(al.Batch(t, t + 1.0, p95, 100, backlog))
        t += 1.0
    f = al.figures(batches, trace, executor_seconds=400.0, reconfigurations=3)
    # 10 s after the kill, the outage's 20 s and 4 s after it are out of the goal
    assert f["attainment"] == pytest.approx(1 - (10 + 20 + 4) / trace.day_s, abs=0.01)
    # of the time the job runs (the outage left out): the kill's 10 s and the drain's 4 s
    assert f["attainment_running"] == pytest.approx(1 - (10 + 4) / (trace.day_s - 20), abs=0.01)
    assert f["worst_p95_s"] == 2 * al.BOUND_S
    assert f["recover_kill_s"] == pytest.approx(11.0, abs=1.0)
    assert f["drain_outage_s"] == pytest.approx(4.0, abs=1.0)
    assert f["executor_seconds"] == 400.0 and f["reconfigurations"] == 3
    with pytest.raises(ValueError, match="no batch"):
        al.figures([], trace, 0.0, 0)


def test_executor_seconds_and_reconfigurations():
    assert al.executor_seconds([(0.0, 1), (10.0, 4), (20.0, 2)], until=25.0) == 10 + 40 + 10
    decisions = [
        {"batch_id": 3, "action": {"kind": "partitions"}},
        {"batch_id": 3, "action": {"kind": "executors"}},
        {"batch_id": 5, "action": {"kind": "admission"}},
        {"batch_id": 7, "action": {"kind": "executors"}},
    ]
    assert al.reconfiguration_count(decisions) == 2  # one per batch decided at, admission not counted


def test_outputs_are_compared_with_a_batch_computation_of_the_same_input():
    keys = np.array([1, 2, 1, 3, 1])
    ts = np.array([0.5, 1.0, 6.0, 7.0, 11.0])
    ref_keys, ref_windows = al.reference(keys, ts, shift_epoch_s=10.0)
    assert ref_keys == {1: 2, 2: 1, 3: 1, 1 + al.KEYS // 2: 1}
    assert ref_windows == {0.0: 2, 5.0: 2, 10.0: 1}
    ok = al.outputs_match(dict(ref_keys), {0.0: 2, 5.0: 2}, ref_keys, ref_windows)
    assert ok["equal"] and ok["windows_compared"] == 2  # the window still open is not compared
    lost = al.outputs_match({**ref_keys, 1: 1}, {0.0: 2, 5.0: 2}, ref_keys, ref_windows)
    assert not lost["equal"] and not lost["keys_equal"]
    gap = al.outputs_match(dict(ref_keys), {5.0: 2}, ref_keys, ref_windows)  # window 0 never emitted
    assert not gap["windows_equal"]
