"""Dynamic dataflows: alternates, VM classes, and the value/cost/throughput metrics.

This is the model of Kumbhare's thesis, chapter 4 (sections 4.2 to 4.6 and 4.8.2):

* a *dynamic dataflow* is a DAG of operators ("PEs"); each operator has one or more
  *alternates* ``p = <gamma, c, s>``: relative value, processing cost per message on a
  reference core (seconds), selectivity (Def. 3, Eq. 4.1);
* *VM classes* have cores, a normalised core speed ``pi`` (relative to the reference core),
  a bandwidth and a price per hour (section 4.3);
* metrics: hourly billing (Eq. 4.2), application value Gamma (Eq. 4.3), relative throughput
  Omega (Eq. 4.4 to 4.7), profit Theta (Eq. 4.8, 4.9) and the scale-in VM weight (Eq. 4.10).

Everything here is pure numpy and works on arrays with any leading batch axes (time steps,
candidate deployments), so the schedulers and the simulator evaluate many cases in one call.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from sluice.errors import ModelError

# ----------------------------------------------------------------------------- dataflow


@dataclass(frozen=True)
class Alternate:
    """One implementation of an operator (Def. 3): value gamma in (0, 1], cost c in seconds
    per message on a reference core, selectivity s (output messages per input message)."""

    name: str
    value: float
    cost: float
    selectivity: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 < self.value <= 1.0:
            raise ModelError(f"alternate {self.name!r}: value gamma={self.value} not in (0, 1] (Eq. 4.1)")
        if self.cost <= 0.0:
            raise ModelError(f"alternate {self.name!r}: cost per message must be > 0, got {self.cost}")
        if self.selectivity < 0.0:
            raise ModelError(f"alternate {self.name!r}: selectivity must be >= 0, got {self.selectivity}")


@dataclass(frozen=True)
class Operator:
    """A processing element with its alternates; any one of them is active at a time."""

    name: str
    alternates: tuple[Alternate, ...]

    def __post_init__(self) -> None:
        if not self.alternates:
            raise ModelError(f"operator {self.name!r} has no alternate")


@dataclass(frozen=True)
class DynamicDataflow:
    """Def. 3: operators, edges (by operator index), input operators (no in-edge) and output
    operators (no out-edge). ``message_bytes`` is the mean message size m of Eq. 4.5."""

    operators: tuple[Operator, ...]
    edges: tuple[tuple[int, int], ...]
    message_bytes: float = 1024.0
    name: str = "dataflow"

    def __post_init__(self) -> None:
        n = len(self.operators)
        if n == 0:
            raise ModelError("a dataflow needs at least one operator")
        for a, b in self.edges:
            if not (0 <= a < n and 0 <= b < n) or a == b:
                raise ModelError(f"dataflow {self.name!r}: bad edge ({a}, {b}) for {n} operators")
        _ = self.topological_order  # raises on a cycle

    # -- structure ------------------------------------------------------------------
    @property
    def n_ops(self) -> int:
        return len(self.operators)

    @cached_property
    def predecessors(self) -> tuple[tuple[int, ...], ...]:
        pred: list[list[int]] = [[] for _ in self.operators]
        for a, b in self.edges:
            pred[b].append(a)
        return tuple(tuple(p) for p in pred)

    @cached_property
    def successors(self) -> tuple[tuple[int, ...], ...]:
        succ: list[list[int]] = [[] for _ in self.operators]
        for a, b in self.edges:
            succ[a].append(b)
        return tuple(tuple(s) for s in succ)

    @cached_property
    def inputs(self) -> tuple[int, ...]:
        return tuple(i for i in range(self.n_ops) if not self.predecessors[i])

    @cached_property
    def outputs(self) -> tuple[int, ...]:
        return tuple(i for i in range(self.n_ops) if not self.successors[i])

    @cached_property
    def topological_order(self) -> tuple[int, ...]:
        """Breadth-first from the inputs (Kahn), the scan order the text asks for Omega."""
        indeg = [len(p) for p in self.predecessors]
        queue = deque(i for i in range(self.n_ops) if indeg[i] == 0)
        order: list[int] = []
        while queue:
            i = queue.popleft()
            order.append(i)
            for j in self.successors[i]:
                indeg[j] -= 1
                if indeg[j] == 0:
                    queue.append(j)
        if len(order) != self.n_ops:
            raise ModelError(f"dataflow {self.name!r} has a cycle")
        return tuple(order)

    @cached_property
    def dfs_order(self) -> tuple[int, ...]:
        """Forward depth-first order rooted at the inputs (GetNextPE of Table 4.1)."""
        seen: list[int] = []
        stack = list(reversed(self.inputs))
        while stack:
            i = stack.pop()
            if i in seen:
                continue
            seen.append(i)
            stack.extend(reversed(self.successors[i]))
        return tuple(seen)

    def index(self, name: str) -> int:
        for i, op in enumerate(self.operators):
            if op.name == name:
                return i
        raise ModelError(f"dataflow {self.name!r} has no operator {name!r}")

    # -- per-alternate arrays ---------------------------------------------------------
    @cached_property
    def n_alternates(self) -> np.ndarray:
        return np.array([len(op.alternates) for op in self.operators])

    def _table(self, attr: str) -> np.ndarray:
        width = int(self.n_alternates.max())
        out = np.full((self.n_ops, width), np.nan)
        for i, op in enumerate(self.operators):
            out[i, : len(op.alternates)] = [getattr(a, attr) for a in op.alternates]
        return out

    @cached_property
    def value_table(self) -> np.ndarray:
        """gamma[op, alternate], NaN where an operator has fewer alternates."""
        return self._table("value")

    @cached_property
    def cost_table(self) -> np.ndarray:
        return self._table("cost")

    @cached_property
    def selectivity_table(self) -> np.ndarray:
        return self._table("selectivity")

    def pick(self, table: np.ndarray, active: np.ndarray) -> np.ndarray:
        """Per-operator entry of ``table`` for the active alternates (any leading axes)."""
        active = np.asarray(active, dtype=int)
        return np.take_along_axis(np.broadcast_to(table, active.shape + table.shape[-1:]), active[..., None], axis=-1)[..., 0]

    def best_alternates(self) -> np.ndarray:
        return np.nanargmax(self.value_table, axis=1)

    def worst_alternates(self) -> np.ndarray:
        return np.nanargmin(self.value_table, axis=1)

    def single_implementation(self) -> DynamicDataflow:
        """The same dataflow keeping only each operator's highest-value alternate (the
        'no alternates' baseline of section 4.9.2, 4)."""
        best = self.best_alternates()
        ops = tuple(Operator(op.name, (op.alternates[int(best[i])],)) for i, op in enumerate(self.operators))
        return DynamicDataflow(ops, self.edges, self.message_bytes, self.name + "-single")


# ----------------------------------------------------------------------------- VM classes


@dataclass(frozen=True)
class VMClass:
    """A resource class C_i (section 4.3): cores N, normalised core speed pi, bandwidth beta
    (bytes/s) and price per VM-hour; ``startup_s`` is the start-up latency; ``warmup_s``, the
    last part of it, is how long a VM that has joined holds work it cannot run yet, which the
    job waits for (a Spark executor is given tasks when it registers, and they wait for its
    Python workers to start): no progress anywhere meanwhile."""

    name: str
    cores: int
    core_speed: float
    bandwidth: float
    price_per_hour: float
    startup_s: float = 120.0
    warmup_s: float = 0.0

    def __post_init__(self) -> None:
        if self.cores < 1 or self.core_speed <= 0 or self.price_per_hour < 0 or self.bandwidth <= 0:
            raise ModelError(f"VM class {self.name!r}: cores, core speed and bandwidth must be > 0, price >= 0")
        if not 0 <= self.warmup_s <= self.startup_s:
            raise ModelError(
                f"VM class {self.name!r}: 0 <= warmup_s ({self.warmup_s}) <= startup_s ({self.startup_s}) is required"
            )

    @property
    def capacity(self) -> float:
        """Reference cores the whole VM is worth at rated speed."""
        return self.cores * self.core_speed


def ec2_m1_classes(startup_s: float = 120.0) -> tuple[VMClass, ...]:
    """EC2 m1 generation (the thesis prices its runs with m1.*): ECU per core as pi, and the
    2014 on-demand prices. Bandwidth ratings are the usual 'low/moderate/high' figures."""
    mb = 1e6 / 8  # bytes per second in one Mbit/s
    return (
        VMClass("m1.small", 1, 1.0, 250 * mb, 0.044, startup_s),
        VMClass("m1.medium", 1, 2.0, 500 * mb, 0.087, startup_s),
        VMClass("m1.large", 2, 2.0, 500 * mb, 0.175, startup_s),
        VMClass("m1.xlarge", 4, 2.0, 1000 * mb, 0.350, startup_s),
    )


# ----------------------------------------------------------------------------- Eq. 4.2


def billed_hours(start_s, stop_s, now_s) -> np.ndarray:
    """Whole VM-hours charged by ``now_s`` (Eq. 4.2): ceil((min(t_stop, t) - t_start) / 60 min).

    A VM is billed for the entire hour it started even if released before its end: 61 minutes
    cost 2 hours. Times in seconds; ``stop_s`` is ``inf`` for a VM still running.
    """
    start = np.asarray(start_s, dtype=float)
    active = np.clip(np.minimum(np.asarray(stop_s, dtype=float), now_s) - start, 0.0, None)
    # a tiny tolerance so that exactly 60.0 minutes computed in floating point is one hour
    return np.ceil(active / 3600.0 - 1e-9)


def vm_cost(start_s, stop_s, now_s, price_per_hour) -> np.ndarray:
    """mu_i(t) of Eq. 4.2 in currency units (vectorised over VMs)."""
    return billed_hours(start_s, stop_s, now_s) * np.asarray(price_per_hour, dtype=float)


# ----------------------------------------------------------------------------- Eq. 4.3


def application_value(dataflow: DynamicDataflow, active) -> np.ndarray:
    """Gamma(t) of Eq. 4.3: the mean relative value of the active alternates."""
    return dataflow.pick(dataflow.value_table, active).mean(axis=-1)


def value_bounds(dataflow: DynamicDataflow) -> tuple[float, float]:
    """(Gamma_min, Gamma_max): picking every operator's worst / best alternate."""
    return (
        float(application_value(dataflow, dataflow.worst_alternates())),
        float(application_value(dataflow, dataflow.best_alternates())),
    )


# ----------------------------------------------------------------------------- Eq. 4.4-4.7


@dataclass(frozen=True)
class Throughput:
    """Result of one breadth-first scan (Eq. 4.4 to 4.7); arrays carry the batch axes.

    ``input_rate``, ``output_rate``: i_k(t) and o_k(t) per operator (msg/s);
    ``ideal_output_rate``: what each operator would emit with unlimited cores and bandwidth;
    ``processed``: messages consumed in the interval; ``operator_omega``: o_i / o_i^max of
    Eq. 4.4 against the operator's *actual* input (the bottleneck measure of GetNextPE);
    ``omega``: Omega(t) of Eq. 4.7.
    """

    input_rate: np.ndarray
    output_rate: np.ndarray
    ideal_output_rate: np.ndarray
    processed: np.ndarray
    operator_omega: np.ndarray
    omega: np.ndarray


def throughput(
    dataflow: DynamicDataflow,
    active,
    capacity,
    external_rate,
    dt: float,
    queue=None,
    edge_local_fraction=None,
    edge_remote_bandwidth=None,
) -> Throughput:
    """Relative application throughput Omega (Eq. 4.4 to 4.7), vectorised over leading axes.

    ``active``: active alternate per operator; ``capacity``: phi_i, the reference cores the
    operator has (sum of its instances' core speeds pi_k); ``external_rate``: msg/s arriving
    at each operator from outside (non-zero only at input operators); ``queue``: q_i(t),
    pending input messages at the start of the interval; ``edge_local_fraction`` and
    ``edge_remote_bandwidth`` (bytes/s) describe each edge in ``dataflow.edges`` order: the
    share of the producer's output made on VMs that also host the consumer travels in memory
    (beta_{i x i} -> inf, section 4.3), the rest is capped by the cumulative bandwidth.

    Eq. 4.4: o_i = min(q_i + i_i dt, phi_i dt / c_i) * s_i / dt.
    Eq. 4.5 as printed, f_ij = min(o_i, beta_ij dt / m), compares a *rate* (o_i, msg/s) with a
    *count* (beta dt / m, messages per interval), a slip of units. Both sides
    are rates here: f_ij = min(o_i, beta_ij / m).
    Eq. 4.6: i_k = sum_j f_jk (multi-merge). Eq. 4.7: Omega = mean over outputs of o/o^max,
    where o^max is the output for the *current input rates* with no resource limit, i.e. the
    ideal rates propagated through the same DAG ("the maximum achievable output rate for
    those output PEs, for the current input data rate", Def. 5). Using each output operator's
    own o_i^max (its actual input) instead would hide every upstream bottleneck.
    """
    n = dataflow.n_ops
    active = np.asarray(active, dtype=int)
    cap = np.asarray(capacity, dtype=float)
    ext = np.asarray(external_rate, dtype=float)
    batch = np.broadcast_shapes(active.shape[:-1], cap.shape[:-1], ext.shape[:-1], () if queue is None else np.shape(queue)[:-1])
    shape = (*batch, n)
    cost = np.broadcast_to(dataflow.pick(dataflow.cost_table, active), shape)
    sel = np.broadcast_to(dataflow.pick(dataflow.selectivity_table, active), shape)
    cap = np.broadcast_to(cap, shape)
    ext = np.broadcast_to(ext, shape)
    q = np.zeros(shape) if queue is None else np.broadcast_to(np.asarray(queue, dtype=float), shape)
    n_edges = len(dataflow.edges)
    local = (
        np.ones((*batch, n_edges))
        if edge_local_fraction is None
        else np.broadcast_to(np.asarray(edge_local_fraction, dtype=float), (*batch, n_edges))
    )
    remote = (
        np.full((*batch, n_edges), np.inf)
        if edge_remote_bandwidth is None
        else np.broadcast_to(np.asarray(edge_remote_bandwidth, dtype=float), (*batch, n_edges))
    )
    remote_msgs = remote / dataflow.message_bytes  # the unit fix of Eq. 4.5: a rate

    in_rate = np.array(ext, dtype=float)
    ideal_in = np.array(ext, dtype=float)
    out_rate = np.zeros(shape)
    ideal_out = np.zeros(shape)
    processed = np.zeros(shape)
    edges_from: list[list[int]] = [[] for _ in range(n)]
    for e, (a, _b) in enumerate(dataflow.edges):
        edges_from[a].append(e)
    for i in dataflow.topological_order:
        offered = q[..., i] + in_rate[..., i] * dt  # q_i + i_i dt
        done = np.minimum(offered, cap[..., i] * dt / cost[..., i])  # Eq. 4.4, messages
        processed[..., i] = done
        out_rate[..., i] = done * sel[..., i] / dt
        ideal_out[..., i] = (q[..., i] + ideal_in[..., i] * dt) * sel[..., i] / dt
        for e in edges_from[i]:
            b = dataflow.edges[e][1]
            o = out_rate[..., i]
            flow = local[..., e] * o + np.minimum((1.0 - local[..., e]) * o, remote_msgs[..., e])  # Eq. 4.5
            in_rate[..., b] += flow  # Eq. 4.6
            ideal_in[..., b] += ideal_out[..., i]
    offered_out = (q + in_rate * dt) * sel / dt
    op_omega = _ratio(out_rate, offered_out)
    outs = list(dataflow.outputs)
    omega = _ratio(out_rate[..., outs], ideal_out[..., outs]).mean(axis=-1)  # Eq. 4.7
    return Throughput(in_rate, out_rate, ideal_out, processed, op_omega, omega)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num/den with 0/0 = 1 (an operator with nothing to do is not a bottleneck)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.where(den > 0, num / np.where(den > 0, den, 1.0), 1.0)
    return np.clip(r, 0.0, 1.0)


def required_capacity(dataflow: DynamicDataflow, active, input_rate) -> np.ndarray:
    """Reference cores each operator needs to consume its input rate fully: i_i * c_i."""
    return np.asarray(input_rate, dtype=float) * dataflow.pick(dataflow.cost_table, active)


# ----------------------------------------------------------------------------- Eq. 4.8, 4.9


@dataclass(frozen=True)
class ProfitModel:
    """The value/cost trade-off of Fig. 4.3 and Eq. 4.8, 4.9.

    The user names the break-even cost at the best and at the worst application value
    (C_max^Gamma_max, C_max^Gamma_min); sigma (Eq. 4.9) is the slope of that line. Eq. 4.8 is
    printed as Theta = Gamma - sigma (mu - C_max^Gamma_max) + 1, which puts the break-even
    line at Theta = 1 + Gamma - Gamma_max, not at 0 as Fig. 4.3 ("below this break-even we
    consider it as profit ... above ... loss") and section 5.2 (Theta = Gamma - sigma mu) say.
    We write Theta = Gamma - sigma (mu - C_max^Gamma_max) - offset with the offset a
    parameter: by default Gamma_max, so a deployment on the break-even line has Theta = 0;
    ``offset = -1`` gives the formula exactly as printed.
    """

    gamma_min: float
    gamma_max: float
    cost_at_gamma_min: float
    cost_at_gamma_max: float
    offset: float | None = None

    def __post_init__(self) -> None:
        if self.cost_at_gamma_max == self.cost_at_gamma_min:
            raise ModelError("ProfitModel: the break-even costs at Gamma_max and Gamma_min must differ (Eq. 4.9)")

    @property
    def sigma(self) -> float:
        """Eq. 4.9: value per unit cost along the break-even line."""
        if self.gamma_max == self.gamma_min:
            # one alternate per operator: no value range; price cost against Gamma_max instead
            return self.gamma_max / self.cost_at_gamma_max
        return (self.gamma_max - self.gamma_min) / (self.cost_at_gamma_max - self.cost_at_gamma_min)

    @property
    def break_even_offset(self) -> float:
        return self.gamma_max if self.offset is None else self.offset

    def profit(self, value, cost) -> np.ndarray:
        """Theta (Eq. 4.8) for the mean application value and the total cost."""
        return np.asarray(value) - self.sigma * (np.asarray(cost) - self.cost_at_gamma_max) - self.break_even_offset

    def break_even_cost(self, value) -> np.ndarray:
        """The cost at which a run of mean value ``value`` makes neither profit nor loss."""
        return self.cost_at_gamma_max + (np.asarray(value) - self.gamma_max) / self.sigma

    @classmethod
    def for_dataflow(
        cls, dataflow: DynamicDataflow, cost_at_gamma_min: float, cost_at_gamma_max: float, offset: float | None = None
    ) -> ProfitModel:
        lo, hi = value_bounds(dataflow)
        return cls(lo, hi, cost_at_gamma_min, cost_at_gamma_max, offset)

    @classmethod
    def thesis_lrb(cls, dataflow: DynamicDataflow, hours: float, mean_rate: float) -> ProfitModel:
        """Section 4.9.2: C_max^Gamma_min = 0.5 T rate / 10 and C_max^Gamma_max = 1.0 T rate / 10."""
        return cls.for_dataflow(dataflow, 0.5 * hours * mean_rate / 10.0, 1.0 * hours * mean_rate / 10.0)


# ----------------------------------------------------------------------------- Eq. 4.10


def vm_weight(
    seconds_left_in_hour, free_cores, total_cores, instances_of_op_on_vm, instances_of_op, core_speed, price_per_hour
) -> np.ndarray:
    """VM weight of Eq. 4.10; the scale-in removes an instance from the lightest VM.

    Printed: T_c * FreeCores/TotalCores * (1 - phi_r/phi) * TotalCores * pi / price. The prose
    says the opposite of the FreeCores factor: "VMs with fewer cores used are prioritized for
    removal", i.e. must weigh *less*, while FreeCores/TotalCores makes them weigh more. We
    follow the prose (the stated intent) and use UsedCores/TotalCores. The other factors are
    as printed: less time left in the paid hour, more of the operator's instances and a
    higher price per normalised core all lower the weight.
    """
    total = np.asarray(total_cores, dtype=float)
    used = total - np.asarray(free_cores, dtype=float)
    share = np.asarray(instances_of_op_on_vm, dtype=float) / np.maximum(np.asarray(instances_of_op, dtype=float), 1.0)
    return (
        np.asarray(seconds_left_in_hour, dtype=float)
        * (used / total)
        * (1.0 - share)
        * total
        * np.asarray(core_speed, dtype=float)
        / np.asarray(price_per_hour, dtype=float)
    )


# ----------------------------------------------------------------------------- mappings


def operator_capacity(counts, vm_core_speed) -> np.ndarray:
    """phi_i = sum over the operator's instances of their cores' speed pi_k (Eq. 4.4).

    ``counts[..., v, i]``: instances of operator i on VM v (one core each, assumption 2 of
    section 4.4); ``vm_core_speed[..., v]``: the VM's current normalised core speed.
    """
    counts = np.asarray(counts, dtype=float)
    return np.einsum("...vi,...v->...i", counts, np.asarray(vm_core_speed, dtype=float))


def edge_network(dataflow: DynamicDataflow, counts, vm_core_speed, vm_bandwidth) -> tuple[np.ndarray, np.ndarray]:
    """Per edge (a, b): the share of a's output produced on VMs that also host b (sent in
    memory) and the cumulative bandwidth (bytes/s) of a's other VMs, for Eq. 4.5.

    Simplification (documented): each producer VM's NIC is the limit, and a NIC is not
    shared between the edges leaving it.
    """
    counts = np.asarray(counts, dtype=float)
    speed = np.asarray(vm_core_speed, dtype=float)
    bw = np.asarray(vm_bandwidth, dtype=float)
    if not dataflow.edges:
        empty = np.zeros((*counts.shape[:-2], 0))
        return empty, empty
    src = np.array([a for a, _ in dataflow.edges])
    dst = np.array([b for _, b in dataflow.edges])
    cap_a = counts[..., src] * speed[..., None]  # (..., V, E)
    hosts_a = counts[..., src] > 0
    hosts_b = counts[..., dst] > 0
    total = cap_a.sum(axis=-2)
    shared = (cap_a * hosts_b).sum(axis=-2)
    local = np.where(total > 0, shared / np.where(total > 0, total, 1.0), 1.0)
    remote = ((hosts_a & ~hosts_b) * bw[..., None]).sum(axis=-2)
    return local, remote
