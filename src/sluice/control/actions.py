"""What a policy proposes: one frozen dataclass per kind of change, with its reason and
expected effect.

Every action shares ``target``, ``reason``, ``expected`` (the effect the policy predicts, in
the units the controller measures afterwards: ``batch_ms``, ``latency_ms``, ``rows``, ...)
and ``policy`` (set by the controller: who proposed it). Its own fields say what it changes,
and its class says how it takes effect (``sluice.control.actuators``):

- :class:`Admission`: ``rows`` per micro-batch the sources may admit (``target`` ``"*"``:
  the whole job's batch, split over the sources by their share of the input; or one
  source's id). Written to the sources' admission files; the next batch Spark plans uses it.
- :class:`Chains`: the next Plan's fused Python ``chains`` (tuples of operator ids), with
  the ``rebalance`` exchanges before chains that the chaining policy places (None: the
  Plan's rebalances stay).
- :class:`Threads`: worker ``threads`` per task of a Python operator (``target``: its id).
- :class:`Partitions`: the partition ``count`` of a keyed stage (``target``: its id); key
  groups re-routed in contiguous ranges, or by ``routing`` (the partition of each key group
  under the new count, as the scaling policy balances them); state follows its key groups
  through the store.
- :class:`Routing`: the routing ``tables`` of keyed stages (op id -> the partition of each
  key group); moved key groups' state is read by their new partition. One table for the
  ``target`` stage, or several stages re-routed in one step (ALBIC's collocation moves
  communicating key groups of two stages to one partition index).
- :class:`SwitchAlternate`: which ``alternate`` of an operator with alternates runs (``target``:
  its id; ``sluice.graph.alternates``). The next Plan says so: the switch happens at the
  batch boundary, and a replayed batch runs the alternate it ran with.
- :class:`Executors`: how many executors (``count``) the job holds. The next Plan says so,
  and the job's cost is billed for them; on a standalone cluster the controller's executor
  actuator asks Spark for them (``runtime.executor_pool.ExecutorPool``); on local Spark the
  action is rejected (its task slots are fixed). An executors action may go with one other
  structural action of the same policy in the same batch: the resources and the
  parallelism that uses them change in one step (DS2).
- :class:`Escalate`: no countermeasure can meet a constraint (``target``: its name;
  ``details``: ``{"bottleneck": op id, "max_rate": rows/s at which the bound can hold,
  ...}``). Nothing is actuated; it is logged, warned about and shown.

Structural actions change the Plan and go through the arbiter's one-at-a-time flush rule;
an admission may change every batch, and so may an alternate (a selection among
implementations the graph already has, several operators at once: the thesis switches the
alternates of a whole dataflow at the start of an interval).

The decisions log keeps each action as ``{"kind", "target", "value", "reason", "expected",
"policy"}`` (:meth:`Action.to_dict`); :func:`Action.from_dict` reads that form back, old
logs included.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from sluice.errors import PlanError
from sluice.plan.physical import Plan, range_routing

ADMISSION = "admission"
CHAINS = "chains"
THREADS = "threads"
PARTITIONS = "partitions"
ROUTING = "routing"
ALTERNATE = "alternate"
EXECUTORS = "executors"
ESCALATE = "escalate"

ALL_SOURCES = "*"


@dataclass(frozen=True, kw_only=True)
class Action:
    """One proposed change (a subclass per kind; see the module's docstring)."""

    kind: ClassVar[str] = ""
    structural: ClassVar[bool] = False  # changes the Plan under the arbiter's flush rule

    target: str
    reason: str
    expected: Mapping[str, Any] = field(default_factory=dict)
    policy: str = ""  # set by the controller: who proposed it

    @property
    def value(self) -> Any:
        """The action's change in its logged form (``to_dict``'s ``value``)."""
        raise NotImplementedError

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "target": self.target,
            "value": _json(self.value),
            "reason": self.reason,
            "expected": dict(self.expected),
            "policy": self.policy,
        }

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> Action:
        """An action from its logged form (``to_dict``), old logs' value shapes included."""
        kind = data.get("kind")
        cls = ACTION_TYPES.get(str(kind))
        if cls is None:
            raise ValueError(f"unknown action kind {kind!r}; kinds: {sorted(ACTION_TYPES)}")
        common = {
            "target": str(data.get("target", ALL_SOURCES)),
            "reason": str(data.get("reason", "")),
            "expected": dict(data.get("expected") or {}),
            "policy": str(data.get("policy", "")),
        }
        return cls._parse(data.get("value"), common)

    @classmethod
    def _parse(cls, value: Any, common: dict) -> Action:
        raise NotImplementedError

    def apply(self, plan: Plan, version: int) -> Plan:
        """The Plan from ``version`` on with this action applied."""
        raise PlanError(f"{self.kind!r} is not a change of the plan")

    def in_force(self, plan: Plan, executors: int) -> bool:
        """Whether ``plan`` (with ``executors`` asked for) already has this change."""
        return True

    def undo(self, plan: Plan, executors: int) -> Action:
        """The action that puts back what this one replaces in ``plan``."""
        return replace(self, reason="undo", expected={}, policy="")


@dataclass(frozen=True, kw_only=True)
class Admission(Action):
    """Rows per micro-batch the sources may admit: ``target`` ``"*"`` is the whole job's
    batch, split over the sources by their share of the input; else one source's id."""

    kind: ClassVar[str] = ADMISSION
    target: str = ALL_SOURCES
    rows: int

    @property
    def value(self) -> int:
        return self.rows

    @classmethod
    def _parse(cls, value: Any, common: dict) -> Admission:
        return cls(rows=int(value), **common)


@dataclass(frozen=True, kw_only=True)
class Chains(Action):
    """The next Plan's fused Python chains (tuples of operator ids, covering the same
    operators as now), and the rebalance exchanges before chains (None: the Plan's stay)."""

    kind: ClassVar[str] = CHAINS
    structural: ClassVar[bool] = True
    target: str = ALL_SOURCES
    chains: tuple[tuple[str, ...], ...]
    rebalance: Mapping[str, int] | None = None  # None: the Plan's rebalances stay

    def __post_init__(self) -> None:
        object.__setattr__(self, "chains", tuple(tuple(str(op) for op in chain) for chain in self.chains))
        if self.rebalance is not None:
            object.__setattr__(self, "rebalance", {str(op): int(n) for op, n in self.rebalance.items()})

    @property
    def value(self) -> Any:
        if self.rebalance is None:
            return self.chains
        return {"chains": self.chains, "rebalance": dict(self.rebalance)}

    @classmethod
    def _parse(cls, value: Any, common: dict) -> Chains:
        if isinstance(value, Mapping):
            return cls(chains=value["chains"], rebalance=dict(value.get("rebalance") or {}), **common)
        return cls(chains=value, **common)

    def apply(self, plan: Plan, version: int) -> Plan:
        old = sorted(op for chain in plan.chains for op in chain)
        new = sorted(op for chain in self.chains for op in chain)
        if old != new:
            raise PlanError(f"new chains {self.chains} must cover the same Python operators as {plan.chains}")
        rebalance = dict(plan.rebalance if self.rebalance is None else self.rebalance)
        return replace(plan, version=version, chains=self.chains, rebalance=rebalance)

    def in_force(self, plan: Plan, executors: int) -> bool:
        return tuple(tuple(c) for c in plan.chains) == self.chains

    def undo(self, plan: Plan, executors: int) -> Chains:
        return Chains(chains=plan.chains, rebalance=dict(plan.rebalance), target=self.target, reason="undo")


@dataclass(frozen=True, kw_only=True)
class Threads(Action):
    """Worker threads per task of the Python operator ``target``."""

    kind: ClassVar[str] = THREADS
    structural: ClassVar[bool] = True
    threads: int

    @property
    def value(self) -> int:
        return self.threads

    @classmethod
    def _parse(cls, value: Any, common: dict) -> Threads:
        return cls(threads=int(value), **common)

    def apply(self, plan: Plan, version: int) -> Plan:
        return replace(plan, version=version, threads={**plan.threads, self.target: int(self.threads)})

    def in_force(self, plan: Plan, executors: int) -> bool:
        return plan.threads.get(self.target, 1) == self.threads

    def undo(self, plan: Plan, executors: int) -> Threads:
        return Threads(target=self.target, threads=plan.threads.get(self.target, 1), reason="undo")

    def sizes(self, plan: Plan, executors: int) -> tuple[int, int]:
        """(now, asked): the threads in force and those this action asks for."""
        return plan.threads.get(self.target, 1), self.threads


@dataclass(frozen=True, kw_only=True)
class Partitions(Action):
    """The partition count of the keyed stage ``target``; key groups in contiguous ranges,
    or by ``routing`` (the partition of each key group under the new count)."""

    kind: ClassVar[str] = PARTITIONS
    structural: ClassVar[bool] = True
    count: int
    routing: tuple[int, ...] | None = None  # None: key groups in contiguous ranges

    def __post_init__(self) -> None:
        if self.routing is not None:
            object.__setattr__(self, "routing", tuple(int(p) for p in self.routing))

    @property
    def value(self) -> Any:
        if self.routing is None:
            return self.count
        return {"partitions": self.count, "routing": list(self.routing)}

    @classmethod
    def _parse(cls, value: Any, common: dict) -> Partitions:
        if isinstance(value, Mapping):
            routing = value.get("routing")
            return cls(count=int(value["partitions"]), routing=None if routing is None else tuple(routing), **common)
        return cls(count=int(value), **common)

    def apply(self, plan: Plan, version: int) -> Plan:
        n = self.count
        if self.routing is None:
            return plan.with_routing(version, self.target, range_routing(plan.max_parallelism, n), n)
        table = self.routing
        if len(table) != plan.max_parallelism or not all(0 <= p < n for p in table):
            raise PlanError(
                f"partitions of {self.target!r}: a routing of {plan.max_parallelism} key groups onto "
                f"partitions 0..{n - 1} is needed, got {len(table)} entries"
            )
        return plan.with_routing(version, self.target, list(table), n)

    def in_force(self, plan: Plan, executors: int) -> bool:
        stage = plan.keyed.get(self.target)
        return stage is not None and stage.partitions == self.count

    def undo(self, plan: Plan, executors: int) -> Partitions:
        stage = plan.keyed[self.target]
        return Partitions(target=self.target, count=stage.partitions, routing=tuple(stage.routing), reason="undo")

    def sizes(self, plan: Plan, executors: int) -> tuple[int, int] | None:
        stage = plan.keyed.get(self.target)
        return None if stage is None else (stage.partitions, self.count)


@dataclass(frozen=True, kw_only=True)
class Routing(Action):
    """New routing tables (op id -> the partition of each key group) of one keyed stage, or
    of several moved in one step (collocation); the partition counts stay."""

    kind: ClassVar[str] = ROUTING
    structural: ClassVar[bool] = True
    tables: Mapping[str, tuple[int, ...]]  # op id -> the partition of each key group

    def __post_init__(self) -> None:
        object.__setattr__(self, "tables", {str(op): tuple(int(p) for p in t) for op, t in self.tables.items()})

    @classmethod
    def of(cls, target: str, table, reason: str, expected: Mapping[str, Any] | None = None) -> Routing:
        """One stage's new routing table."""
        return cls(target=target, tables={target: tuple(table)}, reason=reason, expected=dict(expected or {}))

    @property
    def value(self) -> Any:
        if set(self.tables) == {self.target}:
            return list(self.tables[self.target])
        return {op: list(t) for op, t in self.tables.items()}

    @property
    def stages(self) -> set[str]:
        return set(self.tables)

    @classmethod
    def _parse(cls, value: Any, common: dict) -> Routing:
        tables = dict(value) if isinstance(value, Mapping) else {common["target"]: value}
        return cls(tables=tables, **common)

    def apply(self, plan: Plan, version: int) -> Plan:
        routed = replace(plan, version=version)
        for op_id, table in self.tables.items():
            if op_id not in plan.keyed:
                raise PlanError(f"{op_id!r} is not a keyed operator of this plan; keyed: {sorted(plan.keyed)}")
            routed = routed.with_routing(version, op_id, list(table), plan.keyed[op_id].partitions)
        return routed

    def in_force(self, plan: Plan, executors: int) -> bool:
        return all(op in plan.keyed and tuple(plan.keyed[op].routing) == t for op, t in self.tables.items())

    def undo(self, plan: Plan, executors: int) -> Routing:
        tables = {op: tuple(int(p) for p in plan.keyed[op].routing) for op in self.tables}
        return Routing(target=self.target, tables=tables, reason="undo")


@dataclass(frozen=True, kw_only=True)
class SwitchAlternate(Action):
    """Run ``alternate`` of the operator ``target`` (one of its alternates) from the next batch."""

    kind: ClassVar[str] = ALTERNATE
    alternate: str

    @property
    def value(self) -> str:
        return self.alternate

    @classmethod
    def _parse(cls, value: Any, common: dict) -> SwitchAlternate:
        return cls(alternate=str(value), **common)

    def apply(self, plan: Plan, version: int) -> Plan:
        if self.target not in plan.alternates:
            raise PlanError(
                f"{self.target!r} has no alternates in this plan; operators with alternates: {sorted(plan.alternates)}"
            )
        return replace(plan, version=version, alternates={**plan.alternates, self.target: self.alternate})


@dataclass(frozen=True, kw_only=True)
class Executors(Action):
    """Hold ``count`` executors (a standalone cluster; local Spark rejects it)."""

    kind: ClassVar[str] = EXECUTORS
    structural: ClassVar[bool] = True
    target: str = ALL_SOURCES
    count: int

    @property
    def value(self) -> int:
        return self.count

    @classmethod
    def _parse(cls, value: Any, common: dict) -> Executors:
        return cls(count=int(value), **common)

    def apply(self, plan: Plan, version: int) -> Plan:
        return replace(plan, version=version, executors=int(self.count))

    def in_force(self, plan: Plan, executors: int) -> bool:
        return executors == self.count

    def undo(self, plan: Plan, executors: int) -> Executors:
        return Executors(target=self.target, count=executors, reason="undo")

    def sizes(self, plan: Plan, executors: int) -> tuple[int, int]:
        return executors, self.count


@dataclass(frozen=True, kw_only=True)
class Escalate(Action):
    """No countermeasure can meet the constraint ``target``: ``details`` say why
    (bottleneck, max_rate, ...). Logged and warned about; nothing is actuated."""

    kind: ClassVar[str] = ESCALATE
    details: Mapping[str, Any]  # bottleneck, max_rate, offered_rate, ...

    @property
    def value(self) -> dict:
        return dict(self.details)

    @classmethod
    def _parse(cls, value: Any, common: dict) -> Escalate:
        return cls(details=dict(value) if isinstance(value, Mapping) else {"value": value}, **common)


ACTION_TYPES: dict[str, type[Action]] = {
    cls.kind: cls for cls in (Admission, Chains, Threads, Partitions, Routing, SwitchAlternate, Executors, Escalate)
}
KINDS = frozenset(ACTION_TYPES)
STRUCTURAL = frozenset(kind for kind, cls in ACTION_TYPES.items() if cls.structural)


def _json(value: Any) -> Any:
    """Tuples as lists, as JSON has them (a logged chains value is lists of lists)."""
    if isinstance(value, (tuple, list)):
        return [_json(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _json(v) for k, v in value.items()}
    return value


def partitions_of(value: Any) -> int:
    """The partition count a logged ``partitions`` action's value asks for."""
    return int(value["partitions"]) if isinstance(value, Mapping) else int(value)
