"""Elastic scheduling of dynamic dataflows (thesis chapters 4 and 5): one interface
(:mod:`.base`), brute force, GA, CE/SH and PLAStiCC behind it."""

from sluice.plan.elastic.base import Decision, Forecast, Placement, RunningVM, Scheduler, SchedulerInput

__all__ = ["Decision", "Forecast", "Placement", "RunningVM", "Scheduler", "SchedulerInput"]
