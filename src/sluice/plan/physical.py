"""The physical Plan: how a job graph runs for a range of micro-batches.

A Plan is immutable and versioned by the first batch id it applies to. It says which Python
operators are fused into one pass (chaining), for every keyed operator how many
partitions its stage has and which partition owns each key group (the routing table), which
alternate of each operator with alternates runs, and how many executors the job holds. The
controller changes the plan only between batches; a replayed batch uses the plan it ran
with before, which is why plans are logged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

from sluice.errors import PlanError
from sluice.graph import JobGraph
from sluice.graph.alternates import alternates_of, initial_alternates
from sluice.plan.chaining import chainable_runs
from sluice.plan.collocation import collocation_groups


@dataclass(frozen=True)
class KeyedStagePlan:
    partitions: int
    routing: tuple[int, ...]  # routing[kg] = partition that owns key group kg

    def __post_init__(self) -> None:
        if self.partitions < 1:
            raise PlanError(f"a keyed stage needs at least one partition, got {self.partitions}")
        bad = [p for p in self.routing if not 0 <= p < self.partitions]
        if bad:
            raise PlanError(f"routing table names partitions {sorted(set(bad))} outside 0..{self.partitions - 1}")

    def key_groups_of(self, partition: int) -> list[int]:
        return [kg for kg, p in enumerate(self.routing) if p == partition]


@dataclass(frozen=True)
class Plan:
    version: int  # first batch id this plan applies to
    max_parallelism: int
    keyed: dict[str, KeyedStagePlan] = field(default_factory=dict)
    chains: tuple[tuple[str, ...], ...] = ()
    # worker threads per task of a Python operator (I/O-bound operators scale with threads;
    # the model-driven planner sets them); operators not named keep their own setting
    threads: dict[str, int] = field(default_factory=dict)
    # a rebalance exchange before a chain: its head's input is spread round-robin over this
    # many partitions (a costly chain whose input has fewer partitions than cores gets them all)
    rebalance: dict[str, int] = field(default_factory=dict)
    # the active alternate of each operator with alternates (sluice.graph.alternates)
    alternates: dict[str, str] = field(default_factory=dict)
    # executors the job holds (what its cost is billed for); None: whatever Spark gives it
    executors: int | None = None
    # keyed operators that share one stage, head first: one exchange before the head, one
    # routing table for all (sluice.plan.collocation)
    collocated: tuple[tuple[str, ...], ...] = ()

    def __post_init__(self) -> None:
        members = [op for group in self.collocated for op in group]
        if len(members) != len(set(members)) or any(len(group) < 2 for group in self.collocated):
            raise PlanError(f"collocated groups must be disjoint and of two or more operators, got {self.collocated}")
        for group in self.collocated:
            if any(op not in self.keyed for op in group):
                raise PlanError(f"collocated group {list(group)} names operators that are not keyed in this plan")
            if any(self.keyed[op] != self.keyed[group[0]] for op in group):
                raise PlanError(f"collocated operators {list(group)} must share partitions and routing")
        if self.executors is not None and int(self.executors) < 1:
            raise PlanError(f"a plan holds at least one executor, got {self.executors}")
        bad = {k: v for k, v in self.threads.items() if int(v) < 1}
        if bad:
            raise PlanError(f"threads per task must be >= 1, got {bad}")
        bad = {k: v for k, v in self.rebalance.items() if int(v) < 1}
        if bad:
            raise PlanError(f"a rebalance needs at least one partition, got {bad}")
        heads = {chain[0] for chain in self.chains if chain}
        if not set(self.rebalance) <= heads:
            raise PlanError(
                f"rebalances before {sorted(set(self.rebalance) - heads)}, which head no chain "
                f"(chains: {[list(c) for c in self.chains]})"
            )

    def with_routing(self, version: int, op_id: str, routing: list[int], partitions: int | None = None) -> Plan:
        """A later plan in which ``op_id``'s key groups are routed by ``routing``."""
        if op_id not in self.keyed:
            raise PlanError(f"{op_id!r} is not a keyed operator of this plan; keyed: {sorted(self.keyed)}")
        if len(routing) != self.max_parallelism:
            raise PlanError(f"routing table has {len(routing)} entries, max parallelism is {self.max_parallelism}")
        parts = partitions if partitions is not None else max(max(routing) + 1, self.keyed[op_id].partitions)
        keyed = dict(self.keyed)
        for op in self.stage_of(op_id):  # collocated operators move together
            keyed[op] = KeyedStagePlan(parts, tuple(int(p) for p in routing))
        return replace(self, version=version, keyed=keyed)

    def stage_of(self, op_id: str) -> tuple[str, ...]:
        """The keyed operators running in ``op_id``'s stage, head first (itself alone unless
        collocated)."""
        return next((group for group in self.collocated if op_id in group), (op_id,))

    def keyed_stages(self) -> list[tuple[str, ...]]:
        """Every keyed stage as its operators, head first, in the order of ``keyed``."""
        seen: set[str] = set()
        out = []
        for op_id in self.keyed:
            if op_id not in seen:
                out.append(self.stage_of(op_id))
                seen.update(out[-1])
        return out

    def exchanges_before(self, op_id: str) -> bool:
        """Whether rows are exchanged by key group before keyed operator ``op_id``."""
        return self.stage_of(op_id)[0] == op_id

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": self.version,
                "max_parallelism": self.max_parallelism,
                "keyed": {k: {"partitions": v.partitions, "routing": list(v.routing)} for k, v in self.keyed.items()},
                "chains": [list(c) for c in self.chains],
                "threads": dict(self.threads),
                "rebalance": dict(self.rebalance),
                "alternates": dict(self.alternates),
                "executors": self.executors,
                "collocated": [list(g) for g in self.collocated],
            }
        )

    @staticmethod
    def from_json(text: str) -> Plan:
        d = json.loads(text)
        return Plan(
            version=d["version"],
            max_parallelism=d["max_parallelism"],
            keyed={k: KeyedStagePlan(v["partitions"], tuple(v["routing"])) for k, v in d["keyed"].items()},
            chains=tuple(tuple(c) for c in d["chains"]),
            threads={k: int(v) for k, v in d.get("threads", {}).items()},
            rebalance={k: int(v) for k, v in d.get("rebalance", {}).items()},
            alternates={k: str(v) for k, v in d.get("alternates", {}).items()},
            executors=None if d.get("executors") is None else int(d["executors"]),
            collocated=tuple(tuple(g) for g in d.get("collocated", [])),
        )


def range_routing(max_parallelism: int, partitions: int) -> list[int]:
    """Contiguous ranges of key groups per partition (Flink's default assignment)."""
    return [kg * partitions // max_parallelism for kg in range(max_parallelism)]


def fused_chains(graph: JobGraph) -> list[tuple[str, ...]]:
    """Maximal runs of consecutive Python operators that can share one pass (task chaining);
    see ``sluice.plan.chaining.chainable_runs``."""
    return chainable_runs(graph)


def initial_plan(graph: JobGraph, partitions: int, fuse: bool = True, collocate: bool = True) -> Plan:
    """The plan a job starts with: range routing, maximal chains (``fuse``) and consecutive
    keyed operators on the same key in one stage (``collocate``)."""
    routing = tuple(range_routing(graph.max_parallelism, partitions))
    keyed = {op.id: KeyedStagePlan(partitions, routing) for op in graph.operators if op.is_keyed}
    chains = fused_chains(graph) if fuse else [(op.id,) for op in graph.topological_order() if op.is_python]
    return Plan(
        version=0,
        max_parallelism=graph.max_parallelism,
        keyed=keyed,
        chains=tuple(chains),
        alternates=initial_alternates(graph),
        collocated=collocation_groups(graph) if collocate else (),
    )


def adapted_plan(plan: Plan, graph: JobGraph, partitions: int, version: int) -> Plan:
    """``plan`` made to fit a changed ``graph``, as of batch ``version``: keyed operators it
    routes keep their partitions and routing, new ones get the initial ones; its chains (and
    rebalances) are kept while they still chain the graph's Python operators, else chaining
    starts afresh; worker threads of operators that are gone are dropped; an operator's
    active alternate is kept while the operator still has it, else it runs its default."""
    routing = tuple(range_routing(graph.max_parallelism, partitions))
    keyed = {op.id: plan.keyed.get(op.id) or KeyedStagePlan(partitions, routing) for op in graph.operators if op.is_keyed}
    runs = fused_chains(graph)
    chains = plan.chains if _chains_fit(plan.chains, runs) else tuple(runs)
    heads = {chain[0] for chain in chains}
    rebalance = {k: v for k, v in plan.rebalance.items() if k in heads}
    threads = {k: v for k, v in plan.threads.items() if k in graph and graph[k].is_python}
    alternates = {
        op_id: plan.alternates[op_id] if plan.alternates.get(op_id) in alternates_of(graph[op_id]) else default
        for op_id, default in initial_alternates(graph).items()
    }
    # collocated groups the changed graph still allows keep sharing their head's routing
    possible = set(collocation_groups(graph))
    collocated = tuple(group for group in plan.collocated if group in possible)
    for group in collocated:
        keyed.update(dict.fromkeys(group, keyed[group[0]]))
    return replace(
        plan,
        version=version,
        keyed=keyed,
        chains=chains,
        threads=threads,
        rebalance=rebalance,
        alternates=alternates,
        collocated=collocated,
    )


def _chains_fit(chains: tuple[tuple[str, ...], ...], runs: list[tuple[str, ...]]) -> bool:
    """Every Python operator in exactly one chain, and each chain a stretch of one run of
    operators that may share a pass."""
    if sorted(i for c in chains for i in c) != sorted(i for r in runs for i in r):
        return False
    return all(
        any(chain[0] in run and run[run.index(chain[0]) : run.index(chain[0]) + len(chain)] == chain for run in runs)
        for chain in chains
    )
