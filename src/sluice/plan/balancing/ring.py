"""Consistent-hash ring routing with movable tokens (Kumbhare's thesis, sections 6.4.1 and 6.5).

The ring is the second routing strategy beside a free routing table. Key groups lie on a
ring in key-group order (a key group is already a well-distributed hash of its keys: Spark's
``xxhash64`` modulo K). Every node (a partition of a keyed stage) holds one *token*, a
position on the ring, and owns the arc from its token up to the next node's token: a key
group goes to the closest token counter-clockwise of it. Tokens are key-group indices
(0..K-1) rather than reals in [0, 1): the key group is the unit of state, so nothing finer
can move. Tokens at ``ceil(p * K / N)`` give exactly Flink's range routing
(``plan.physical.range_routing``), so a ring starts from the routing every stage starts with.

The ring's property is minimal movement (the monotonicity of consistent hashing):

- moving one token moves key groups between the two ring neighbours on that boundary only;
- adding a node (:func:`add_node`) moves key groups from the one node whose arc it splits;
- removing one (:func:`remove_node`) moves only its own key groups, all to one neighbour.

Rescaling a routing table by ranges (what the ``partitions`` action does) moves about half
of all key groups instead. The price is balance: a node's key groups stay one contiguous
arc, so the ring cannot pair a hot key group with cold ones from across the ring as the
MILP can. :func:`ring_balance` is the thesis's load balancing (section 6.5): an overloaded
node negotiates with its ring neighbours, which take over part of its arc by moving a token;
when a neighbour is busy itself it offloads to its other neighbour first (the cascade).
The thesis moves the neighbour half the distance; here the token moves to the key group
that evens the two nodes' loads best (the loads per key group are measured), within the
same migration budget the MILP gets.

Pure: no Spark.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sluice.errors import PlanError
from sluice.plan.balancing.model import BalancePlan, BalancingProblem, MigrationBudget, make_plan, node_loads


@dataclass(frozen=True)
class TokenRing:
    """``tokens[i]``: the token (a key-group index) of node ``nodes[i]``; tokens are distinct,
    so every node owns at least one key group."""

    tokens: np.ndarray
    nodes: np.ndarray
    num_key_groups: int

    def __post_init__(self) -> None:
        tokens = np.asarray(self.tokens, dtype=np.int64)
        nodes = np.asarray(self.nodes, dtype=np.int64)
        object.__setattr__(self, "tokens", tokens)
        object.__setattr__(self, "nodes", nodes)
        if tokens.shape != nodes.shape or len(nodes) == 0:
            raise PlanError(f"token ring: {len(tokens)} tokens for {len(nodes)} nodes")
        if len(np.unique(tokens)) != len(tokens) or len(np.unique(nodes)) != len(nodes):
            raise PlanError(f"token ring: tokens {tokens.tolist()} and nodes {nodes.tolist()} must be distinct")
        if tokens.min() < 0 or tokens.max() >= self.num_key_groups:
            raise PlanError(f"token ring: tokens must lie in 0..{self.num_key_groups - 1}, got {tokens.tolist()}")

    @staticmethod
    def evenly(num_key_groups: int, nodes) -> TokenRing:
        """Tokens spread evenly in node order: the range routing every keyed stage starts with."""
        nodes = np.asarray(nodes, dtype=np.int64)
        if len(nodes) > num_key_groups:
            raise PlanError(f"token ring: {len(nodes)} nodes cannot each own one of {num_key_groups} key groups")
        return TokenRing(-(-np.arange(len(nodes)) * num_key_groups // len(nodes)), nodes, num_key_groups)

    @staticmethod
    def from_assignment(assignment, nodes) -> TokenRing | None:
        """The ring a routing table is, or None when it is not one: some node owns key groups
        in two separate arcs, or none at all."""
        a = np.asarray(assignment, dtype=np.int64)
        nodes = np.asarray(nodes, dtype=np.int64)
        k = len(a)
        if k == 0 or len(nodes) == 0 or not np.isin(a, nodes).all() or len(np.unique(a)) != len(nodes):
            return None
        if len(nodes) == 1:
            return TokenRing(np.zeros(1, np.int64), nodes, k)
        starts = np.flatnonzero(a != np.roll(a, 1))  # where an arc begins (its owner differs from the one before)
        if len(starts) != len(nodes):
            return None  # some node's key groups form more than one arc
        token_of = dict(zip(a[starts].tolist(), starts.tolist()))
        return TokenRing(np.array([token_of[int(n)] for n in nodes], np.int64), nodes, k)

    def ring_order(self) -> np.ndarray:
        """Positions (into ``nodes``) in the order their tokens lie on the ring."""
        return np.argsort(self.tokens, kind="stable")

    def assignment(self) -> np.ndarray:
        """The routing table: the node of each key group."""
        order = self.ring_order()
        sorted_tokens = self.tokens[order]
        kg = np.arange(self.num_key_groups)
        # the largest token <= kg; key groups before the smallest token wrap to the largest
        idx = np.searchsorted(sorted_tokens, kg, side="right") - 1
        return self.nodes[order[idx % len(order)]]

    def arc(self, position: int) -> np.ndarray:
        """The key groups node ``nodes[position]`` owns, in ring order from its token."""
        order = self.ring_order()
        at = int(np.flatnonzero(order == position)[0])
        start = int(self.tokens[position])
        end = int(self.tokens[order[(at + 1) % len(order)]])
        length = (end - start) % self.num_key_groups or self.num_key_groups
        return (start + np.arange(length)) % self.num_key_groups

    def with_token(self, position: int, token: int) -> TokenRing:
        tokens = self.tokens.copy()
        tokens[position] = token % self.num_key_groups
        return TokenRing(tokens, self.nodes, self.num_key_groups)


def add_node(ring: TokenRing, node: int, load) -> TokenRing:
    """Scale out (thesis, figure 6.7): the new node takes its token in the arc of the most
    loaded node, where it splits that arc's load most evenly; no other node loses a key group."""
    if node in set(ring.nodes.tolist()):
        raise PlanError(f"token ring: node {node} is on the ring already")
    load = np.asarray(load, dtype=float)
    owners = ring.assignment()
    loads = np.array([load[owners == n].sum() for n in ring.nodes])
    candidates = [p for p in np.argsort(-loads, kind="stable") if len(ring.arc(p)) >= 2]
    if not candidates:
        raise PlanError(f"token ring: no arc of {ring.num_key_groups} key groups can be split for a new node")
    position = candidates[0]
    arc = ring.arc(position)
    before = np.cumsum(load[arc])[:-1]  # load kept by the old node if the new token is at arc[j + 1]
    split = int(np.argmin(np.abs(2 * before - load[arc].sum()))) + 1
    return TokenRing(np.append(ring.tokens, arc[split]), np.append(ring.nodes, node), ring.num_key_groups)


def remove_node(ring: TokenRing, node: int) -> TokenRing:
    """Scale in (thesis, figure 6.8): the removed node's clockwise neighbour moves its token
    onto the removed one's, so it takes the whole arc; no other node changes."""
    positions = np.flatnonzero(ring.nodes == node)
    if len(positions) == 0:
        raise PlanError(f"token ring: node {node} is not on the ring")
    if len(ring.nodes) == 1:
        raise PlanError("token ring: cannot remove the last node")
    position = int(positions[0])
    order = ring.ring_order()
    at = int(np.flatnonzero(order == position)[0])
    successor = order[(at + 1) % len(order)]
    tokens = ring.tokens.copy()
    tokens[successor] = tokens[position]
    keep = np.arange(len(ring.nodes)) != position
    return TokenRing(tokens[keep], ring.nodes[keep], ring.num_key_groups)


def ring_balance(problem: BalancingProblem, budget: MigrationBudget, max_rounds: int | None = None) -> BalancePlan:
    """Balance by moving tokens (thesis, section 6.5) under ``budget``.

    Each round the most loaded node that can hand load to a ring neighbour does so: of its
    two boundaries, and of every token position along them, the move that lowers the load
    variance most (``sum_n L_n^2 / w_n``) and that the budget affords (counted against the
    routing before the round: a key group moved away and back costs nothing). A busy
    neighbour is relieved first by its own other neighbour in a later round (the thesis's
    cascade), and a node far below the mean is filled by its neighbours. Stops when no node can offload; every round
    lowers the variance, so it ends. Tokens never pass each other, so the ring's order is
    fixed for the whole round.

    A routing table that is not a ring (:meth:`TokenRing.from_assignment`) is left as it is
    (status ``"not a ring"``): the ring and a free routing table are alternative strategies."""
    ring = TokenRing.from_assignment(problem.assignment, problem.nodes)
    if ring is None:
        return make_plan(problem, problem.assignment, status="not a ring")
    if np.asarray(problem.removing).any():
        raise PlanError("ring balancing keeps every node; remove nodes with remove_node (scale in)")
    state = _RingState(ring, problem, budget)
    rounds = max_rounds if max_rounds is not None else 4 * problem.num_key_groups
    for _ in range(rounds):
        move = None
        for giver in np.argsort(-(state.loads / state.w), kind="stable"):
            move = state.best_offload(int(giver))
            if move is not None:
                break
        if move is None:
            break
        state.apply(*move)
    return make_plan(problem, state.assignment(), status="ring")


class _RingState:
    """A ring being balanced: tokens, owners and node loads, and what the budget has spent."""

    def __init__(self, ring: TokenRing, problem: BalancingProblem, budget: MigrationBudget):
        self.tokens = ring.tokens.copy()
        self.nodes = ring.nodes
        self.k = ring.num_key_groups
        self.order = ring.ring_order()
        self.at = np.empty(len(self.order), np.int64)
        self.at[self.order] = np.arange(len(self.order))
        self.load, self.cost = problem.load, problem.migration_cost
        self.w: np.ndarray = np.asarray(problem.capacity, dtype=float)
        self.original = problem.assignment
        self.owner = problem.assignment.copy()
        self.loads = node_loads(problem)
        self.budget = budget
        self.spent_count, self.spent_cost = 0, 0.0
        self.tolerance = 1e-12 * max(1.0, float((self.loads**2).sum()))

    def assignment(self) -> np.ndarray:
        return TokenRing(self.tokens, self.nodes, self.k).assignment()

    def neighbours(self, position: int) -> tuple[int, int]:
        n = len(self.order)
        i = self.at[position]
        return int(self.order[(i - 1) % n]), int(self.order[(i + 1) % n])

    def arc(self, position: int) -> np.ndarray:
        _, successor = self.neighbours(position)
        length = (int(self.tokens[successor]) - int(self.tokens[position])) % self.k or self.k
        return (int(self.tokens[position]) + np.arange(length)) % self.k

    def best_offload(self, giver: int):
        """The best token move by which node ``giver`` (a position) hands key groups to a
        ring neighbour: (the position whose token moves, its new token, key groups moved,
        giver, taker), or None when no move lowers the variance within the budget."""
        if len(self.order) < 2:
            return None
        arc = self.arc(giver)
        if len(arc) < 2:
            return None  # a node keeps at least its token's key group
        predecessor, successor = self.neighbours(giver)
        best = None
        # to the successor: it moves its token back over the giver's last j key groups;
        # to the predecessor: the giver moves its own token forward over its first j
        for taker, mover, ordered in ((successor, successor, arc[::-1]), (predecessor, giver, arc)):
            moved_load = np.cumsum(self.load[ordered])[:-1]  # j = 1 .. len(arc) - 1 key groups
            delta = ((self.loads[giver] - moved_load) ** 2 - self.loads[giver] ** 2) / self.w[giver] + (
                (self.loads[taker] + moved_load) ** 2 - self.loads[taker] ** 2
            ) / self.w[taker]
            for j in np.argsort(delta, kind="stable"):
                if delta[j] >= -self.tolerance or (best is not None and delta[j] >= best[0]):
                    break
                moved = ordered[: j + 1]
                count, spent = self.spending(moved, taker)
                if self.budget.allows(spent, count):
                    token = int(moved[-1]) if mover == successor else int((moved[-1] + 1) % self.k)
                    best = (float(delta[j]), mover, token, np.sort(moved), giver, taker)
                    break
        return None if best is None else best[1:]

    def spending(self, moved: np.ndarray, taker: int) -> tuple[int, float]:
        """The budget spent (count, cost) once ``moved`` belong to ``taker``."""
        was = self.owner[moved] != self.original[moved]
        now = self.nodes[taker] != self.original[moved]
        return (
            self.spent_count + int(now.sum()) - int(was.sum()),
            self.spent_cost + float(self.cost[moved][now].sum()) - float(self.cost[moved][was].sum()),
        )

    def apply(self, mover: int, token: int, moved: np.ndarray, giver: int, taker: int) -> None:
        self.spent_count, self.spent_cost = self.spending(moved, taker)
        self.tokens[mover] = token
        self.owner[moved] = self.nodes[taker]
        self.loads[giver] -= self.load[moved].sum()
        self.loads[taker] += self.load[moved].sum()
