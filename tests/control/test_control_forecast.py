"""Forecasters learned from a job's measured arrivals (control.forecast), no Spark."""

from __future__ import annotations

import numpy as np
import pytest

from sluice.control.forecast import HoltWinters, SeasonalMovingAverage, make_forecaster
from sluice.core.metrics import BatchMetrics
from sluice.errors import ConfigError


class _View:
    def __init__(self, history):
        self.history = history

    def offered_rate(self):
        return None


def _batches(rate, until_s, cycle_s=1.0, noise=0.0, seed=0):
    """Batches every ``cycle_s`` admitting what arrived at ``rate(t)`` (the backlog stays 0)."""
    rng = np.random.default_rng(seed)
    out, t, i = [], 0.0, 0
    while t < until_s:
        rows = int(rate(t + cycle_s / 2) * cycle_s * (1 + rng.normal(0, noise)))
        out.append(BatchMetrics(i, 0, t, cycle_s, rows, backlog={"s": 0}))
        t += cycle_s
        i += 1
    return out


def _daily(t):
    return 10_000 + 8_000 * np.sin(2 * np.pi * t / 600.0)


@pytest.mark.parametrize("forecaster", [HoltWinters(season_s=600), SeasonalMovingAverage(season_s=600)])
def test_a_seasonal_rate_is_forecast_from_the_measured_arrivals(forecaster):
    history = _batches(_daily, 1800, noise=0.05, seed=1)
    for k in range(0, len(history), 7):  # the controller's view: the latest batches, read as they come
        forecaster.observe(_View(history[max(0, k - 60) : k + 1]))
    forecaster.observe(_View(history[-60:]))
    now = history[-1].started_at + 1.0
    fc = forecaster.forecast(now, 6, 25.0)
    truth = np.array([np.mean(_daily(now + 25 * k + np.arange(25))) for k in range(6)])
    assert np.max(np.abs(fc - truth) / truth) < 0.15
    # the peak ahead over a horizon is what scale-ahead sizes for
    assert forecaster.peak(now, 150) == pytest.approx(float(truth.max()), rel=0.15)


def test_before_a_season_holt_follows_a_ramp_and_says_nothing_without_history():
    hw = HoltWinters(season_s=None, bin_s=5.0)
    assert hw.peak(0.0, 30) is None
    history = _batches(lambda t: 1000 + 50 * t, 200)
    hw.observe(_View(history))
    ahead = hw.peak(200.0, 30)
    assert ahead is not None and ahead > 1000 + 50 * 200 * 0.95  # above the level now: the ramp goes on


def test_plasticcs_call_learns_and_falls_back_to_the_measured_rate():
    hw = HoltWinters()
    view = _View(_batches(lambda t: 500.0, 10))
    view.offered_rate = lambda: 500.0
    fc = hw(view, 10.0, 3, 20.0)
    assert fc.shape == (3,) and np.allclose(fc, 500.0, rtol=0.1)


def test_bad_forecaster_settings_are_named():
    with pytest.raises(ConfigError, match="unknown 'arima'"):
        make_forecaster("arima")
    with pytest.raises(ConfigError, match="alpha"):
        make_forecaster({"holt_winters": {"alpha": 2}})
    with pytest.raises(ConfigError, match="season_s"):
        make_forecaster({"seasonal_average": {"season_s": 1}})
