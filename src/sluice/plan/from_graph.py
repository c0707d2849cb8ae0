"""From a pipeline's JobGraph to the planner's DAG (:class:`sluice.plan.allocation.Dag`).

Every operator becomes a task with its id, selectivity and performance model:

* sources and sinks get the paper's fixed source / sink allocation (Sec. 8.3);
* operators Spark runs natively (filters, projections, key_by, union) need no threads of their
  own: they become "native" tasks that pass their rate on;
* built-in keyed aggregates, windows and joins get a default model measured on Sluice's
  own benchmarks (``builtin_aggregate``, ``builtin_window``, ``builtin_join`` in the model
  library) unless they name their own;
* other Python and keyed operators need a performance model (``perf_model=`` in the API: a library
  name or a path to a model JSON, relative paths resolved against ``base_dir``). One without a
  model is a ModelError naming the operator and its line, unless ``unmodelled="native"``, which
  plans it as costing nothing (useful for cheap operators, stated in the plan).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from sluice.errors import ModelError
from sluice.models.performance import load_model
from sluice.plan.allocation import Dag, Task


def dag_from_graph(
    graph,
    *,
    base_dir: str | Path | None = None,
    unmodelled: Literal["error", "native"] = "error",
) -> Dag:
    """Build the planner's DAG from a ``sluice.graph.JobGraph``."""
    tasks: list[Task] = []
    for op in graph.topological_order():
        if op.is_source or op.is_sink:
            tasks.append(Task(op.id, None, op.selectivity, op.kind))
        elif op.perf_model:
            tasks.append(Task(op.id, load_model(_resolve(op.perf_model, base_dir)), op.selectivity, "task"))
        elif op.definition.default_model is not None:  # a built-in kind's measured model (models/library)
            tasks.append(Task(op.id, load_model(op.definition.default_model), op.selectivity, "task"))
        elif getattr(op, "is_native", False) or unmodelled == "native":
            tasks.append(Task(op.id, None, op.selectivity, "native"))
        else:
            where = f" defined at {op.location}" if getattr(op, "location", None) else ""
            raise ModelError(
                f"operator {op.name!r} ({op.kind}){where} has no performance model: pass "
                "perf_model=<library name or model JSON> to it, profile it with `sluice profile`, "
                "or plan it as free with --unmodelled native"
            )
    edges = tuple((e.upstream, e.downstream) for e in graph.edges)
    return Dag(tuple(tasks), edges, name=graph.name)


def _resolve(ref: str, base_dir: str | Path | None) -> str:
    """A relative model path is looked up next to the pipeline file first."""
    if base_dir is not None and ref.endswith(".json") and not Path(ref).is_absolute():
        candidate = Path(base_dir) / ref
        if candidate.exists():
            return str(candidate)
    return ref
