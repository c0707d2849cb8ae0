"""Profiler (Algorithm 1): stability from the latency slope, peak-rate search, thread stop rule;
one small real run on the shared local Spark session."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from sluice.errors import ConfigError
from sluice.runtime.profiler import (
    OperatorSpec,
    SparkSlotRunner,
    TrialResult,
    find_peak_rate,
    keep_adding_threads,
    latency_slope,
    profile_on_spark,
    profile_operator,
)

OPERATORS = Path(__file__).resolve().parents[2] / "examples" / "operators"


def fake_trial(capacity: float):
    """A trial that is stable iff the rate is within the capacity, with CPU proportional to load."""

    def trial(rate: float) -> TrialResult:
        stable = rate <= capacity
        return TrialResult(rate, stable, 0.0 if stable else 0.5, min(rate / capacity, 1.0) * 0.8, 0.1, 0, 0)

    return trial


def test_latency_slope_flat_vs_climbing():
    t = [i * 0.1 for i in range(40)]
    assert latency_slope(t, [0.01] * 40, warmup=1.0) == pytest.approx(0.0, abs=1e-12)
    assert latency_slope(t, [0.01 + 0.3 * x for x in t], warmup=1.0) == pytest.approx(0.3)
    assert math.isinf(latency_slope(t[:2], [0.1, 0.2], warmup=0.0))  # too few samples


@pytest.mark.parametrize("guess", [5.0, 80.0, 100.0, 400.0])
def test_peak_rate_search_lands_within_resolution(guess):
    best = find_peak_rate(fake_trial(100.0), guess, step=1.25, max_trials=20)
    assert best is not None and best.stable
    assert 100 / 1.25 <= best.rate <= 100


@pytest.mark.parametrize("capacity", [40.0, 100.0, 290.0])
def test_bisection_is_not_anchored_at_the_bracket(capacity):
    from sluice.runtime.profiler import bisect_peak_rate

    best = bisect_peak_rate(fake_trial(capacity), 33.3, 300.0, steps=7)
    assert best is not None and capacity / 1.05 <= best.rate <= capacity
    low = bisect_peak_rate(fake_trial(10.0), 33.3, 300.0, steps=3)  # below the bracket
    assert low is not None and low.rate <= 10.0


def test_peak_rate_search_gives_up_below_min_rate():
    assert find_peak_rate(fake_trial(0.01), 1.0, min_rate=0.5) is None


def test_thread_stop_rule_follows_the_text_not_the_pseudocode():
    # the pseudo-code's "while slope <= max" would stop while the rate still rises; we continue
    assert keep_adding_threads([2, 10])
    assert keep_adding_threads([2, 10, 30])
    assert not keep_adding_threads([30, 31])  # flat (within 10 %): stop
    assert not keep_adding_threads([30, 25])  # falling: stop
    assert keep_adding_threads([30, 25, 40], window=2)  # a window looks further back


def test_profile_operator_builds_a_bell_curve_model_and_stops():
    capacity = {1: 2.0, 2: 4.0, 4: 8.0, 8: 15.0, 16: 28.0, 32: 30.0, 64: 20.0}
    tried = []

    def trial_for(tau):
        tried.append(tau)
        return fake_trial(capacity[tau])

    model = profile_operator("io", trial_for, lambda tau: capacity[tau] * 1.1, thread_counts=sorted(capacity))
    assert [p.threads for p in model.points] == [1, 2, 4, 8, 16, 32]  # stopped after 32: flat
    assert 64 not in tried
    assert model.peak_threads in (16, 32)
    for p in model.points:
        assert p.rate <= capacity[p.threads] and p.rate >= capacity[p.threads] / 1.3


def test_operator_spec_errors(tmp_path):
    with pytest.raises(ConfigError, match="FILE.py:ClassName"):
        OperatorSpec.parse("pi")
    with pytest.raises(ConfigError, match="does not exist"):
        OperatorSpec.parse(str(tmp_path / "nope.py") + ":X")
    spec = OperatorSpec.parse(f"{OPERATORS / 'pi.py'}:Nope")
    with pytest.raises(ConfigError, match="no operator class"):
        spec.build()


def test_example_operators_do_their_work():
    pi = OperatorSpec.parse(f"{OPERATORS / 'pi.py'}:Pi").build()
    assert pi.process(0) == pytest.approx(math.pi, rel=1e-8)
    xml = OperatorSpec.parse(f"{OPERATORS / 'parse_xml.py'}:ParseXml").build()
    xml.setup()
    assert xml.process(0) == 1 + 60 * 3  # root + (reading, ts, value) per reading
    writer = OperatorSpec.parse(f"{OPERATORS / 'batch_file_write.py'}:BatchFileWrite", {"window": 10}).build()
    writer.setup()
    assert sum(writer.process(i) for i in range(30)) == 3


@pytest.mark.spark
def test_profile_pi_on_spark(spark, tmp_path):
    spec = OperatorSpec.parse(f"{OPERATORS / 'pi.py'}:Pi")
    runner = SparkSlotRunner(spark, [[(spec, 1, 1.0)]])
    low = runner.trial(200.0, duration=1.5)
    assert low.stable and low.processed > 0.8 * low.offered
    model = profile_on_spark(spark, spec, "pi_here", thread_counts=(1,), duration=1.0)
    assert [p.threads for p in model.points] == [1]
    assert model.single_thread_rate > 1000  # 15 Viete iterations are cheap in any Python
    path = model.save(tmp_path / "pi.json")
    assert path.exists()
