"""One-step rescaling (DS2) against a simulated keyed stage: converges in one step, both ways."""

from __future__ import annotations

import math

import pytest

from sluice.control import Controller, IncrementalScaling, OneStepScaling, Resources, build_policies
from sluice.plan.physical import KeyedStagePlan, Plan, range_routing
from sluice.runtime.batch.metrics import BatchMetrics

K = 64


class KeyedStageEngine:
    """A keyed stage costing ``us_per_row`` of useful time a row, spread over its partitions
    (at most ``cores`` at once), behind a source arriving at ``rate(t)`` rows/s. Each batch
    admits what arrived while the last one ran; tasks also wait ``wait_s`` for their input."""

    def __init__(self, rate, us_per_row: float, cores: int, overhead_s: float = 0.1, wait_s: float = 0.05):
        self.rate, self.us, self.cores, self.overhead, self.wait = rate, us_per_row, cores, overhead_s, wait_s
        self.clock, self.batch_id, self.last = 0.0, 0, 1.0

    def step(self, plan: Plan) -> BatchMetrics:
        p = plan.keyed["agg"].partitions
        rows = int(self.rate(self.clock) * self.last)
        useful = rows * self.us * 1e-6
        duration = self.overhead + useful / min(p, self.cores)
        # the rows that arrive while the batch runs wait for the next one: the backlog its metrics read
        m = BatchMetrics(
            batch_id=self.batch_id,
            plan_version=plan.version,
            started_at=self.clock,
            duration_s=duration,
            rows_in=rows,
            backlog={"src": int(self.rate(self.clock) * duration)},
            operators={"agg": {"rows_in": rows, "time_s": useful + p * self.wait, "input_wait_s": p * self.wait}},
        )
        self.clock += duration
        self.last = duration
        self.batch_id += 1
        return m


def run(engine, plan, controller, batches):
    partitions = []
    for _ in range(batches):
        m = engine.step(plan)
        new = controller(m, plan)
        plan = new or plan
        partitions.append(plan.keyed["agg"].partitions)
    return partitions


def plan_of(p):
    return Plan(version=0, max_parallelism=K, keyed={"agg": KeyedStagePlan(p, tuple(range_routing(K, p)))})


def _graph():
    import sluice
    from sluice import agg, sinks, sources

    pipe = sluice.Pipeline("ds2")
    s = pipe.source(sources.generator(fields={"k": sources.Keys(10)}, total_rows=10))
    s.key_by("k").aggregate(name="agg", n=agg.count()).sink(sinks.memory("o"))
    return pipe.graph


def test_scales_out_in_one_step_to_what_the_rate_needs():
    # 30k rows/s at 60 us a row = 1.8 cores of work; at 70 % utilization: 2.57 -> 3 partitions
    engine = KeyedStageEngine(lambda t: 30_000, us_per_row=60, cores=8)
    controller = Controller(_graph(), [OneStepScaling(target_utilization=0.7)], resources=Resources(cores=8))
    partitions = run(engine, plan_of(1), controller, 30)
    assert partitions[-1] == math.ceil(30_000 * 60e-6 / 0.7) == 3
    assert controller.decisions == 1  # one step, then it stays


def test_follows_a_rate_step_down_and_never_exceeds_the_cores():
    engine = KeyedStageEngine(lambda t: 60_000 if t < 20 else 5_000, us_per_row=60, cores=4)
    controller = Controller(_graph(), [OneStepScaling(target_utilization=0.7)], resources=Resources(cores=4))
    partitions = run(engine, plan_of(2), controller, 120)
    assert max(partitions) == 4  # 60k rows/s needs 5.1 partitions; 4 cores are all there are
    assert partitions[-1] == 1  # 5k rows/s: 0.3 cores of work
    changes = sum(1 for a, b in zip(partitions, partitions[1:]) if a != b)
    assert changes <= 3  # out once, in once (at most one intermediate step while the rate is seen)


def test_useful_time_not_wall_time():
    """Waiting for input is not work: a stage that mostly waits is not scaled out."""
    engine = KeyedStageEngine(lambda t: 2_000, us_per_row=10, cores=4, wait_s=2.0)
    controller = Controller(_graph(), [OneStepScaling()], resources=Resources(cores=4))
    assert run(engine, plan_of(1), controller, 20)[-1] == 1


def test_configurable_by_name():
    (policy,) = build_policies([{"scaling": {"target_utilization": 0.5}}])
    assert isinstance(policy, OneStepScaling) and policy.target_utilization == 0.5
    with pytest.raises(ValueError):
        OneStepScaling(target_utilization=0)


class ElasticKeyedStageEngine(KeyedStageEngine):
    """The keyed stage on the cores of the executors a simulated actuator holds."""

    def __init__(self, rate, us_per_row: float, executors):
        super().__init__(rate, us_per_row, cores=1)
        self.executors = executors

    def step(self, plan: Plan) -> BatchMetrics:
        self.cores = self.executors.resources().cores
        return super().step(plan)


def run_elastic(policy, rate, batches=200):
    from sluice.sim.executors import SimulatedExecutors

    engine = ElasticKeyedStageEngine(rate, us_per_row=200, executors=None)
    executors = engine.executors = SimulatedExecutors(lambda: engine.clock, held=1, max_executors=8, startup_s=5.0)
    controller = Controller(_graph(), [policy], executors=executors)
    plan, trace = plan_of(1), []
    for _ in range(batches):
        m = engine.step(plan)
        plan = controller(m, plan) or plan
        trace.append((engine.clock, plan.keyed["agg"].partitions, executors.resources().target))
    return controller, trace


def test_on_elastic_resources_ds2_sets_partitions_and_executors_in_one_step():
    # a rate step 2k -> 15k rows/s at 200 us a row: 3 cores of work; at 70 %: 4.3 -> 5 partitions
    controller, trace = run_elastic(OneStepScaling(target_utilization=0.7), lambda t: 2_000 if t < 20 else 15_000)
    assert trace[-1][1:] == (5, 5)  # partitions and the executors they run on
    changes = [(p, e) for (_, p, e), (_, p0, e0) in zip(trace[1:], trace) if (p, e) != (p0, e0)]
    assert changes == [(5, 5)]  # one step, both at once
    assert controller.decisions == 2  # the partitions and the executors decision of that step


def test_the_incremental_baseline_takes_a_step_per_partition():
    controller, trace = run_elastic(IncrementalScaling(target_utilization=0.7), lambda t: 2_000 if t < 20 else 15_000)
    assert trace[-1][1:] == (5, 5)
    steps = sum(1 for (_, p, _), (_, p0, _) in zip(trace[1:], trace) if p != p0)
    assert steps == 4  # 1 -> 2 -> 3 -> 4 -> 5


def test_ds2_releases_executors_the_partitions_do_not_need():
    from sluice.sim.executors import SimulatedExecutors

    engine = ElasticKeyedStageEngine(lambda t: 1_000, us_per_row=200, executors=None)
    executors = engine.executors = SimulatedExecutors(lambda: engine.clock, held=4, max_executors=4)
    controller = Controller(_graph(), [OneStepScaling()], executors=executors)
    plan = plan_of(1)
    for _ in range(20):
        plan = controller(engine.step(plan), plan) or plan
    assert plan.keyed["agg"].partitions == 1 and executors.resources().executors == 1 and plan.executors == 1


def _skewed_batches(partitions: int, loads: dict[int, float]) -> list[BatchMetrics]:
    """Two batches of one second in which key group kg kept ``loads[kg]`` of a core busy (its
    rows in proportion), measured under range routing onto ``partitions``."""
    rows = {kg: int(1000 * load) for kg, load in loads.items()}
    total = sum(rows.values())
    return [
        BatchMetrics(
            batch_id=b,
            plan_version=0,
            started_at=float(b),
            duration_s=1.0,
            rows_in=total,
            operators={"agg": {"rows_in": total, "time_s": sum(loads.values()), "input_wait_s": 0.0}},
            key_groups={"agg": {str(kg): {"rows": n, "state_bytes": 100} for kg, n in rows.items()}},
        )
        for b in range(2)
    ]


def _partition_loads(routing, loads, partitions):
    out = [0.0] * partitions
    for kg, load in loads.items():
        out[routing[kg]] += load
    return out


def test_a_rescale_places_key_groups_by_measured_load_not_by_ranges():
    from sluice.control.scaling import balanced_routing

    # the first 32 key groups (the lower half of the range, one new partition under ranges)
    # carry nearly all the work: ranges would leave one of two partitions with 90 % of it
    loads = {kg: (0.05 if kg < 32 else 0.005) for kg in range(K)}
    stage = KeyedStagePlan(1, tuple(range_routing(K, 1)))
    routing = balanced_routing(_skewed_batches(1, loads), ["agg"], stage, 2, K)
    assert routing is not None and len(routing) == K and set(routing) == {0, 1}
    balanced = _partition_loads(routing, loads, 2)
    by_ranges = _partition_loads(range_routing(K, 2), loads, 2)
    assert max(by_ranges) / (sum(by_ranges) / 2) > 1.8
    assert max(balanced) / (sum(balanced) / 2) < 1.05


def test_a_scale_in_drains_the_partitions_it_removes_and_balances_the_rest():
    from sluice.control.scaling import balanced_routing

    loads = {kg: 0.01 * (1 + kg % 5) for kg in range(K)}
    stage = KeyedStagePlan(4, tuple(range_routing(K, 4)))
    routing = balanced_routing(_skewed_batches(4, loads), ["agg"], stage, 2, K)
    assert routing is not None and set(routing) <= {0, 1}
    balanced = _partition_loads(routing, loads, 2)
    assert max(balanced) / (sum(balanced) / 2) < 1.05


def test_without_key_group_statistics_a_rescale_falls_back_to_ranges():
    from sluice.control.actions import Partitions
    from sluice.control.actuators import plan_change
    from sluice.control.scaling import balanced_routing

    batches = [
        BatchMetrics(
            batch_id=0,
            plan_version=0,
            started_at=0.0,
            duration_s=1.0,
            rows_in=10,
            operators={"agg": {"rows_in": 10, "time_s": 0.5}},
        )
    ]
    stage = KeyedStagePlan(1, tuple(range_routing(K, 1)))
    assert balanced_routing(batches, ["agg"], stage, 3, K) is None
    # and the plan change takes either form of the action's value
    plan = plan_of(1)
    assert plan_change(plan, Partitions(target="agg", count=3, reason="r"), 5).keyed["agg"].routing == tuple(range_routing(K, 3))
    table = [kg % 3 for kg in range(K)]
    moved = plan_change(plan, Partitions(target="agg", count=3, routing=table, reason="r"), 5)
    assert moved.keyed["agg"].partitions == 3 and list(moved.keyed["agg"].routing) == table
    with pytest.raises(Exception, match="routing of 64 key groups"):
        plan_change(plan, Partitions(target="agg", count=2, routing=table, reason="r"), 5)
