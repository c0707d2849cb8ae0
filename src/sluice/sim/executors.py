"""Simulated executors: an executor actuator for the simulator, on a simulated clock.

A requested executor joins ``startup_s`` after the request (a JVM starting and registering
with the driver); a released one leaves at once. ``resources()`` reports what the Spark
actuator reports (``runtime.executors.SparkExecutors``), so the policies see the same view
in the simulator and on a cluster. The clock is the caller's: ``now`` is read from a
function, the simulated engine's time.
"""

from __future__ import annotations

from collections.abc import Callable

from sluice.control.view import Resources
from sluice.errors import ConfigError


class SimulatedExecutors:
    def __init__(self, now: Callable[[], float], held: int = 1, max_executors: int = 4, cores_per_executor: int = 1,
                 startup_s: float = 15.0):
        if not 1 <= held <= max_executors:
            raise ConfigError(f"simulated executors: 1 <= held ({held}) <= max_executors ({max_executors}) is required")
        self.now = now
        self.max_executors, self.cores_per_executor, self.startup_s = max_executors, cores_per_executor, startup_s
        self.joined: list[float] = [now()] * held  # when each held executor joined
        self.joining: list[float] = []  # when each requested one will join
        self.target = held

    def _advance(self) -> None:
        t = self.now()
        ready = [j for j in self.joining if j <= t]
        self.joining = [j for j in self.joining if j > t]
        self.joined.extend(ready)

    def held(self) -> int:
        self._advance()
        return len(self.joined)

    def resources(self) -> Resources:
        n = self.held()
        return Resources(cores=max(n * self.cores_per_executor, 1), executors=n,
                         cores_per_executor=self.cores_per_executor, max_executors=self.max_executors,
                         requested=self.target, since=tuple(self.joined))

    def set_total(self, n: int) -> None:
        if n < 1:
            raise ConfigError(f"executors: a job holds at least one executor, asked for {n}")
        n = min(n, self.max_executors)
        self._advance()
        while len(self.joined) + len(self.joining) > n:  # the newest go first
            if self.joining:
                self.joining.pop()
            else:
                self.joined.pop()
        t = self.now()
        self.joining.extend([t + self.startup_s] * (n - len(self.joined) - len(self.joining)))
        self.target = n
