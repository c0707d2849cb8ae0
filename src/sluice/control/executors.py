"""Executor actuators: what the controller calls to hold more or fewer executors.

An actuator reports the job's ``Resources`` after every batch and applies an accepted
``executors`` action with ``set_total(n)``. Pure of Spark: the Spark one
(``runtime.executor_pool.SparkExecutors``, around ``ExecutorPool``) lives in the runtime, the
simulator has its own (``sim.elastic``), and ``FixedExecutors`` stands for resources that
cannot change (local Spark, pure tests): it rejects every change with the reason.
"""

from __future__ import annotations

from typing import Protocol

from sluice.control.view import Resources
from sluice.errors import ConfigError

LOCAL_SPARK = (
    "local Spark runs every task in the driver's JVM on a fixed number of task slots: executors "
    "cannot be added or released; run on a standalone cluster (master spark://host:port, e.g. "
    "`sluice cluster up`) to let the controller hold executors"
)


class ExecutorActuator(Protocol):
    def resources(self) -> Resources: ...

    def set_total(self, n: int) -> None: ...


class FixedExecutors:
    """Resources that never change; ``set_total`` raises ``ConfigError`` saying why."""

    def __init__(self, resources: Resources | None = None, why: str = LOCAL_SPARK):
        self._resources = resources or Resources()
        self.why = why

    def resources(self) -> Resources:
        return self._resources

    def set_total(self, n: int) -> None:
        raise ConfigError(f"executors: cannot hold {n}: {self.why}")
