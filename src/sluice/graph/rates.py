"""Arrival rates of row-numbered sources: a constant rate or a schedule of steps.

A source with a rate makes row i available at a time fixed by i alone, so a batch replayed
after a crash admits the same rows with the same ingest times (exactly-once). A constant
rate of r rows/s puts row i at ``start + i / r``. A :class:`RateSchedule` is a piecewise
constant rate, ``[(0, 5000), (30, 60000), (60, 10000)]``: 5,000 rows/s for the first 30 s
after the source's start, then 60,000 rows/s, ... The rows due by each step's start are
summed once (``cum``), so row i's arrival is one search and one division, vectorized.

Times here are integer microseconds since the epoch (``start_us`` is the source's row-0
time, logged in Spark's offsets). Pure: numpy only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import numpy as np

from sluice.errors import SourceError


@dataclass(frozen=True)
class RateSchedule:
    """Rows/s by steps: ``steps`` = ((seconds after the start, rows/s), ...), the first at 0,
    the times increasing, every rate positive; the last rate holds for ever."""

    steps: tuple[tuple[float, float], ...]
    _starts: np.ndarray = field(init=False, repr=False, compare=False, hash=False)
    _rates: np.ndarray = field(init=False, repr=False, compare=False, hash=False)
    _cum: np.ndarray = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        steps = tuple((float(t), float(r)) for t, r in self.steps)
        object.__setattr__(self, "steps", steps)
        starts = np.array([t for t, _ in steps], dtype=np.float64)
        rates = np.array([r for _, r in steps], dtype=np.float64)
        # rows due by each step's start (fractional: a step may end between two rows)
        cum = np.concatenate([[0.0], np.cumsum(np.diff(starts) * rates[:-1])])
        object.__setattr__(self, "_starts", starts)
        object.__setattr__(self, "_rates", rates)
        object.__setattr__(self, "_cum", cum)

    @classmethod
    def parse(cls, where: str, value: Any) -> RateSchedule:
        """A schedule from a sequence of (seconds, rows/s) pairs, with a clear error."""
        try:
            steps = [(t, r) for t, r in value]
        except (TypeError, ValueError):
            raise SourceError(f"{where}: a rate schedule is a list of (seconds, rows/s) pairs, got {value!r}") from None
        if not steps:
            raise SourceError(f"{where}: the rate schedule has no steps")
        for i, (t, r) in enumerate(steps):
            for name, v in (("time", t), ("rate", r)):
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    raise SourceError(f"{where}: rate schedule step {i}: {name} must be a finite number, got {v!r}")
            if r <= 0:
                raise SourceError(f"{where}: rate schedule step {i}: rows/s must be > 0, got {r!r}")
        if steps[0][0] != 0:
            raise SourceError(f"{where}: the rate schedule must start at second 0, not {steps[0][0]!r}")
        if any(b[0] <= a[0] for a, b in pairwise(steps)):
            raise SourceError(f"{where}: the rate schedule's times must increase, got {[t for t, _ in steps]}")
        return cls(tuple(steps))

    def to_json(self) -> list[list[float]]:
        return [[t, r] for t, r in self.steps]

    def rate_at(self, seconds: float) -> float:
        """Rows/s at ``seconds`` after the start."""
        return float(self._rates[self._step(np.asarray(seconds, dtype=np.float64))])

    def rows_by(self, seconds: float) -> float:
        """Rows due by ``seconds`` after the start (fractional)."""
        if seconds <= 0:
            return 0.0
        i = int(self._step(np.asarray(seconds, dtype=np.float64)))
        return float(self._cum[i] + (seconds - self._starts[i]) * self._rates[i])

    def arrival_s(self, rows: np.ndarray) -> np.ndarray:
        """Seconds after the start at which rows ``rows`` (0-based, may be fractional) are due."""
        rows = np.asarray(rows, dtype=np.float64)
        i = np.clip(np.searchsorted(self._cum, rows, side="right") - 1, 0, len(self._cum) - 1)
        return self._starts[i] + (rows - self._cum[i]) / self._rates[i]

    def _step(self, seconds: np.ndarray) -> np.ndarray:
        return np.maximum(np.searchsorted(self._starts, seconds, side="right") - 1, 0)


Rate = float | RateSchedule
"""What a source's ``rate`` may be (None besides: rows arrive when admitted)."""


def as_rate(where: str, value: Any) -> Rate | None:
    """A source's ``rate`` argument normalized: None, a positive number, or a schedule
    (a RateSchedule or a sequence of (seconds, rows/s) pairs); SourceError otherwise."""
    if value is None or isinstance(value, RateSchedule):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not (math.isfinite(value) and value > 0):
            raise SourceError(
                f"{where}: rate must be a positive number, a schedule of (seconds, rows/s) steps or None, got {value!r}"
            )
        return value
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise SourceError(
            f"{where}: rate must be a positive number, a schedule of (seconds, rows/s) steps or None, got {value!r}"
        )
    return RateSchedule.parse(where, value)


def rate_to_json(rate: Rate | None) -> float | list | None:
    return rate.to_json() if isinstance(rate, RateSchedule) else rate


def rate_from_json(value: Any) -> Rate | None:
    if isinstance(value, list):
        return RateSchedule(tuple((t, r) for t, r in value))
    return value


def arrival_us(start_us: int, rate: Rate, rows: np.ndarray) -> np.ndarray:
    """When rows become available at a source with ``rate`` from ``start_us``: row i at
    ``start_us + floor(i * 1e6 / rate)`` microseconds for a constant rate, at its time
    in the schedule otherwise."""
    if isinstance(rate, RateSchedule):
        return start_us + np.floor(rate.arrival_s(rows) * 1e6).astype(np.int64)
    return start_us + np.floor(np.asarray(rows) * (1e6 / rate)).astype(np.int64)


def rows_arrived(start_us: int, rate: Rate, now_us: int) -> int:
    """How many rows (0, 1, ..) of a source with ``rate`` have arrived by ``now_us``."""
    if now_us < start_us:
        return 0
    seconds = (now_us - start_us) / 1e6
    expected = rate.rows_by(seconds) if isinstance(rate, RateSchedule) else seconds * rate
    k = math.floor(expected) + 1

    # Nudge by a row where float rounding disagrees with arrival_us, which is the truth.
    def due(i: int) -> int:
        return int(arrival_us(start_us, rate, np.array([i]))[0])

    while due(k) <= now_us:
        k += 1
    while k > 0 and due(k - 1) > now_us:
        k -= 1
    return k
