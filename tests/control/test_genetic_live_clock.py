"""GA's run-time adaptation on a live job's clock: ``now_s`` is the epoch there (the
simulator's clock starts at 0), and the VMs' cost over the rest of the period must stay a
cost, so GA does not start VMs a lower rate has no use for."""

from __future__ import annotations

from sluice.models.dynamic import ProfitModel, ec2_m1_classes
from sluice.plan.elastic.base import RunningVM, SchedulerInput
from sluice.plan.elastic.genetic import GeneticScheduler
from sluice.plan.elastic.greedy import GreedyScheduler
from sluice.sim.dataflows import linear_road, lrb_input_rates

CLASSES = ec2_m1_classes()
EPOCH_S = 1.8e9  # a live job's clock: seconds since 1970


def lrb_input(rate: float, **kw) -> SchedulerInput:
    df = linear_road()
    return SchedulerInput(df, CLASSES, ProfitModel.thesis_lrb(df, 12, rate), lrb_input_rates(rate), **kw)


def test_ga_adapts_alike_on_the_simulators_clock_and_on_the_epoch():
    deployed = GreedyScheduler(True).deploy(lrb_input(100.0))
    started = {}
    for now in (300.0, EPOCH_S + 300.0):
        vms = tuple(
            RunningVM(f"vm-{k}", deployed.start[vid], now - 300.0, row) for k, (vid, row) in enumerate(deployed.mapping.items())
        )
        decision = GeneticScheduler(generations=30).adapt(lrb_input(40.0, active=deployed.active, vms=vms, now_s=now))
        started[now] = len(decision.start)
    # at 40 msg/s the 100 msg/s deployment has room to spare: no new VM on either clock
    assert started == {300.0: 0, EPOCH_S + 300.0: 0}
