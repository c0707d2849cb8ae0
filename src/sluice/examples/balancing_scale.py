"""The keyed aggregate that ``sluice.sim.balancing_scale`` simulates, built through the public API
so its graph is exactly what a user's code makes (the simulator sits below the API and takes the
graph from its caller)."""

from __future__ import annotations

import sluice
from sluice import agg, sinks, sources
from sluice.graph.jobgraph import JobGraph
from sluice.sim.balancing_scale import OP, ScaleScenario


def scenario_graph(scenario: ScaleScenario) -> JobGraph:
    """The job the scenario simulates: a keyed aggregate (its graph only; nothing runs)."""
    p = sluice.Pipeline(scenario.name, max_parallelism=scenario.key_groups, partitions=scenario.partitions)
    (
        p.source(sources.generator(fields={"k": sources.Keys(scenario.key_groups)}), name="events")
        .key_by("k")
        .aggregate(n=agg.count(), name=OP)
        .sink(sinks.callback(lambda batch_id, table: None), name="out")
    )
    return p.graph
