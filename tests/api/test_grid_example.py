"""The smart-grid example's pieces (pure numpy) and the AlternatesByLoad policy (pure)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from sluice.control import AlternatesByLoad, Controller
from sluice.examples import grid
from sluice.plan.physical import initial_plan
from sluice.runtime.batch.metrics import BatchMetrics


def test_the_regression_recovers_a_noise_free_day_and_the_moving_average_lags_it():
    seconds = np.arange(600) * (grid.DAY_S / 400)
    kw = 80 * grid.daily_shape(seconds)
    truth = 80 * grid.daily_shape(seconds[-100:] + grid.HORIZON_S)
    regression = grid.regression_forecast(seconds, kw, 100)
    average = grid.moving_average_forecast(seconds, kw, 100)
    assert np.max(np.abs(regression - truth) / truth) < 1e-3
    assert np.mean(np.abs(average - truth) / truth) > 0.02  # lags the day by its window and the horizon
    # the moving average of the last readings, by hand
    assert average[-1] == pytest.approx(kw[-grid.MA_WINDOW :].mean())


def test_profiles_give_value_by_eq_4_1_and_cost_per_reading():
    profiles = grid.profile_forecasters(readings=1200)
    alts = grid.forecaster_alternates(profiles)
    assert alts["regression"].value == 1.0  # the more accurate, the best
    expected = (1 - profiles["moving_average"].mape) / (1 - profiles["regression"].mape)
    assert alts["moving_average"].value == pytest.approx(expected, abs=1e-4)
    assert alts["regression"].cost > 10 * alts["moving_average"].cost


def test_meter_readings_follow_the_building_and_the_day():
    ts = pa.array([0, int(grid.DAY_S / 4 * 1e6)], pa.timestamp("us", tz="UTC"))
    batch = pa.RecordBatch.from_pydict({"building": ["b3", "b3"], "ts": ts, "noise": [0.0, 0.0]})
    out = grid.meter(batch)
    base = grid.base_demand(np.array([3]))[0]
    assert out.column("kw").to_pylist() == pytest.approx(list(base * grid.daily_shape(np.array([0, grid.DAY_S / 4]))))
    assert out.column("capacity").to_pylist() == pytest.approx([base * grid.CAPACITY] * 2)


def pipeline_graph():
    p = grid.build(
        "/tmp/unused",
        grid.rate_trace(1000, 10),
        10,
        alternates=grid.forecaster_alternates(
            {"regression": grid.Profile(0.01, 1e-4), "moving_average": grid.Profile(0.15, 1e-7)}
        ),
    )
    p.graph.validate()
    return p.graph


def batch(batch_id: int, rows: int, forecast_s: float, backlog: int, alternate: str, plan: int = 0) -> BatchMetrics:
    """One second of batch: ``rows`` admitted, the forecaster busy ``forecast_s``."""
    return BatchMetrics(
        batch_id=batch_id,
        plan_version=plan,
        started_at=float(batch_id),
        duration_s=1.0,
        rows_in=rows,
        rows_by_source={"meters_0": rows},
        backlog={"meters_0": backlog},
        operators={"forecast": {"rows_in": rows, "time_s": forecast_s}},
        alternates={"forecast": alternate},
        dynamics={
            "omega": rows / (rows + backlog),
            "alternates": {"forecast": {"alternate": alternate, "cost": forecast_s / rows}},
        },
    )


def test_alternates_by_load_goes_down_when_behind_and_up_with_slack():
    g = pipeline_graph()
    control = Controller(g, [AlternatesByLoad(window=2)])
    plan = initial_plan(g, 2)
    assert plan.alternates == {"forecast": "regression"}
    # 10,000 rows a second offered, 5,000 taken: two cores busy 1.9 s a second, rows left waiting
    for b in range(2):
        new = control(batch(b, 5000, 1.9, 5000 * (b + 1), "regression"), plan)
    assert new is not None and new.alternates == {"forecast": "moving_average"}
    # the rate falls to 1,000 a second: the regression's measured 380 us/row would load 2 cores 0.19
    plan = new
    for b in range(2, 4):
        new = control(batch(b, 1000, 0.001, 0, "moving_average", plan=plan.version), plan)
    assert new is not None and new.alternates == {"forecast": "regression"}
    reasons = [d["action"]["reason"] for d in control.log.records if d["type"] == "decision"]
    assert reasons[0].startswith("behind") and reasons[1].startswith("slack")


def test_forecast_error_compares_each_reading_with_the_forecast_made_a_horizon_before():
    seconds = np.array([0.0, 10.0, 20.0, 30.0])
    kw = np.array([100.0, 100.0, 110.0, 120.0])
    forecasts = np.array([np.nan, 99.0, 132.0, 0.0])
    # horizon 10 s: reading at 20 s vs the forecast made at 10 s (99 -> 10 % off), at 30 s vs
    # the one made at 20 s (132 -> 10 % off); the reading at 10 s has the forecast made at 0 s: none
    assert grid.forecast_error(seconds, kw, forecasts, 3, horizon_s=10.0) == pytest.approx(0.1)
    assert grid.forecast_error(seconds, kw, forecasts, 1, horizon_s=100.0) is None
