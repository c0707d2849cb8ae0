"""What a policy proposes: an :class:`Action` with its reason and expected effect.

Kinds and their actuators (``sluice.control.actuators``):

- ``admission``: rows per micro-batch the sources may admit (``target`` ``"*"``: the whole
  job's batch, split over the sources by their share of the input; or one source's id).
  Written to the sources' admission files; the next batch Spark plans uses it.
- ``chains``: the next Plan's fused Python chains (``value``: a tuple of tuples of ids, or
  ``{"chains": ..., "rebalance": {head: partitions}}`` with the rebalance exchanges before
  chains that the chaining policy places).
- ``threads``: worker threads per task of a Python operator (``target``: its id).
- ``partitions``: partitions of a keyed stage (``target``: its id; ``value``: the count, key
  groups re-routed in contiguous ranges, or ``{"partitions": n, "routing": [...]}``, the
  partition of each key group under the new count, as the scaling policy balances them;
  state follows its key groups through the store). :func:`partitions_of` reads either.
- ``routing``: the routing table of a keyed stage (``target``: its id; ``value``: the
  partition of each key group); moved key groups' state is read by their new partition.
  ``value`` may also be ``{op id: table}``: several stages re-routed in one step (ALBIC's
  collocation moves communicating key groups of two stages to one partition index).
- ``alternate``: which alternate of an operator with alternates runs (``target``: its id;
  ``value``: the alternate's name; ``sluice.graph.alternates``). The next Plan says so: the
  switch happens at the batch boundary, and a replayed batch runs the alternate it ran with.
- ``executors``: how many executors the job holds (``target`` ``"*"``; ``value``: a count).
  The next Plan says so, and the job's cost is billed for them; on a standalone cluster the
  controller's executor actuator asks Spark for them (``runtime.executor_pool.ExecutorPool``);
  on local Spark the action is rejected (its task slots are fixed). An ``executors`` action
  may go with one other structural action of the same policy in the same batch: the
  resources and the parallelism that uses them change in one step (DS2).
- ``escalate``: no countermeasure can meet a constraint (``target``: its name; ``value``:
  ``{"bottleneck": op id, "max_rate": rows/s at which the bound can hold, ...}``). Nothing is
  actuated; it is logged, warned about and shown.

Structural kinds change the Plan and go through the arbiter's one-at-a-time flush rule;
``admission`` may change every batch, and so may ``alternate`` (a selection among
implementations the graph already has, several operators at once: the thesis switches the
alternates of a whole dataflow at the start of an interval).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ADMISSION = "admission"
CHAINS = "chains"
THREADS = "threads"
PARTITIONS = "partitions"
ROUTING = "routing"
ALTERNATE = "alternate"
EXECUTORS = "executors"
ESCALATE = "escalate"

STRUCTURAL = frozenset({CHAINS, THREADS, PARTITIONS, ROUTING, EXECUTORS})
# plan changes that select rather than restructure: any number a batch, one per target
SWITCHES = frozenset({ALTERNATE})
KINDS = frozenset({ADMISSION, ESCALATE}) | STRUCTURAL | SWITCHES

ALL_SOURCES = "*"


@dataclass(frozen=True)
class Action:
    """One proposed change. ``expected``: the effect the policy predicts, in the same units
    the controller measures afterwards (``batch_ms``, ``latency_ms``, ``rows``, ...)."""

    kind: str
    target: str
    value: Any
    reason: str
    expected: dict = field(default_factory=dict)
    policy: str = ""  # set by the controller: who proposed it

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown action kind {self.kind!r}; kinds: {sorted(KINDS)}")

    @property
    def structural(self) -> bool:
        return self.kind in STRUCTURAL

    def to_dict(self) -> dict:
        value = self.value
        if self.kind == CHAINS:  # tuples of tuples, possibly with rebalances: as JSON lists
            value = (
                {"chains": [list(c) for c in value["chains"]], "rebalance": dict(value.get("rebalance") or {})}
                if isinstance(value, dict)
                else [list(c) for c in value]
            )
        return {
            "kind": self.kind,
            "target": self.target,
            "value": value,
            "reason": self.reason,
            "expected": dict(self.expected),
            "policy": self.policy,
        }


def partitions_of(value: Any) -> int:
    """The partition count a ``partitions`` action's value (or its logged form) asks for."""
    return int(value["partitions"]) if isinstance(value, dict) else int(value)
