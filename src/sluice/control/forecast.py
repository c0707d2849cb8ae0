"""Forecasts of a job's input rate, learned from the job's own measured arrivals.

A forecaster reads every batch the controller sees (``observe(view)``): the rows that
arrived between two batches' ends (rows the later one admitted plus the growth of the
backlog; with no backlog reported, the rows admitted) are spread over bins of ``bin_s``
seconds of the batches' clock. From the completed bins it forecasts the coming ones:

- :class:`HoltWinters`: additive Holt-Winters (level, damped trend, and a season of
  ``season_s`` seconds once a whole season has been seen; before that, Holt's damped
  trend). Updated incrementally, one completed bin at a time.
- :class:`SeasonalMovingAverage`: each coming bin is the mean of the same bin in the last
  ``seasons`` seasons, scaled by how the last ``window`` bins compare with the same bins a
  season earlier; before a whole season, the mean of the last ``window`` bins.

Both serve the autopilot's scale-ahead (``peak(now, horizon_s)``) and, called as
``forecaster(view, now_s, steps, step_s)``, PLAStiCC's look-ahead (``control.elastic``);
from YAML: ``elastic_plasticc: {forecaster: holt_winters}`` or ``{forecaster:
{holt_winters: {season_s: 86400}}}``. Numpy only; no Spark.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from sluice.errors import ConfigError


class ArrivalForecaster:
    """Keeps the job's measured arrival rate in bins; subclasses forecast from them."""

    name = "forecaster"

    def __init__(self, bin_s: float = 5.0, max_bins: int = 20_000):
        if not bin_s > 0 or max_bins < 2:
            raise ConfigError(f"{self.name}: bin_s must be > 0 and max_bins >= 2, got {bin_s!r}, {max_bins!r}")
        self.bin_s = float(bin_s)
        self.max_bins = int(max_bins)
        self.origin: float | None = None  # clock of bin 0's start
        self.open: dict[int, float] = {}  # bin -> rows, bins not yet complete
        self.done = 0  # bins completed (indices below it are final)
        self.rates: list[float] = []  # completed bins' rows/s, oldest first (at most max_bins)
        self.seen = -1  # the last batch id read
        self.last_end: float | None = None
        self.last_backlog: int | None = None

    def describe(self) -> dict:
        return {"forecaster": self.name, "bin_s": self.bin_s}

    # ---- learning -------------------------------------------------------------------------------
    def observe(self, view) -> None:
        """Read the batches of ``view`` not read yet."""
        for m in view.history:
            if m.skipped or m.batch_id <= self.seen:
                continue
            self.seen = m.batch_id
            end = m.started_at + m.duration_s
            backlog = None if not m.backlog or any(v is None for v in m.backlog.values()) else int(sum(m.backlog.values()))
            if self.last_end is None:
                self.origin = m.started_at
                start = m.started_at
            else:
                start = self.last_end
            arrived = float(m.rows_in)
            if backlog is not None and self.last_backlog is not None:
                arrived += backlog - self.last_backlog
            self._spread(start, end, max(arrived, 0.0))
            self.last_end, self.last_backlog = end, backlog
            self._close(end)

    def _spread(self, start: float, end: float, rows: float) -> None:
        assert self.origin is not None
        if end <= start:
            self.open[self._bin(end)] = self.open.get(self._bin(end), 0.0) + rows
            return
        first, last = self._bin(start), self._bin(end)
        for b in range(first, last + 1):
            lo, hi = max(start, self.origin + b * self.bin_s), min(end, self.origin + (b + 1) * self.bin_s)
            if hi > lo:
                self.open[b] = self.open.get(b, 0.0) + rows * (hi - lo) / (end - start)

    def _bin(self, t: float) -> int:
        assert self.origin is not None
        return max(math.floor((t - self.origin) / self.bin_s), 0)

    def _close(self, now: float) -> None:
        current = self._bin(now)
        while self.done < current:
            rate = self.open.pop(self.done, 0.0) / self.bin_s
            self.rates.append(rate)
            self.update(rate)
            self.done += 1
        if len(self.rates) > self.max_bins:
            del self.rates[: len(self.rates) - self.max_bins]

    def update(self, rate: float) -> None:
        """One more completed bin (subclasses keep their state incrementally)."""

    # ---- forecasting ----------------------------------------------------------------------------
    def forecast_bins(self, bins: int) -> np.ndarray | None:
        """Rows/s of the next ``bins`` bins after the last completed one (None: too little history)."""
        raise NotImplementedError

    def forecast(self, now: float, steps: int, step_s: float) -> np.ndarray | None:
        """Mean rows/s over each of ``steps`` intervals of ``step_s`` from ``now``."""
        if self.origin is None:
            return None
        start = (now - self.origin) / self.bin_s - self.done  # bins from the last completed one to now
        span = math.ceil(start + steps * step_s / self.bin_s) + 1
        ahead = self.forecast_bins(max(span, 1))
        if ahead is None:
            return None
        out = np.empty(steps)
        for k in range(steps):
            lo = start + k * step_s / self.bin_s
            hi = lo + step_s / self.bin_s
            idx = np.arange(max(math.floor(lo), 0), max(math.ceil(hi), 1))
            idx = idx[idx < len(ahead)]
            out[k] = float(ahead[idx].mean()) if len(idx) else float(ahead[-1])
        return np.clip(out, 0.0, None)

    def peak(self, now: float, horizon_s: float) -> float | None:
        """The highest rate forecast over the next ``horizon_s`` seconds (None: no forecast yet)."""
        if horizon_s <= 0:
            return None
        fc = self.forecast(now, max(math.ceil(horizon_s / self.bin_s), 1), self.bin_s)
        return None if fc is None else float(fc.max())

    def __call__(self, view, now_s: float, steps: int, step_s: float) -> np.ndarray:
        """PLAStiCC's look-ahead: learn from ``view``, then the rates of the next ``steps``
        intervals (the last measured rate while there is no forecast yet)."""
        self.observe(view)
        fc = self.forecast(now_s, steps, step_s)
        if fc is not None:
            return fc
        rate = view.offered_rate() or (self.rates[-1] if self.rates else 0.0)
        return np.full(steps, float(rate))


class HoltWinters(ArrivalForecaster):
    """Additive Holt-Winters with a damped trend (see the module's docstring).

    ``alpha``, ``beta``, ``gamma``: smoothing of the level, the trend and the season;
    ``phi``: the trend's damping (its effect fades over the horizon); ``season_s``: the
    season's length (None: no season)."""

    name = "holt_winters"

    def __init__(
        self,
        season_s: float | None = None,
        bin_s: float = 5.0,
        alpha: float = 0.3,
        beta: float = 0.05,
        gamma: float = 0.2,
        phi: float = 0.9,
        min_bins: int = 6,
        max_bins: int = 20_000,
    ):
        super().__init__(bin_s, max_bins)
        for label, v in (("alpha", alpha), ("beta", beta), ("gamma", gamma), ("phi", phi)):
            if not 0 <= v <= 1:
                raise ConfigError(f"holt_winters: {label} must be in [0, 1], got {v!r}")
        if season_s is not None and not season_s >= 2 * bin_s:
            raise ConfigError(f"holt_winters: season_s ({season_s!r}) must be at least two bins ({2 * bin_s:g} s)")
        self.alpha, self.beta, self.gamma, self.phi = alpha, beta, gamma, phi
        self.season_s = season_s
        self.m = None if season_s is None else round(season_s / self.bin_s)
        self.min_bins = max(int(min_bins), 2)
        self.level: float | None = None
        self.trend = 0.0
        self.season: np.ndarray | None = None  # m offsets, indexed by bin % m

    def describe(self) -> dict:
        return {
            **super().describe(),
            "season_s": self.season_s,
            "alpha": self.alpha,
            "beta": self.beta,
            "gamma": self.gamma,
            "phi": self.phi,
        }

    def update(self, rate: float) -> None:
        t = self.done  # this bin's index
        m = self.m
        if self.level is None:
            self.level = rate
            return
        if m is not None and self.season is None and t + 1 == m and len(self.rates) >= m:
            first = np.asarray(self.rates[-m:], dtype=float)
            self.season = first - first.mean()  # the first whole season: its shape
        s = 0.0 if self.season is None or m is None else float(self.season[t % m])
        previous = self.level
        self.level = self.alpha * (rate - s) + (1 - self.alpha) * (previous + self.phi * self.trend)
        self.trend = self.beta * (self.level - previous) + (1 - self.beta) * self.phi * self.trend
        if self.season is not None and m is not None:
            self.season[t % m] = self.gamma * (rate - self.level) + (1 - self.gamma) * s

    def forecast_bins(self, bins: int) -> np.ndarray | None:
        if self.level is None or len(self.rates) < self.min_bins:
            return None
        h = np.arange(1, bins + 1)
        damped = np.cumsum(self.phi**h) if self.phi < 1 else h.astype(float)
        out = self.level + damped * self.trend
        if self.season is not None and self.m is not None:
            out = out + self.season[(self.done + h - 1) % self.m]
        return np.clip(out, 0.0, None)


class SeasonalMovingAverage(ArrivalForecaster):
    """The same bins of the last ``seasons`` seasons, scaled to the recent level (see the
    module's docstring)."""

    name = "seasonal_average"

    def __init__(self, season_s: float, bin_s: float = 5.0, seasons: int = 3, window: int = 6, max_bins: int = 20_000):
        super().__init__(bin_s, max_bins)
        if not season_s >= 2 * bin_s or seasons < 1 or window < 1:
            raise ConfigError(
                f"seasonal_average: season_s >= two bins, seasons >= 1 and window >= 1 are required, "
                f"got {season_s!r}, {seasons!r}, {window!r}"
            )
        self.season_s = season_s
        self.m = round(season_s / self.bin_s)
        self.seasons, self.window = seasons, window

    def describe(self) -> dict:
        return {**super().describe(), "season_s": self.season_s, "seasons": self.seasons, "window": self.window}

    def forecast_bins(self, bins: int) -> np.ndarray | None:
        r = np.asarray(self.rates, dtype=float)
        n, m = len(r), self.m
        if n < self.window:
            return None
        recent = float(r[-self.window :].mean())
        if n < m + self.window:
            return np.full(bins, recent)
        out = np.empty(bins)
        for h in range(bins):
            t = n + h  # the bin forecast
            past = [r[t - j * m] for j in range(1, self.seasons + 1) if 0 <= t - j * m < n]
            out[h] = float(np.mean(past)) if past else recent
        before = r[n - self.window - m : n - m]
        scale = recent / float(before.mean()) if before.mean() > 0 else 1.0
        return np.clip(out * scale, 0.0, None)


FORECASTERS: dict[str, type[ArrivalForecaster]] = {
    HoltWinters.name: HoltWinters,
    SeasonalMovingAverage.name: SeasonalMovingAverage,
}


def make_forecaster(spec: Any) -> ArrivalForecaster:
    """A forecaster from an instance, a name (``"holt_winters"``, ``"seasonal_average"``) or
    ``{name: {options}}``."""
    if isinstance(spec, ArrivalForecaster):
        return spec
    options: dict
    if isinstance(spec, str):
        name, options = spec, {}
    elif isinstance(spec, dict) and len(spec) == 1:
        name, options = next(iter(spec.items()))
        options = options or {}
    else:
        raise ConfigError(f"forecaster: expected a name or {{name: {{options}}}}, got {spec!r}; known: {sorted(FORECASTERS)}")
    if name not in FORECASTERS:
        raise ConfigError(f"forecaster: unknown {name!r}; known: {sorted(FORECASTERS)}")
    try:
        return FORECASTERS[name](**options)
    except TypeError as e:
        raise ConfigError(f"forecaster {name}: {e}") from None
