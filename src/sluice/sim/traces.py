"""Deterministic traces for the simulator: VM performance and input rates.

VM performance (thesis section 1.3, Fig. 1.1 and 1.2, measured on EC2 m1.small VMs): about
23 % of VMs average below 0.8 of their rated core speed, and in 25 % of the observations the
speed changes by more than 20 % from one time slot to the next; 22 % of VMs have a normalised
bandwidth below 0.8. We generate each VM's relative speed as

    speed_t = clip(m_v * (1 + x_t), 0.1, 1),   x_t = phi x_{t-1} + eta_t,  eta ~ N(0, s^2)

with a per-VM level m_v ~ N(0.9, 0.13^2) and phi = 0.3, s = 0.17: parameters fitted by
simulation to both statistics at 5-minute steps (``tests/sim/test_dynamic_sim.py`` checks them).
Speeds are relative to rated (1 = rated; "normalised by the best observed"), so never above 1.

Every trace is a pure function of (seed, stream name, index): a VM's trace does not depend on
how many VMs started before it or in which order schedulers asked for them, so two schedulers
compared on one seed see the same cloud.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np


def _rng(seed: int, stream: str, index: int = 0) -> np.random.Generator:
    return np.random.default_rng([int(seed), zlib.crc32(stream.encode()), int(index)])


@dataclass(frozen=True)
class PerformanceModel:
    """Parameters of the VM performance process (defaults fitted to the thesis's EC2 data)."""

    level_mean: float = 0.9
    level_sd: float = 0.13
    persistence: float = 0.3
    innovation_sd: float = 0.17
    floor: float = 0.1

    def trace(self, rng: np.random.Generator, n_steps: int) -> np.ndarray:
        level = float(np.clip(rng.normal(self.level_mean, self.level_sd), 0.3, 1.0))
        eta = rng.normal(0.0, self.innovation_sd, n_steps)
        x = np.empty(n_steps)
        prev = rng.normal(0.0, self.innovation_sd / np.sqrt(1 - self.persistence**2))
        for t in range(n_steps):  # an AR(1) recursion: 144 steps for a 12-hour run
            prev = self.persistence * prev + eta[t]
            x[t] = prev
        return np.clip(level * (1.0 + x), self.floor, 1.0)


@dataclass
class VMTraces:
    """Relative core speed and bandwidth of the k-th VM ever started, per step."""

    seed: int
    n_steps: int
    variable: bool = True
    model: PerformanceModel = PerformanceModel()

    def __post_init__(self) -> None:
        self._speed: dict[int, np.ndarray] = {}
        self._bandwidth: dict[int, np.ndarray] = {}

    def speed(self, index: int) -> np.ndarray:
        if not self.variable:
            return np.ones(self.n_steps)
        if index not in self._speed:
            self._speed[index] = self.model.trace(_rng(self.seed, "cpu", index), self.n_steps)
        return self._speed[index]

    def bandwidth(self, index: int) -> np.ndarray:
        if not self.variable:
            return np.ones(self.n_steps)
        if index not in self._bandwidth:
            self._bandwidth[index] = self.model.trace(_rng(self.seed, "net", index), self.n_steps)
        return self._bandwidth[index]


def random_walk_rates(
    mean: float, n_steps: int, seed: int, bound: float = 0.5, step_sd: float = 0.08, stream: str = "rate", reversion: float = 0.05
) -> np.ndarray:
    """Section 4.9: 'the given data rate is considered as an average value and the
    instantaneous data rate is obtained using a random walk between +-50 % of that value'.

    Multiplicative steps reflected at the bounds, with a weak pull back to the mean, then
    rescaled so that the run *averages* ``mean`` (a free walk's average over 144 steps wanders
    far from its start, which would turn 'the average rate' into a different load per seed);
    the rescaled series is clipped to the bounds again.
    """
    rng = _rng(seed, stream)
    steps = rng.normal(0.0, step_sd, n_steps)
    lo, hi = 1.0 - bound, 1.0 + bound
    level = np.empty(n_steps)
    x = 1.0
    for t in range(n_steps):
        x = x + steps[t] - reversion * (x - 1.0)
        if x > hi:
            x = 2 * hi - x
        if x < lo:
            x = 2 * lo - x
        level[t] = x
    level = np.clip(level / level.mean(), lo, hi)
    return mean * level


def sinusoid_rates(
    peak: float,
    trough: float,
    n_steps: int,
    step_s: float,
    seed: int,
    period_s: float = 86400.0,
    noise: float = 0.2,
    phase_s: float = 0.0,
    stream: str = "sine",
) -> np.ndarray:
    """Section 5.4: a daily sinusoid between ``trough`` and ``peak`` msg/s, plus uniform noise
    of up to +-``noise`` (the thesis adds it every minute; we add it every step). The default
    phase starts at the trough, so a 12-hour run climbs to the peak."""
    rng = _rng(seed, stream)
    t = np.arange(n_steps) * step_s + phase_s
    mid, amp = (peak + trough) / 2.0, (peak - trough) / 2.0
    base = mid - amp * np.cos(2 * np.pi * t / period_s)
    return base * (1.0 + rng.uniform(-noise, noise, n_steps))
