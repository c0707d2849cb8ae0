"""What a job's resources cost and what its results are worth: the user's side of the
thesis's value/cost model (section 4.6); ``models.economics`` measures it batch by batch.

Pure Python: no Spark.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sluice.errors import ConfigError

BILLING = ("hour", "second")


@dataclass(frozen=True)
class Economics:
    """What a job's resources cost and what its results are worth (``Pipeline.economics``).

    ``price_per_hour``: what one executor costs an hour; ``billing``: ``"hour"`` (every
    started hour of an executor billed whole, thesis Eq. 4.2) or ``"second"``;
    ``break_even_best`` / ``break_even_worst``: the cost per hour at which a run breaks even
    with every operator on its best / worst alternate (default: two executors' price / one
    executor's price); ``min_omega``: the relative throughput the job must keep (Omega-hat).
    """

    price_per_hour: float = 1.0
    billing: str = "second"
    break_even_best: float | None = None
    break_even_worst: float | None = None
    min_omega: float = 0.8

    def __post_init__(self) -> None:
        if not (isinstance(self.price_per_hour, (int, float)) and self.price_per_hour >= 0):
            raise ConfigError(f"economics: price_per_hour must be >= 0, got {self.price_per_hour!r}")
        if self.billing not in BILLING:
            raise ConfigError(f"economics: billing must be one of {BILLING}, got {self.billing!r}")
        if not 0 <= self.min_omega <= 1:
            raise ConfigError(f"economics: min_omega is a relative throughput in [0, 1], got {self.min_omega!r}")
        best, worst = self.break_even_rates
        if not best > worst >= 0:
            raise ConfigError(
                f"economics: the break-even cost at the best value ({best}/h) must exceed the one at the "
                f"worst value ({worst}/h): a better result is worth paying more for (Eq. 4.9)"
            )

    @property
    def break_even_rates(self) -> tuple[float, float]:
        """(at the best value, at the worst value), per hour."""
        best = 2.0 * self.price_per_hour if self.break_even_best is None else float(self.break_even_best)
        worst = 1.0 * self.price_per_hour if self.break_even_worst is None else float(self.break_even_worst)
        return best, worst

    def lease_cost(self, start: float, stop: float) -> float:
        """What one executor held from ``start`` to ``stop`` (epoch seconds) costs (Eq. 4.2)."""
        seconds = max(stop - start, 0.0)
        if self.billing == "hour":
            return math.ceil(seconds / 3600.0 - 1e-9) * self.price_per_hour
        return seconds / 3600.0 * self.price_per_hour
