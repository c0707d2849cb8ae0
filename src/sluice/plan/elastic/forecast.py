"""Forecasts for look-ahead scheduling (thesis chapter 5): the error model of the evaluation
and the averaging estimators of section 5.3.2 that feed the reactive scheduler.

Error model (section 5.4, "Prediction Models"): the error grows linearly over the horizon from
0 at the current step to 2 e-hat at the last one (mean about e-hat); the error of step i is
drawn from a normal distribution of mean 0 and a spread e_i; an optional bias (e.g. +-5 %) is
added. The text says "variance equal to e_i / 2", which for e-hat = 10 % would give a standard
deviation of 22 %, twice the stated mean error; we take e_i as the standard deviation of the
relative error, so the mean absolute error over the horizon stays close to e-hat. Errors are
relative: predicted = actual * (1 + bias + N(0, e_i^2)), floored at 0.

Estimators return one (rates, speeds) pair that the reactive CE heuristic plans for:
* CAF: the last observation (in ``greedy``; the classic reactive scheduler),
* WAAF: the mean of the last ``window`` observations,
* WPA: the mean of the forecast over the horizon,
* WPO: the most favourable forecast (lowest rate, highest speed),
* WPP: the least favourable forecast (highest rate, lowest speed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from sluice.plan.elastic.base import SchedulerInput
from sluice.plan.elastic.greedy import Estimator, caf


def horizon_errors(mean_error: float, steps: int) -> np.ndarray:
    """e_i for i = 1..steps: linear from ~0 to 2 * mean_error at the last step."""
    return 2.0 * mean_error * np.arange(1, steps + 1) / steps


def perturb(truth: np.ndarray, mean_error: float, bias: float, rng: np.random.Generator) -> np.ndarray:
    """Apply the error model to a true future series; axis 0 is the horizon."""
    truth = np.asarray(truth, dtype=float)
    e = horizon_errors(mean_error, truth.shape[0]).reshape((-1,) + (1,) * (truth.ndim - 1))
    noise = rng.normal(0.0, 1.0, truth.shape) * e
    return np.clip(truth * (1.0 + bias + noise), 0.0, None)


@dataclass(frozen=True)
class WindowedAverage:
    """WAAF: average of the last ``window`` observed steps."""

    window: int = 3
    name: str = "WAAF"

    def __call__(self, inp: SchedulerInput):
        rate, speeds = caf(inp)
        if inp.rate_history is not None and len(inp.rate_history):
            rate = np.asarray(inp.rate_history, dtype=float)[-self.window :].mean(axis=0)
        hist = inp.speed_history or {}
        speeds = {
            k: float(np.mean(np.asarray(hist[k])[-self.window :])) if k in hist and len(hist[k]) else v for k, v in speeds.items()
        }
        return rate, speeds


@dataclass(frozen=True)
class ForecastSummary:
    """WPA ('mean'), WPO ('optimistic') or WPP ('pessimistic') over the forecast horizon."""

    mode: str = "mean"
    name: str = "WPA"
    uses_forecast: bool = True

    def __call__(self, inp: SchedulerInput):
        rate, speeds = caf(inp)
        fc = inp.forecast
        if fc is None:
            return rate, speeds
        r = np.asarray(fc.rates, dtype=float)
        pick_speed: Callable[[np.ndarray], float]
        if self.mode == "mean":
            rate = r.mean(axis=0)
            pick_speed = np.mean
        elif self.mode == "optimistic":
            rate = r.min(axis=0)
            pick_speed = np.max
        else:
            rate = r.max(axis=0)
            pick_speed = np.min
        speeds = {k: float(pick_speed(fc.speeds[k])) if k in fc.speeds else v for k, v in speeds.items()}
        return rate, speeds


ESTIMATORS: dict[str, Estimator] = {
    "CAF": caf,
    "WAAF": WindowedAverage(),
    "WPA": ForecastSummary("mean", "WPA"),
    "WPO": ForecastSummary("optimistic", "WPO"),
    "WPP": ForecastSummary("pessimistic", "WPP"),
}


@dataclass
class TraceForecast:
    """Forecasts of a source's input rate for look-ahead scheduling, made the way the thesis
    evaluates PLAStiCC (section 5.4): the true future rate (``rate_at``, rows/s at a time
    in seconds from ``t0``), averaged over each coming step and perturbed by the error model
    (``perturb``: mean error ``mean_error`` growing over the horizon, ``bias``).

    Called as ``forecast(view, now_s, steps, step_s)`` by ``control.elastic.ElasticPolicy``;
    returns ``steps`` rates. Deterministic for a seed and a sequence of calls.
    """

    rate_at: Callable[[float], float]
    t0: float = 0.0
    mean_error: float = 0.1
    bias: float = 0.0
    seed: int = 0
    rng: np.random.Generator = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)

    def truth(self, now_s: float, steps: int, step_s: float, samples: int = 10) -> np.ndarray:
        out = np.zeros(steps)
        for k in range(steps):
            ts = now_s - self.t0 + step_s * (k + (np.arange(samples) + 0.5) / samples)
            out[k] = np.mean([self.rate_at(float(t)) for t in ts])
        return out

    def __call__(self, view, now_s: float, steps: int, step_s: float) -> np.ndarray:
        return perturb(self.truth(now_s, steps, step_s), self.mean_error, self.bias, self.rng)
