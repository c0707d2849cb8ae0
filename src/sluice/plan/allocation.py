"""Resource allocation: threads and slots per task for a target input rate (Shukla and Simmhan, Sec. 6).

The planner works on a small pure DAG description (:class:`Dag`): tasks that name a performance
model and a selectivity, and edges. ``sluice.plan.from_graph`` builds one from a JobGraph.

* :func:`task_rates` is GetRate (Sec. 6): a task without inputs receives Omega; any other task
  receives the sum of its predecessors' output rates (interleave semantics on inputs), and a
  task sends its full output, input rate x selectivity, on *every* out edge (duplicate semantics
  on outputs, Sec. 3). So a task fed by two copies of Omega gets 2 x Omega (the Star's hub).
* :func:`allocate_lsa` is Algorithm 2 (Linear Scaling Allocation).
* :func:`allocate_mba` is Algorithm 3 (Model Based Allocation).
* :func:`slots_needed` is rho = max(ceil(sum c_i), ceil(sum m_i)) (end of Sec. 6.2).

Sources and sinks are not modelled: as in Sec. 8.3 they get one thread each with a fixed
allocation, 10 % CPU and 15 % memory for a source, 10 % CPU and 20 % memory for a sink.

Where the paper contradicts itself on LSA's thread count (Sec. 8.4.1 says LSA gives the
Diamond's Table task "18 threads" for 50 t/s at 3 t/s per thread, while Algorithm 2 yields
ceil(50 / 3) = 17; its other example, 54 threads for 160 t/s, agrees with Algorithm 2), we
follow Algorithm 2 exactly; ``tests/plan/test_plan_allocation.py`` pins this choice.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from sluice.errors import PlanError
from sluice.models.performance import PerformanceModel, load_model

# "native": an operator Spark runs as an expression inside a neighbouring stage (a filter, a
# projection); it passes its rate on (with its selectivity) but needs no threads of its own.
TaskKind = Literal["source", "task", "sink", "native"]

# Sec. 8.3: "a single thread for each of these tasks is adequate, with a static allocation of
# 10% CPU and 15% memory for the source and 10% CPU and 20% memory for the sink."
FIXED_ALLOCATION: dict[str, tuple[int, float, float]] = {
    "source": (1, 0.10, 0.15),
    "sink": (1, 0.10, 0.20),
    "native": (0, 0.0, 0.0),
}

# Relative tolerance when counting how many whole peak rates fit in a rate: 100 t/s at 2 t/s per
# thread is exactly 50 threads, not 51 because of float noise.
_EPS = 1e-9


@dataclass(frozen=True)
class Task:
    """A vertex of the DAG: a task with a performance model (by name, path or object)."""

    id: str
    model: str | PerformanceModel | None = None
    selectivity: float = 1.0
    kind: TaskKind = "task"

    def __post_init__(self) -> None:
        if self.kind not in FIXED_ALLOCATION and self.kind != "task":
            raise PlanError(f"task {self.id!r}: kind must be source, task, sink or native, got {self.kind!r}")
        if not (self.selectivity >= 0 and math.isfinite(self.selectivity)):
            raise PlanError(f"task {self.id!r}: selectivity must be >= 0, got {self.selectivity}")
        if self.kind == "task" and self.model is None:
            raise PlanError(f"task {self.id!r} has no performance model")


@dataclass(frozen=True)
class Dag:
    """G = <T, E>: tasks in insertion order and (upstream, downstream) edges."""

    tasks: tuple[Task, ...]
    edges: tuple[tuple[str, str], ...] = ()
    name: str = "dag"

    def __post_init__(self) -> None:
        ids = [t.id for t in self.tasks]
        if len(set(ids)) != len(ids):
            raise PlanError(f"DAG {self.name!r} has duplicate task ids: {ids}")
        known = set(ids)
        for a, b in self.edges:
            if a not in known or b not in known:
                raise PlanError(f"DAG {self.name!r}: edge ({a!r}, {b!r}) names an unknown task")
        self.topological_order()  # raises on a cycle

    @property
    def by_id(self) -> dict[str, Task]:
        return {t.id: t for t in self.tasks}

    def predecessors(self, task_id: str) -> list[str]:
        return [a for a, b in self.edges if b == task_id]

    def successors(self, task_id: str) -> list[str]:
        return [b for a, b in self.edges if a == task_id]

    def topological_order(self) -> list[str]:
        """Tasks in BFS (Kahn) order from the sources: the order RSM and SAM sweep in."""
        indegree = {t.id: 0 for t in self.tasks}
        for _, b in self.edges:
            indegree[b] += 1
        queue = deque(t.id for t in self.tasks if indegree[t.id] == 0)
        order: list[str] = []
        while queue:
            node = queue.popleft()
            order.append(node)
            for succ in self.successors(node):
                indegree[succ] -= 1
                if indegree[succ] == 0:
                    queue.append(succ)
        if len(order) != len(self.tasks):
            raise PlanError(f"DAG {self.name!r} has a cycle")
        return order

    def models(self) -> dict[str, PerformanceModel]:
        """The resolved performance model of every modelled task (ModelError if one is missing)."""
        return {t.id: load_model(t.model) for t in self.tasks if t.model is not None}


def task_rates(dag: Dag, omega: float) -> dict[str, float]:
    """GetRate for every task: omega_j = Omega at a task without inputs, else sum(omega_i x sigma_i)."""
    if not (omega >= 0 and math.isfinite(omega)):
        raise PlanError(f"input rate must be >= 0, got {omega}")
    tasks = dag.by_id
    rates: dict[str, float] = {}
    for tid in dag.topological_order():
        preds = dag.predecessors(tid)
        rates[tid] = omega if not preds else sum(rates[p] * tasks[p].selectivity for p in preds)
    return rates


@dataclass(frozen=True)
class TaskAllocation:
    """<tau_i, c_i, m_i> for one task, plus what the mappers need to know about it."""

    task: str
    rate: float  # omega_i, the input rate the allocation must carry
    threads: int  # tau_i
    cpu: float  # c_i, fraction of a slot (may exceed 1: several slots)
    memory: float  # m_i
    bundle: int | None = None  # tau_hat_i: threads in a full bundle (None: never a full bundle)
    full_bundles: int = 0  # MBA: how many whole slots of tau_hat threads (Alg. 3 lines 9-15)


@dataclass(frozen=True)
class Allocation:
    method: str
    omega: float
    tasks: dict[str, TaskAllocation] = field(default_factory=dict)  # in topological order

    @property
    def total_cpu(self) -> float:
        return sum(t.cpu for t in self.tasks.values())

    @property
    def total_memory(self) -> float:
        return sum(t.memory for t in self.tasks.values())

    @property
    def total_threads(self) -> int:
        return sum(t.threads for t in self.tasks.values())

    @property
    def slots(self) -> int:
        """rho = max(ceil(sum c_i), ceil(sum m_i))."""
        return slots_needed(self.total_cpu, self.total_memory)


def slots_needed(total_cpu: float, total_memory: float) -> int:
    """rho = max(ceil(sum c), ceil(sum m)); a sum of 6.23 needs 7 slots, a sum of 6.0 exactly 6."""
    return max(_ceil(total_cpu), _ceil(total_memory), 0)


def _ceil(x: float) -> int:
    return math.ceil(x - _EPS * max(1.0, abs(x)))


def _whole_times(rate: float, unit: float) -> tuple[int, float]:
    """How many whole ``unit`` fit in ``rate`` and what remains: the while loops of Alg. 2 and 3.

    The loops subtract the unit until the rate drops below it; doing it in closed form with a
    small tolerance gives the same count without accumulating float error.
    """
    n = math.floor(rate / unit + _EPS)
    residual = rate - n * unit
    if residual <= _EPS * max(1.0, rate):
        residual = 0.0
    return n, max(residual, 0.0)


def _fixed(task: Task, rate: float) -> TaskAllocation:
    threads, cpu, memory = FIXED_ALLOCATION[task.kind]
    return TaskAllocation(task.id, rate, threads, cpu, memory, bundle=None)


def _allocate_each(
    name: str,
    dag: Dag,
    omega: float,
    models: Mapping[str, PerformanceModel] | None,
    allocate_task: Callable[[str, float, PerformanceModel], TaskAllocation],
) -> Allocation:
    """Rates through the DAG, then one allocation per task; sources and sinks get the
    paper's fixed allocation, user tasks ``allocate_task(task id, input rate, model)``."""
    models = dict(models) if models is not None else dag.models()
    rates = task_rates(dag, omega)
    out: dict[str, TaskAllocation] = {}
    for tid in dag.topological_order():
        task = dag.by_id[tid]
        out[tid] = _fixed(task, rates[tid]) if task.kind != "task" else allocate_task(tid, rates[tid], models[tid])
    return Allocation(name, omega, out)


def allocate_lsa(dag: Dag, omega: float, models: Mapping[str, PerformanceModel] | None = None) -> Allocation:
    """Algorithm 2: linear scaling of the single-thread rate, CPU and memory.

    Each whole omega_bar of input adds a thread with c_bar, m_bar; the trailing rate adds one
    more thread with c_bar, m_bar scaled by residual / omega_bar.
    """

    def lsa(tid: str, rate: float, model: PerformanceModel) -> TaskAllocation:
        w_bar, c_bar, m_bar = model.single_thread_rate, model.single_thread_cpu, model.single_thread_memory
        n, residual = _whole_times(rate, w_bar)
        threads, cpu, memory = n, n * c_bar, n * m_bar
        if residual > 0:
            threads += 1
            cpu += c_bar * residual / w_bar
            memory += m_bar * residual / w_bar
        return TaskAllocation(tid, rate, threads, cpu, memory, bundle=model.peak_threads)

    return _allocate_each("LSA", dag, omega, models, lsa)


def allocate_mba(dag: Dag, omega: float, models: Mapping[str, PerformanceModel] | None = None) -> Allocation:
    """Algorithm 3: whole slots of the best bundle, then the fewest threads for the rest.

    Each whole omega_hat of input gets a full bundle of tau_hat = T(omega_hat) threads and a
    whole slot (100 % CPU and memory, lines 9-15: the task cannot use more of that slot, and
    nothing else should contend with it). The trailing rate gets T(residual) threads with
    C(T(residual)), M(T(residual)); if one thread suffices, its resources are scaled down by
    residual / I(1) as in LSA (lines 16-26).
    """

    def mba(tid: str, rate: float, model: PerformanceModel) -> TaskAllocation:
        w_hat, t_hat = model.peak_rate, model.peak_threads
        n, residual = _whole_times(rate, w_hat)
        threads, cpu, memory = n * t_hat, float(n), float(n)
        if residual > 0:
            t_rest = model.threads_for(residual)
            threads += t_rest
            if t_rest > 1:
                cpu += model.cpu(t_rest)
                memory += model.memory(t_rest)
            else:
                cpu += model.single_thread_cpu * residual / model.single_thread_rate
                memory += model.single_thread_memory * residual / model.single_thread_rate
        return TaskAllocation(tid, rate, threads, cpu, memory, bundle=t_hat, full_bundles=n)

    return _allocate_each("MBA", dag, omega, models, mba)


ALLOCATORS = {"LSA": allocate_lsa, "MBA": allocate_mba}


def allocate(method: str, dag: Dag, omega: float, models: Mapping[str, PerformanceModel] | None = None) -> Allocation:
    try:
        return ALLOCATORS[method.upper()](dag, omega, models)
    except KeyError:
        raise PlanError(f"unknown allocation method {method!r}; choose from {sorted(ALLOCATORS)}") from None


# ---- The paper's micro-DAGs (Fig. 5) -------------------------------------------------------------
# Fig. 5 itself is lost from the text; these shapes are rebuilt from what the text says about
# them: each has a source, the five modelled tasks once each, and a sink, with selectivity 1
# (Sec. 8.3); the critical path counts 7 vertices for Linear, 4 for Diamond, 5 for Star
# (Sec. 8.6); the Blob task receives Omega in all three and the Table task in Linear and Diamond
# (Sec. 8.4.1); the Star's hub is Parse XML and receives 2 x Omega (480 t/s at 240, Sec. 8.5.2).

PAPER_TASK_MODELS = {"X": "parse_xml", "P": "pi", "T": "table", "B": "blob", "F": "batch_file_write"}


def paper_micro_dag(shape: str) -> Dag:
    """``"linear"``, ``"diamond"`` or ``"star"``: source S, tasks X, P, T, B, F, sink K."""
    tasks = [Task("S", kind="source")]
    tasks += [Task(t, PAPER_TASK_MODELS[t]) for t in ("X", "P", "T", "B", "F")]
    tasks += [Task("K", kind="sink")]
    if shape == "linear":  # S -> X -> P -> T -> B -> F -> K
        chain = ["S", "X", "P", "T", "B", "F", "K"]
        edges = list(itertools.pairwise(chain))
    elif shape == "diamond":  # S -> X, fan-out to P, T, B, F, fan-in at the sink
        edges = [("S", "X")] + [("X", t) for t in "PTBF"] + [(t, "K") for t in "PTBF"]
    elif shape == "star":  # S -> {B, T} -> hub X -> {P, F} -> K
        edges = [("S", "B"), ("S", "T"), ("B", "X"), ("T", "X"), ("X", "P"), ("X", "F"), ("P", "K"), ("F", "K")]
    else:
        raise PlanError(f"unknown micro-DAG {shape!r}; choose linear, diamond or star")
    return Dag(tuple(tasks), tuple(edges), name=shape)
