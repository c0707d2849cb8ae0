"""The balancing and scaling policies at the papers' scale, through the simulated keyed stage.

Two scenarios, each a keyed aggregate (``source -> key_by -> aggregate -> sink``) whose
key groups' rates change every ``period`` batches:

- :func:`albic_scale`: the ALBIC paper's largest setting, 60 nodes and 1,200 key groups.
  Key-group loads as in its section 5.1 (evenly spread, jittered by +-20 %, a share of the
  nodes perturbed by +-30 %), then every period 20 % of the nodes' key groups change by up to
  +-30 % (section 5.3's rounds). One partition per node and core.
- :func:`nephele_scale`: the Nephele paper's scale, 200 nodes of 4 cores running a keyed stage
  of parallelism up to 800 (3,200 key groups, skewed), starting at 400 partitions; at batch
  ``step_at`` the offered rate steps up to what needs about 600 partitions at 70 % utilization.

:func:`run_scenario` drives ``sluice.control.Controller`` with the very policy objects a live
job uses (``KeyGroupBalancing``, ``FluxBalancing``, ``RingBalancing``, ``OneStepScaling``) and
records, per batch, what the policies do and what it does to the partitions' loads.

Pure: no Spark.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from sluice.control import Controller, Resources
from sluice.plan.physical import initial_plan
from sluice.sim.balancing_workloads import (
    KEY_GROUP_JITTER,
    NODE_PERTURBATION,
    ROUND_PERTURBATION,
    STATE_BYTES,
    even_assignment,
    perturb_nodes,
)
from sluice.sim.keyed_stage import KeyedStageEngine
from sluice.sim.loop import run_controlled

OP = "per_key"


@dataclass(frozen=True)
class ScaleScenario:
    name: str
    nodes: int
    cores_per_node: int
    key_groups: int
    partitions: int  # at the start
    batches: int
    period: int  # batches between changes of the key groups' rates
    base_rate: np.ndarray = field(repr=False)  # rows/s per key group
    step_at: int | None = None  # batch from which the rate is multiplied by ``step``
    step: float = 1.0
    us_per_row: float = 100.0
    interval_s: float = 5.0
    overhead_s: float = 0.2
    seed: int = 0

    @property
    def cores(self) -> int:
        return self.nodes * self.cores_per_node

    def rates(self, batch: int) -> np.ndarray:
        """Rows/s per key group in ``batch``: the base rates, changed each period (section 5.3:
        20 % of the nodes' key groups by U(-30 %, +30 %)), times the step once it came."""
        rng = np.random.default_rng(self.seed * 7919 + batch // self.period)
        groups = np.arange(self.key_groups) * self.nodes // self.key_groups  # the key groups of a node's range
        factor = np.ones(self.key_groups)
        if batch >= self.period:
            for node in rng.choice(self.nodes, size=max(1, self.nodes // 5), replace=False):
                factor[groups == node] = 1.0 + rng.uniform(-ROUND_PERTURBATION, ROUND_PERTURBATION)
        step = self.step if self.step_at is not None and batch >= self.step_at else 1.0
        return self.base_rate * factor * step

    def state_bytes(self) -> np.ndarray:
        return np.random.default_rng(self.seed + 1).uniform(*STATE_BYTES, self.key_groups)


def albic_scale(batches: int = 30, period: int = 5, seed: int = 0, nodes: int = 60, key_groups: int = 1200) -> ScaleScenario:
    """60 nodes, 1,200 key groups, nodes half busy on average (ALBIC section 5.1's loads)."""
    return keyed_scenario("albic", nodes, 1, key_groups, nodes, batches, period, seed, utilization=0.5)


def nephele_scale(
    batches: int = 30,
    period: int = 5,
    seed: int = 0,
    nodes: int = 200,
    cores_per_node: int = 4,
    key_groups: int = 3200,
    partitions: int = 400,
    step_at: int = 6,
) -> ScaleScenario:
    """200 nodes of 4 cores; a keyed stage of 400 partitions (of at most 800) whose offered
    rate steps up at ``step_at`` to what 1.5 times as many partitions (600) sustain at 70 %
    utilization."""
    base = keyed_scenario("nephele", nodes, cores_per_node, key_groups, partitions, batches, period, seed, utilization=0.5)
    step = 1.5 * partitions * 0.7 / (partitions * 0.5)
    return ScaleScenario(**{**base.__dict__, "step_at": step_at, "step": step})


def keyed_scenario(
    name: str,
    nodes: int,
    cores_per_node: int,
    key_groups: int,
    partitions: int,
    batches: int,
    period: int,
    seed: int,
    utilization: float,
    us_per_row: float = 100.0,
    interval_s: float = 5.0,
) -> ScaleScenario:
    """Section 5.1's key-group loads at a partition's ``utilization`` on average, as rates."""
    rng = np.random.default_rng(seed)
    parts = np.arange(partitions)
    assignment = even_assignment(key_groups, parts, rng)
    mean = 100.0 * utilization * partitions / key_groups  # percent of a core per key group
    load = mean * (1.0 + rng.uniform(-KEY_GROUP_JITTER, KEY_GROUP_JITTER, key_groups))
    load = perturb_nodes(load, assignment, parts, 0.3, NODE_PERTURBATION, rng)
    rate = load / 100.0 / (us_per_row * 1e-6)  # rows a second that keep that share of a core busy
    return ScaleScenario(
        name,
        nodes,
        cores_per_node,
        key_groups,
        partitions,
        batches,
        period,
        rate,
        us_per_row=us_per_row,
        interval_s=interval_s,
        seed=seed,
    )


def run_scenario(scenario: ScaleScenario, graph, policies: list | None) -> list[dict]:
    """Run the scenario's job ``graph`` (``sluice.examples.balancing_scale.scenario_graph``)
    with these policies (None: the routing never changes, Spark's way);
    returns one record per batch: partitions, key groups moved into it, the partitions'
    load distance (ALBIC's epsilon, in percentage points of a core) and its share of the
    mean, the busiest partition's seconds, the batch's seconds and the controller's."""
    plan = initial_plan(graph, scenario.partitions)
    engine = KeyedStageEngine(
        OP,
        scenario.rates,
        us_per_row=scenario.us_per_row,
        state_bytes=scenario.state_bytes(),
        interval_s=scenario.interval_s,
        overhead_s=scenario.overhead_s,
        cores=scenario.cores,
        seed=scenario.seed,
    )
    controller = None
    if policies:
        controller = Controller(
            graph,
            policies,
            resources=Resources(cores=scenario.cores, executors=scenario.nodes, cores_per_executor=scenario.cores_per_node),
        )
    records: list[dict] = []
    previous: list = [None]

    def record(batch, ran_with, controller_s: float) -> None:
        routing = np.asarray(ran_with.keyed[OP].routing)
        busy = np.asarray(engine.partition_busy_s)
        loads = 100.0 * busy / batch.duration_s
        mean = float(loads.mean())
        distance = float(np.abs(loads - mean).max())
        moved = 0 if previous[0] is None else int((routing != previous[0]).sum())
        previous[0] = routing
        records.append(
            {
                "batch": batch.batch_id,
                "partitions": int(ran_with.keyed[OP].partitions),
                "moved": moved,
                "load_distance": round(distance, 3),
                "imbalance": round(distance / mean, 4) if mean else 0.0,
                "span_s": round(float(busy.max()), 4),
                "duration_s": round(batch.duration_s, 4),
                "rows": batch.rows_in,
                "controller_s": round(controller_s, 4),
            }
        )

    run_controlled(engine, controller, plan, scenario.batches, on_batch=record)
    return records


def summary(records: list[dict], scenario: ScaleScenario, threshold: float = 0.1) -> dict:
    """Means over the run, migrations, and convergence: per change of the rates (each period,
    and the step), the batches until the imbalance fell to ``threshold`` of the mean (None:
    not within the period)."""
    changes = sorted(
        {
            *range(scenario.period, scenario.batches, scenario.period),
            *([scenario.step_at] if scenario.step_at is not None else []),
        }
    )
    converged = []
    for start in changes:
        end = min([c for c in changes if c > start] + [scenario.batches])
        within = [r["batch"] - start for r in records[start:end] if r["imbalance"] <= threshold]
        converged.append(within[0] if within else None)
    rescales = [r for r, prev in zip(records[1:], records) if r["partitions"] != prev["partitions"]]
    settled = [c for c in converged if c is not None]
    return {
        "mean_imbalance": round(float(np.mean([r["imbalance"] for r in records[1:]])), 4),
        "mean_load_distance": round(float(np.mean([r["load_distance"] for r in records[1:]])), 3),
        "mean_span_s": round(float(np.mean([r["span_s"] for r in records[1:]])), 4),
        "mean_duration_s": round(float(np.mean([r["duration_s"] for r in records[1:]])), 4),
        "rows_per_s": round(sum(r["rows"] for r in records) / sum(max(r["duration_s"], scenario.interval_s) for r in records), 1),
        "key_groups_moved": int(sum(r["moved"] for r in records)),
        "rebalances": int(
            sum(1 for r, prev in zip(records[1:], records) if r["moved"] and r["partitions"] == prev["partitions"])
        ),
        "rescales": [(r["batch"], r["partitions"]) for r in rescales],
        "batches_to_converge": converged,
        "converged_share": round(len(settled) / len(converged), 3) if converged else None,
        "mean_batches_to_converge": round(float(np.mean(settled)), 2) if settled else None,
        "max_controller_s": round(max(r["controller_s"] for r in records), 3),
        "final_partitions": records[-1]["partitions"],
    }


def partitions_needed(scenario: ScaleScenario, utilization: float) -> int:
    """What the final offered rate needs at ``utilization``, by the scenario's own costs (the
    answer DS2's one step should reach)."""
    work = float(scenario.rates(scenario.batches - 1).sum()) * scenario.us_per_row * 1e-6  # cores busy
    return math.ceil(work / utilization)
