"""The smart-grid demand-response demo (the motivating application of Kumbhare's thesis, 1.4.1).

Meters in buildings report their demand; a forecaster per building predicts the demand a
little ahead; a forecast above the building's contracted capacity is a demand-response alert
(curtail now, before the peak). The forecaster has two alternates (thesis Fig. 1.9):

- ``regression``: a least-squares fit over the building's recent readings of a trend and the
  daily cycle (three harmonics), refitted at every reading: accurate, costly;
- ``moving_average``: the mean of the last readings: cheap, and it lags the daily cycle.

Their value (relative quality, Eq. 4.1: ``1 - MAPE`` over the best) and cost (CPU seconds
per reading) are *profiled* on a synthetic building before the job starts
(:func:`profile_forecasters`). The controller switches between them as the input rate rises
and falls (:class:`sluice.control.AlternatesByLoad`, or any policy: the elastic ones add
executors); every batch's metrics carry value, relative throughput, executors, cost and
profit.

    readings (a generator whose rate steps up and down)
      -> meter (vectorized): demand = base x daily shape + noise, the building's capacity
      -> key_by(building) -> forecast (alternates, state: the building's recent readings)
      -> filter forecast > capacity -> alerts (JSON files)

Everything is pure numpy over whole arrays; the state of a building is its last
``HISTORY`` readings. :func:`build` is what ``sluice demo --grid`` and
``benchmarks/elastic_live.py`` run.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice import Alt, Pipeline, report, sinks, sources
from sluice.graph.rates import RateSchedule

BUILDINGS = 50
DAY_S = 120.0  # a demo "day": the daily cycle in two minutes, so a run sees it
HORIZON_S = DAY_S / 12  # forecast two demo-hours ahead
HISTORY = 384  # readings of a building the forecasters look back over (its state)
MA_WINDOW = 12  # readings the moving average averages
CAPACITY = 1.3  # a building's contracted capacity, times its base demand
READING_SCHEMA = {"building": "string", "ts": "timestamp", "kw": "double", "capacity": "double"}
FORECAST_SCHEMA = {"building": "string", "ts": "timestamp", "kw": "double", "forecast": "double", "capacity": "double"}


# ---- the meters ------------------------------------------------------------------------------


def base_demand(buildings: np.ndarray) -> np.ndarray:
    """A building's base demand in kW (stable per building number: 20 to 220 kW)."""
    return 20.0 + (buildings * 37 % 101) * 2.0


def daily_shape(seconds: np.ndarray, day_s: float = DAY_S) -> np.ndarray:
    """Demand relative to the base over a day: low at night, a morning and an evening peak."""
    phase = 2 * np.pi * (np.asarray(seconds, dtype=float) % day_s) / day_s
    return 1.0 + 0.25 * np.sin(phase - np.pi / 2) + 0.15 * np.sin(2 * phase - np.pi / 3)


def meter(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Readings: the building's base x the daily shape at the reading's time, plus noise."""
    buildings = batch.column("building")
    encoded = pc.dictionary_encode(buildings)  # one lookup per building, not per reading
    numbers = np.array([int(b[1:]) for b in encoded.dictionary.to_pylist()], dtype=np.int64)
    base = base_demand(numbers)[encoded.indices.to_numpy(zero_copy_only=False)]
    ts = batch.column("ts")
    seconds = ts.cast(pa.int64()).to_numpy(zero_copy_only=False) / 1e6
    noise = batch.column("noise").to_numpy(zero_copy_only=False)
    kw = base * daily_shape(seconds) * (1.0 + noise)
    return pa.RecordBatch.from_arrays([buildings, ts, pa.array(kw), pa.array(base * CAPACITY)], names=list(READING_SCHEMA))


# ---- the forecasters (numpy over all of a building's new readings at once) --------------------


def _features(seconds: np.ndarray, origin: np.ndarray, day_s: float) -> np.ndarray:
    """Regression features of times ``seconds`` (..., n): 1, trend (days since ``origin``),
    and three harmonics of the day."""
    phase = 2 * np.pi * seconds / day_s
    trend = (seconds - origin) / day_s
    return np.stack(
        [
            np.ones_like(seconds),
            trend,
            np.sin(phase),
            np.cos(phase),
            np.sin(2 * phase),
            np.cos(2 * phase),
            np.sin(3 * phase),
            np.cos(3 * phase),
        ],
        axis=-1,
    )


def regression_forecast(
    seconds: np.ndarray, kw: np.ndarray, new: int, horizon_s: float = HORIZON_S, window: int = HISTORY, day_s: float = DAY_S
) -> np.ndarray:
    """For each of the last ``new`` readings: least squares over the ``window`` readings up
    to it (fewer at the start), evaluated ``horizon_s`` ahead. All fits at once (batched
    normal equations), no loop over readings."""
    n = len(kw)
    ends = np.arange(n - new, n)
    starts = np.maximum(ends - window + 1, 0)
    offsets = np.arange(window)
    idx = np.minimum(starts[:, None] + offsets[None, :], ends[:, None])  # (new, window)
    used = (starts[:, None] + offsets[None, :]) <= ends[:, None]  # readings inside each window
    origin = seconds[ends][:, None]
    x = _features(seconds[idx], origin, day_s) * used[..., None]
    y = kw[idx] * used
    xtx = np.einsum("nwf,nwg->nfg", x, x) + 1e-3 * np.eye(x.shape[-1])
    xty = np.einsum("nwf,nw->nf", x, y)
    beta = np.linalg.solve(xtx, xty[..., None])[..., 0]
    ahead = _features(seconds[ends] + horizon_s, seconds[ends], day_s)
    return np.einsum("nf,nf->n", ahead, beta)


def moving_average_forecast(seconds: np.ndarray, kw: np.ndarray, new: int, window: int = MA_WINDOW) -> np.ndarray:
    """For each of the last ``new`` readings: the mean of the ``window`` readings up to it."""
    sums = np.concatenate([[0.0], np.cumsum(kw)])
    ends = np.arange(len(kw) - new, len(kw)) + 1
    starts = np.maximum(ends - window, 0)
    return (sums[ends] - sums[starts]) / (ends - starts)


def forecast_error(
    seconds: np.ndarray, kw: np.ndarray, forecasts: np.ndarray, new: int, horizon_s: float = HORIZON_S
) -> float | None:
    """Mean absolute percentage error of the forecasts made ``horizon_s`` before each of the
    last ``new`` readings (the latest reading at or before that moment made it), or None
    when none was made yet. Vectorized: one search over the readings' times."""
    targets = seconds[len(seconds) - new :]
    made = np.searchsorted(seconds, targets - horizon_s, side="right") - 1
    known = (made >= 0) & np.isfinite(forecasts[np.maximum(made, 0)]) & (targets - horizon_s >= seconds[0])
    if not known.any():
        return None
    actual = kw[len(kw) - new :][known]
    return float(np.mean(np.abs(forecasts[made[known]] - actual) / np.abs(actual)))


def _keyed(forecast):
    """A ``process`` function: the building's state is its last HISTORY readings (time, kW)
    and the forecasts made at them, whichever forecaster made them (shared by both
    alternates). Each call reports the forecasts' error (``sluice.report``)."""

    def fn(key, rows: pa.Table, state):
        order = np.argsort(rows.column("ts").cast(pa.int64()).to_numpy(zero_copy_only=False), kind="stable")
        rows = rows.take(pa.array(order))
        seconds = rows.column("ts").cast(pa.int64()).to_numpy(zero_copy_only=False) / 1e6
        kw = rows.column("kw").to_numpy(zero_copy_only=False)
        past = state.value if state.value is not None else (np.zeros(0), np.zeros(0), np.zeros(0))
        past_s, past_kw = past[0], past[1]
        past_f = past[2] if len(past) > 2 else np.full(len(past_s), np.nan)
        all_s, all_kw = np.concatenate([past_s, seconds]), np.concatenate([past_kw, kw])
        predicted = forecast(all_s, all_kw, len(kw))
        all_f = np.concatenate([past_f, predicted])
        error = forecast_error(all_s, all_kw, all_f, len(kw))
        if error is not None:
            report("forecast_error", error)
        state.update((all_s[-HISTORY:], all_kw[-HISTORY:], all_f[-HISTORY:]))
        return pa.table(
            {
                "building": rows.column("building"),
                "ts": rows.column("ts"),
                "kw": rows.column("kw"),
                "forecast": pa.array(predicted),
                "capacity": rows.column("capacity"),
            }
        )

    fn.__name__ = fn.__qualname__ = forecast.__name__.replace("_forecast", "")
    return fn


regression = _keyed(regression_forecast)
moving_average = _keyed(moving_average_forecast)


# ---- profiling: value (Eq. 4.1) and cost of each alternate -----------------------------------


@dataclass(frozen=True)
class Profile:
    """What profiling measured of a forecaster on a synthetic building."""

    mape: float  # mean absolute percentage error of its forecasts
    cost: float  # CPU seconds per reading
    wall: float = 0.0  # wall-clock seconds per reading (more than ``cost`` on a busy machine)


def profile_forecasters(readings: int = 4000, per_call: int = 50, seed: int = 0) -> dict[str, Profile]:
    """Each forecaster on one synthetic building's readings, ``per_call`` new readings a call
    (as a batch brings them): its error against the true demand ``HORIZON_S`` ahead, and
    its CPU time per reading."""
    rng = np.random.default_rng(seed)
    seconds = np.arange(readings) * (DAY_S / 400)
    kw = 100 * daily_shape(seconds) * (1 + rng.normal(0, 0.03, readings))
    truth = 100 * daily_shape(seconds + HORIZON_S)
    out = {}
    for name, forecast in (("regression", regression_forecast), ("moving_average", moving_average_forecast)):
        predicted = np.empty(readings)
        started, wall_started = time.process_time(), time.perf_counter()
        for end in range(per_call, readings + 1, per_call):
            lo = max(end - HISTORY - per_call, 0)
            predicted[end - per_call : end] = forecast(seconds[lo:end], kw[lo:end], per_call)
        cost = (time.process_time() - started) / readings
        wall = (time.perf_counter() - wall_started) / readings
        skip = HISTORY  # judged once the window is full
        mape = float(np.mean(np.abs(predicted[skip:] - truth[skip:]) / truth[skip:]))
        out[name] = Profile(mape, max(cost, 1e-9), max(wall, 1e-9))
    return out


def forecaster_alternates(profiles: dict[str, Profile] | None = None) -> dict[str, Alt]:
    """The forecast operator's alternates, value by Eq. 4.1 (quality ``1 - MAPE`` over the
    best's) and cost as profiled."""
    profiles = profiles or profile_forecasters()
    quality = {name: max(1.0 - p.mape, 1e-6) for name, p in profiles.items()}
    best = max(quality.values())
    fns = {"regression": regression, "moving_average": moving_average}
    return {
        name: Alt(fns[name], value=round(quality[name] / best, 4), cost=profiles[name].cost)
        for name in ("regression", "moving_average")
    }


# ---- the rate that rises and falls, and the pipeline ------------------------------------------


def rate_trace(peak: float, phase_s: float, shape: tuple[float, ...] = (0.15, 0.5, 1.0, 0.5, 0.15)) -> list[tuple[float, float]]:
    """(seconds from the start, rows/s) of each phase: a rate that rises to ``peak`` and falls."""
    return [(i * phase_s, peak * share) for i, share in enumerate(shape)]


def build(
    out: str,
    trace: list[tuple[float, float]],
    phase_s: float,
    *,
    alternates: dict[str, Alt] | None = None,
    start: float | None = None,
    buildings: int = BUILDINGS,
    partitions: int = 2,
    active: str | None = None,
    batch_s: float = 10.0,
) -> Pipeline:
    """The demo's pipeline. ``trace``: (seconds from the start, rows/s) of each phase of
    ``phase_s`` seconds: one generator whose rate steps through them (a ``RateSchedule``),
    starting at ``start`` (epoch s; default: when the query first starts); alerts go to
    ``out``/alerts as JSON files. A batch admits at most ``batch_s`` seconds of the peak
    rate (no flood when the first batch is late)."""
    total = int(sum(rate * phase_s for _, rate in trace))
    peak = max(rate for _, rate in trace)
    p = Pipeline("grid", partitions=partitions, max_parallelism=32)
    readings = p.source(
        sources.generator(
            fields={
                "building": sources.Keys(buildings, prefix="b"),
                "ts": sources.EventTime(),
                "noise": sources.Normal(0.0, 0.03),
            },
            rate=RateSchedule(tuple((t, r) for t, r in trace)),
            start_time=start,
            total_rows=total,
            seed=7,
            max_rows_per_batch=max(int(peak * batch_s), 1),
        ),
        name="meters",
    )
    forecasts = (
        readings.map_batches(meter, schema=READING_SCHEMA, name="meter")
        .key_by("building")
        .process(schema=FORECAST_SCHEMA, name="forecast", alternates=alternates or forecaster_alternates(), active=active)
    )
    forecasts.filter("forecast > capacity", name="over_capacity").sink(
        sinks.files(os.path.join(out, "alerts"), format="json"), name="alerts"
    )
    return p
