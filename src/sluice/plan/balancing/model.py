"""The inputs and outputs of key-group balancing, and the two quality metrics.

Everything here is what the runtime measures per key group over the latest statistics
period (ALBIC paper, section 3 "Statistics"): the load of each key group on the bottleneck
resource (optionally on further resources), the size of its state, and the traffic between
key groups. A *node* is a partition of a keyed stage (docs/architecture.md, section 3); nodes have a
capacity weight (heterogeneous nodes, section 3 "Heterogeneity") and may be marked for
removal (the set N_r of section 4.3.1).

Units. Loads are in percentage points of an *average* node (a node of capacity weight 1.0),
so a node of weight ``w`` carrying load ``L`` is ``L / w`` percent busy. The paper multiplies
the average load by the node's capacity weight in constraints (3) and (4); dividing the
node's load by its weight, as done here, is the same comparison.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from sluice.errors import PlanError


@dataclass(frozen=True)
class Traffic:
    """Sparse directed traffic between key groups: ``rate[i]`` tuples/s from ``src[i]`` to ``dst[i]``."""

    src: np.ndarray
    dst: np.ndarray
    rate: np.ndarray

    @staticmethod
    def empty() -> Traffic:
        return Traffic(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0))

    @staticmethod
    def from_pairs(pairs: dict[tuple[int, int], float] | list[tuple[int, int, float]]) -> Traffic:
        items = list(pairs.items()) if isinstance(pairs, dict) else [((a, b), r) for a, b, r in pairs]
        if not items:
            return Traffic.empty()
        src = np.array([a for (a, _), _ in items], dtype=np.int64)
        dst = np.array([b for (_, b), _ in items], dtype=np.int64)
        rate = np.array([r for _, r in items], dtype=float)
        return Traffic(src, dst, rate)

    def __len__(self) -> int:
        return len(self.rate)


@dataclass(frozen=True)
class BalancingProblem:
    """One round's input to a balancer: measured statistics, the cluster and the current routing.

    Arrays indexed by key group (length K): ``load``, ``state_bytes``, ``assignment`` (node id of
    each key group), optional ``operator`` (operator id of each key group) and
    ``resource_load`` (K x R, non-bottleneck resources). Arrays indexed by node (length N):
    ``nodes`` (node ids), ``capacity`` (weights, 1.0 = average node), ``removing`` (N_r mask),
    optional ``resource_cap`` (N x R).

    The migration cost of key group k is ``m_k = cost_per_byte * state_bytes[k]`` (the paper's
    m_k = c * |S_k|: c is chosen so m_k is the time to serialize the state on an average node).
    """

    load: np.ndarray
    state_bytes: np.ndarray
    assignment: np.ndarray
    nodes: np.ndarray
    # per node; not given (empty): every node weighs 1.0, and none is being removed
    capacity: np.ndarray = field(default_factory=lambda: np.zeros(0))
    removing: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    traffic: Traffic = field(default_factory=Traffic.empty)
    operator: np.ndarray | None = None
    resource_load: np.ndarray | None = None
    resource_cap: np.ndarray | None = None
    cost_per_byte: float = 1.0

    def __post_init__(self) -> None:
        def set_(name: str, value: object) -> None:  # the dataclass is frozen
            object.__setattr__(self, name, value)

        load = np.asarray(self.load, dtype=float)
        k = load.shape[0]
        set_("load", load)
        set_("state_bytes", np.asarray(self.state_bytes, dtype=float))
        set_("assignment", np.asarray(self.assignment, dtype=np.int64))
        nodes = np.asarray(self.nodes, dtype=np.int64)
        set_("nodes", nodes)
        n = nodes.shape[0]

        def given(a: np.ndarray | None) -> bool:
            return a is not None and np.size(a) > 0

        set_("capacity", np.asarray(self.capacity, dtype=float) if given(self.capacity) else np.ones(n))
        set_("removing", np.asarray(self.removing, dtype=bool) if given(self.removing) else np.zeros(n, bool))
        if self.operator is not None:
            set_("operator", np.asarray(self.operator, dtype=np.int64))
        if self.resource_load is not None:
            set_("resource_load", np.atleast_2d(np.asarray(self.resource_load, dtype=float)).reshape(k, -1))
        if self.resource_cap is not None:
            set_("resource_cap", np.asarray(self.resource_cap, dtype=float).reshape(n, -1))
        self._validate()

    def _validate(self) -> None:
        k, n = self.num_key_groups, self.num_nodes
        for name in ("state_bytes", "assignment"):
            if getattr(self, name).shape != (k,):
                raise PlanError(f"balancing input: {name} has shape {getattr(self, name).shape}, expected ({k},)")
        if self.operator is not None and self.operator.shape != (k,):
            raise PlanError(f"balancing input: operator has shape {self.operator.shape}, expected ({k},)")
        for name in ("capacity", "removing"):
            if getattr(self, name).shape != (n,):
                raise PlanError(f"balancing input: {name} has shape {getattr(self, name).shape}, expected ({n},)")
        if n == 0:
            raise PlanError("balancing input: no nodes")
        if len(np.unique(self.nodes)) != n:
            raise PlanError(f"balancing input: duplicate node ids in {self.nodes.tolist()}")
        if np.any(self.load < 0) or np.any(self.state_bytes < 0):
            raise PlanError("balancing input: negative key-group load or state size")
        if np.any(self.capacity <= 0):
            raise PlanError(f"balancing input: node capacity weights must be > 0, got {self.capacity.tolist()}")
        if self.removing.all():
            raise PlanError("balancing input: every node is marked for removal; nothing can receive key groups")
        unknown = ~np.isin(self.assignment, self.nodes)
        if unknown.any():
            kg = int(np.flatnonzero(unknown)[0])
            raise PlanError(f"balancing input: key group {kg} is on node {self.assignment[kg]}, which is not a node")
        t = self.traffic
        if len(t) and (t.src.min() < 0 or t.dst.min() < 0 or t.src.max() >= k or t.dst.max() >= k):
            raise PlanError("balancing input: traffic names a key group outside 0..K-1")
        if (self.resource_load is None) != (self.resource_cap is None):
            raise PlanError("balancing input: resource_load and resource_cap must be given together")
        if (
            self.resource_load is not None
            and self.resource_cap is not None
            and self.resource_load.shape[1] != self.resource_cap.shape[1]
        ):
            raise PlanError("balancing input: resource_load and resource_cap disagree on the number of resources")

    # -- sizes and derived arrays -------------------------------------------------------------
    @property
    def num_key_groups(self) -> int:
        return int(self.load.shape[0])

    @property
    def num_nodes(self) -> int:
        return int(self.nodes.shape[0])

    @property
    def migration_cost(self) -> np.ndarray:
        """m_k = c * |S_k| per key group."""
        return self.cost_per_byte * self.state_bytes

    def node_index(self, node_ids: np.ndarray) -> np.ndarray:
        """Positions (0..N-1) of the given node ids."""
        order = np.argsort(self.nodes)
        pos = np.searchsorted(self.nodes, node_ids, sorter=order)
        return order[np.clip(pos, 0, len(order) - 1)]

    @property
    def assignment_index(self) -> np.ndarray:
        """Node position (0..N-1) of each key group's current node."""
        return self.node_index(self.assignment)

    def with_assignment(self, assignment: np.ndarray) -> BalancingProblem:
        return replace(self, assignment=np.asarray(assignment, dtype=np.int64))


@dataclass(frozen=True)
class MigrationBudget:
    """Bound on one round's reconfiguration: by total cost (constraint 2) and/or by count.

    The paper bounds the cost (maxMigrCost); in its experiments it bounds the count instead
    (maxMigrations), to compare with Flux. ``None`` means unbounded.
    """

    max_cost: float | None = None
    max_count: int | None = None

    def allows(self, cost: float, count: int) -> bool:
        tol = 1e-9 * max(1.0, self.max_cost or 0.0)
        return (self.max_cost is None or cost <= self.max_cost + tol) and (self.max_count is None or count <= self.max_count)

    def affordable(self, costs: np.ndarray, spent_cost: float, spent_count: int) -> np.ndarray:
        """Which of these single moves still fit after ``spent_cost`` / ``spent_count`` (vectorized)."""
        costs = np.asarray(costs, dtype=float)
        ok = np.full(costs.shape, self.max_count is None or spent_count + 1 <= self.max_count)
        if self.max_cost is not None:
            ok &= spent_cost + costs <= self.max_cost + 1e-9 * max(1.0, self.max_cost)
        return ok


@dataclass(frozen=True)
class Migration:
    """Key group ``key_group`` moves from node ``source`` to node ``target`` at cost ``cost``."""

    key_group: int
    source: int
    target: int
    cost: float


@dataclass(frozen=True)
class BalancePlan:
    """A new routing table (node id per key group) and the migrations that realize it."""

    assignment: np.ndarray
    migrations: tuple[Migration, ...]
    load_distance: float
    status: str = "ok"
    solve_seconds: float = 0.0
    notes: dict = field(default_factory=dict)

    @property
    def migration_cost(self) -> float:
        return float(sum(m.cost for m in self.migrations))


def migrations_between(problem: BalancingProblem, new_assignment: np.ndarray) -> tuple[Migration, ...]:
    """The list of moves from ``problem.assignment`` to ``new_assignment`` (node ids)."""
    new_assignment = np.asarray(new_assignment, dtype=np.int64)
    moved = np.flatnonzero(new_assignment != problem.assignment)
    cost = problem.migration_cost
    return tuple(Migration(int(k), int(problem.assignment[k]), int(new_assignment[k]), float(cost[k])) for k in moved)


def make_plan(problem: BalancingProblem, new_assignment: np.ndarray, **kwargs) -> BalancePlan:
    new_assignment = np.asarray(new_assignment, dtype=np.int64)
    return BalancePlan(
        assignment=new_assignment,
        migrations=migrations_between(problem, new_assignment),
        load_distance=load_distance(problem, new_assignment),
        **kwargs,
    )


# -- metrics ---------------------------------------------------------------------------------


def node_loads(problem: BalancingProblem, assignment: np.ndarray | None = None) -> np.ndarray:
    """Absolute load L_n of every node (sum of its key groups' loads), in node order."""
    a = problem.assignment if assignment is None else np.asarray(assignment)
    idx = problem.node_index(a)
    return np.bincount(idx, weights=problem.load, minlength=problem.num_nodes)


def mean_load(problem: BalancingProblem) -> float:
    """L-bar: the total load spread over the nodes that stay (N_s), per unit of capacity.

    Section 4.3.1 averages over N_s only; this is what makes Lemma 4.2 work (while N_r still
    holds load, some node of N_s is below L-bar, so epsilon > 0).
    """
    staying = ~problem.removing
    return float(problem.load.sum() / problem.capacity[staying].sum())


def load_distance(problem: BalancingProblem, assignment: np.ndarray | None = None) -> float:
    """The paper's load distance: the largest deviation of a node's utilization from L-bar.

    It is the smallest epsilon that satisfies the MILP's constraints (3) and (4) for this
    assignment: nodes of N_s count both above and below the mean, nodes of N_r only above
    (constraint (4) is disabled for them).
    """
    util = node_loads(problem, assignment) / problem.capacity
    mean = mean_load(problem)
    staying = ~problem.removing
    dev = np.abs(util[staying] - mean).max()
    if problem.removing.any():
        dev = max(dev, float((util[problem.removing] - mean).max()))
    return float(max(dev, 0.0))


def collocation_factor(problem: BalancingProblem, assignment: np.ndarray | None = None) -> float:
    """Share of inter-key-group traffic whose two ends are on one node (0..1); 0 without traffic."""
    t = problem.traffic
    total = float(t.rate.sum())
    if total <= 0:
        return 0.0
    a = problem.assignment if assignment is None else np.asarray(assignment)
    same = a[t.src] == a[t.dst]
    return float(t.rate[same].sum() / total)
