"""What the job holds: task slots and executors (``Resources``), read by the control plane's
policies and filled in by the runtime's executor actuator after every batch."""

from __future__ import annotations

from dataclasses import dataclass

DRIVER = "driver"
"""The id Spark gives the driver among its executors' infos."""


@dataclass(frozen=True)
class Resources:
    """The task slots and executors the job has now, and what it may hold.

    On local Spark (and in pure tests) they are fixed: ``max_executors`` is None. On a
    standalone cluster the executor actuator fills them in after every batch: the executors
    registered now, the count asked for (``requested``: joining ones included), when each
    held one joined (``since``, epoch s: what billing starts from) and the most the cluster
    can grant."""

    cores: int = 2  # task slots the job can use at once now (Spark's default parallelism)
    executors: int = 1  # executors held now
    cores_per_executor: int = 1
    max_executors: int | None = None  # None: fixed resources (local Spark); else elastic up to this many
    requested: int | None = None  # executors asked for; more than ``executors`` while some are joining
    since: tuple[float, ...] = ()  # when each held executor joined (epoch s)

    @property
    def elastic(self) -> bool:
        return self.max_executors is not None

    @property
    def max_cores(self) -> int:
        """The most task slots the job can get: all it may hold, or what it has when fixed."""
        if self.max_executors is None:
            return max(int(self.cores), 1)
        return max(self.max_executors * max(self.cores_per_executor, 1), 1)

    @property
    def target(self) -> int:
        """The executors the job is to hold (asked for, joined or not)."""
        return self.executors if self.requested is None else self.requested


def held_executors(infos: list[dict]) -> list[dict]:
    """The executors proper (not the driver) among ``runtime.executor_pool.executor_infos``."""
    return [e for e in infos if e.get("id") not in (None, DRIVER)]
