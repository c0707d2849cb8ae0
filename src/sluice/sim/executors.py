"""Simulated executors: an executor actuator for the simulator, on a simulated clock.

A requested executor joins ``startup_s`` after the request (a JVM starting and registering
with the driver) and runs tasks ``warmup_s`` after that (its Python workers starting: Spark
gives a registered executor tasks at once, and they wait for those workers); a released one
leaves at once. The executors held at the start are warm. ``resources()`` reports what the Spark
actuator reports (``runtime.executor_pool.SparkExecutors``), so the policies see the same view
in the simulator and on a cluster. The clock is the caller's: ``now`` is read from a
function, the simulated engine's time.
"""

from __future__ import annotations

from collections.abc import Callable

from sluice.core.resources import Resources
from sluice.errors import ConfigError


class SimulatedExecutors:
    def __init__(
        self,
        now: Callable[[], float],
        held: int = 1,
        max_executors: int = 4,
        cores_per_executor: int = 1,
        startup_s: float = 15.0,
        warmup_s: float = 0.0,
    ):
        if not 1 <= held <= max_executors:
            raise ConfigError(f"simulated executors: 1 <= held ({held}) <= max_executors ({max_executors}) is required")
        if startup_s < 0 or warmup_s < 0:
            raise ConfigError(f"simulated executors: startup_s ({startup_s}) and warmup_s ({warmup_s}) must be >= 0")
        self.now = now
        self.max_executors, self.cores_per_executor, self.startup_s = max_executors, cores_per_executor, startup_s
        self.warmup_s = warmup_s
        self.joined: list[float] = [now()] * held  # when each held executor joined
        self.warm: list[float] = [now()] * held  # when each held executor's Python workers run tasks
        self.joining: list[float] = []  # when each requested one will join
        self.target = held

    def _advance(self) -> None:
        t = self.now()
        ready = [j for j in self.joining if j <= t]
        self.joining = [j for j in self.joining if j > t]
        self.joined.extend(ready)
        self.warm.extend(j + self.warmup_s for j in ready)

    def held(self) -> int:
        self._advance()
        return len(self.joined)

    def resources(self) -> Resources:
        n = self.held()
        return Resources(
            cores=max(n * self.cores_per_executor, 1),
            executors=n,
            cores_per_executor=self.cores_per_executor,
            max_executors=self.max_executors,
            requested=self.target,
            since=tuple(self.joined),
        )

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
                self.warm.pop()
        t = self.now()
        self.joining.extend([t + self.startup_s] * (n - len(self.joined) - len(self.joining)))
        self.target = n

    def kill_one(self) -> None:
        """An executor dies (the newest held): Spark asks for a replacement, which joins after
        ``startup_s``, so the job's target stays."""
        self._advance()
        if not self.joined:
            return
        self.joined.pop()
        self.warm.pop()
        self.joining.append(self.now() + self.startup_s)

    def slots(self, begin: float) -> list[tuple[float, float]]:
        """Every task slot (executor core) a batch starting at ``begin`` may use, held and
        joining: (when Spark first offers it a task, when it can run one)."""
        self._advance()
        held = [(begin, max(begin, w)) for w in self.warm]
        joining = [(j, j + self.warmup_s) for j in self.joining]
        return [slot for slot in held + joining for _ in range(self.cores_per_executor)]
