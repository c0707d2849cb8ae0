"""How a pipeline is asked to run: one typed record that ``Pipeline.run`` (from its keyword
arguments) and ``sluice run`` (from its flags) both build and hand down to the job."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from sluice.core.metrics import BatchMetrics
from sluice.errors import ConfigError, PipelineError
from sluice.plan.physical import Plan

MODES = ("auto", "micro-batch")


@dataclass(frozen=True)
class RunOptions:
    """The options of one run (``Pipeline.run`` documents each; docs/operations.md).

    >>> RunOptions(duration=20).duration
    20
    >>> RunOptions.of(durration=20)
    Traceback (most recent call last):
    ...
    sluice.errors.PipelineError: run: unknown option 'durration'; the options are ...
    """

    # where it runs
    master: str | None = None  # Spark master URL (default $SLUICE_MASTER or local[*])
    spark: Any = None  # an existing SparkSession to run in (then master, spark_conf, ui do not apply)
    spark_conf: Mapping[str, str] | None = None  # settings of the session the run creates
    ui: bool | None = None  # serve the Spark UI (default on, SLUICE_SPARK_UI=0 turns it off)
    ship: str | None = None  # the pipeline's file: modules beside it go to Spark's executors
    executors: int | None = None  # on a standalone cluster: executors held from the first batch
    max_executors: int | None = None  # ... and at most this many (default: what it started with)
    # how long and how much
    duration: float | None = None  # seconds, then stop (default: until finite input ends)
    trigger_interval: float = 0.0  # seconds between micro-batches
    max_rows_per_batch: int | None = None  # admission limit per source
    mode: str = "auto"  # "auto": real-time mode when a latency goal needs it; "micro-batch"
    # the plan and the checkpoint
    plan: Plan | None = None  # applies from the next batch (``sluice plan --output``)
    fuse: bool = True  # fuse consecutive Python operators into one pass
    collocate: bool = True  # consecutive keyed operators on one key share one stage
    reset_state: tuple[str, ...] = ()  # stateful operators whose state in the checkpoint to drop
    dead_letter_budget: float | None = None  # fraction of a batch dead-lettered that stops the job
    # control
    policies: Any = None  # a list of policies, a {"policies": [...]} dict or a YAML file
    controller: Callable[[BatchMetrics, Plan], Plan | None] | None = None  # replaces the control loop
    # a hot standby: waits for the lease and takes over (``on_standby`` hears its status lines)
    standby: bool = False
    on_standby: Callable[[str], None] | None = None
    # hooks
    on_batch: Callable[[BatchMetrics], None] | None = None  # each batch's metrics, once committed
    on_control: Callable[[dict], None] | None = None  # the controller's state after each batch
    stop_when: Callable[[Any], bool] | None = None  # asked with the batch executor; True stops

    def __post_init__(self) -> None:
        if self.duration is not None and self.duration <= 0:
            raise ConfigError(f"duration must be positive seconds, got {self.duration}")
        if self.trigger_interval < 0:
            raise ConfigError(f"trigger_interval must be >= 0 seconds, got {self.trigger_interval}")
        if self.mode not in MODES:
            raise PipelineError(f"run: mode must be 'auto' or 'micro-batch', got {self.mode!r}")
        if isinstance(self.reset_state, str):
            raise ConfigError(f"reset_state names operators: a list of ids, got the string {self.reset_state!r}")
        object.__setattr__(self, "reset_state", tuple(self.reset_state))

    @classmethod
    def of(cls, base: RunOptions | None = None, **changes: Any) -> RunOptions:
        """``base`` (default: the defaults) with ``changes``, each the name of an option;
        an unknown name is a PipelineError that lists the options."""
        names = [f.name for f in fields(cls)]
        unknown = [name for name in changes if name not in names]
        if unknown:
            raise PipelineError(f"run: unknown option {unknown[0]!r}; the options are {', '.join(names)}")
        return replace(base, **changes) if base is not None else cls(**changes)
