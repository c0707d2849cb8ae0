"""The examples of docs/control.md: the goals it states, the constraints and policies of
manual control, and its policies YAML (every registered name in it builds)."""

from __future__ import annotations

import re
from pathlib import Path

import sluice
from sluice import agg, sinks, sources
from sluice.control import ModelBatchSizing
from sluice.control.config import parse_policies

DOC = Path(__file__).resolve().parents[2] / "docs" / "control.md"


def pipeline():
    p = sluice.Pipeline("meters")
    readings = p.source(
        sources.generator(fields={"meter": sources.Keys(10), "kwh": sources.Normal(0.4, 0.1)}, rate=1000), name="readings"
    )
    per_meter = readings.map_batches(lambda b: b).key_by("meter").aggregate(n=agg.count())
    per_meter.sink(sinks.files("out/"), name="out")
    return p, readings, per_meter


def test_the_goals_it_states():
    p, readings, per_meter = pipeline()
    assert p.goals(latency="2s").graph.goals.describe() == (
        "p95 latency <= 2000 ms over 30 s (every source to every sink); keep up with the input; favour latency"
    )
    p.goals(
        latency="2s",
        percentile=95,
        path=(readings, per_meter),
        over="30s",
        keep_up=True,
        max_executors=20,
        price_per_hour=0.4,
        favour="cost",
    )
    goals = p.graph.goals
    assert (goals.max_executors, goals.price_per_hour, goals.favour) == (20, 0.4, "cost")
    assert [c.name for c in p.graph.constraints] == ["goal_latency"]
    p.job_graph().validate()


def test_manual_control_constraints():
    p, readings, per_meter = pipeline()
    p.constrain(latency="800ms")
    p.constrain(latency="500ms", path=(readings, per_meter), over="10s", p95="900ms", name="fresh")
    bounds = {c.name: c.bound_s for c in p.graph.constraints}
    assert bounds["fresh"] == 0.5 and len(bounds) == 2
    assert ModelBatchSizing(safety=0.7).name == "batch_sizing"


def test_the_policies_yaml_builds():
    text = re.search(r"```yaml\n(# policies\.yaml.*?)```", DOC.read_text(), re.S).group(1)
    names = [policy.name for policy in parse_policies(text, "docs/control.md")]
    assert names == ["batch_sizing", "scaling", "elastic_plasticc"]
    # the commented alternative: the autopilot with other settings keeps the pipeline's goals
    p, _, _ = pipeline()
    p.goals(latency="2s")
    autopilot = text.replace("  # - autopilot:", "  - autopilot:")
    built = parse_policies(autopilot, "docs/control.md", graph=p.graph)
    assert [policy.name for policy in built][-1] == "autopilot"
