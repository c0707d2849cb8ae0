"""Scaling before escalation: when batch sizing cannot keep a latency bound at the offered
rate, the latency controller first gives a keyed stage more partitions (DS2's one step), and
escalates only when that is not possible or not enough. Simulated engine, no Spark."""

from __future__ import annotations

import warnings

import pytest

import sluice
from sluice import agg, sinks, sources
from sluice.control import Controller, EscalationWarning, ModelBatchSizing, Resources
from sluice.control.actions import partitions_of
from sluice.plan.physical import initial_plan
from sluice.sim.loop import run_controlled
from sluice.sim.microbatch import MicroBatchEngine

A, B = 0.1, 3e-6  # a batch's fixed cost and its per-row cost outside the keyed stage
KEYED_B = 30e-6  # the keyed stage's work a row: 33k rows/s on one partition


def keyed_graph():
    p = sluice.Pipeline("scaled", partitions=1, max_parallelism=32)
    src = p.source(sources.generator(fields={"k": sources.Keys(100)}, rate=1000.0), name="source_1")
    src.map_batches(lambda b: b, name="work").key_by("k").aggregate(n=agg.count(), name="agg").sink(sinks.memory("scaled_out"))
    p.constrain("1s", p95="1s", over="10s")
    p.graph.validate()
    return p.graph


def run(rate: float, partitions: int, cores: int, batches: int = 200):
    graph = keyed_graph()
    controller = Controller(graph, [ModelBatchSizing()], resources=Resources(cores=cores))
    engine = MicroBatchEngine(
        A, B, rate_steps=[(0, 5000), (10, rate)], noise=0.03, seed=11, keyed="agg", keyed_b=KEYED_B, cores=cores
    )
    out, _ = run_controlled(engine, controller, initial_plan(graph, partitions), batches)
    return out, controller


def partitions_decided(controller) -> list[dict]:
    return [r for r in controller.log.records if r["type"] == "decision" and r["action"]["kind"] == "partitions"]


def test_scales_the_keyed_stage_out_instead_of_escalating():
    # 30k rows/s on one partition: 33 us a row, b*rate = 0.99, the bound cannot hold; on two,
    # 18 us a row: batches of about 0.25 s, a p95 near 0.5 s
    with warnings.catch_warnings():
        warnings.simplefilter("error", EscalationWarning)  # no escalation at all
        out, controller = run(30_000, partitions=1, cores=2)
    scaled = partitions_decided(controller)
    assert [partitions_of(r["action"]["value"]) for r in scaled] == [2]
    assert scaled[0]["policy"] == "batch_sizing" and "before escalating" in scaled[0]["action"]["reason"]
    tail = out[-40:]
    assert all(b.plan_version == scaled[0]["batch_id"] + 1 for b in tail)  # run with two partitions
    within = sum(b.paths["latency_1"]["p95_ms"] <= 1000 for b in tail) / len(tail)
    assert within >= 0.95
    assert max(b.backlog["source_1"] for b in tail) < 30_000  # admission keeps up


def test_escalates_when_no_stage_can_be_given_more():
    # one core: more partitions would only queue, so the bound is escalated, with no scaling
    with pytest.warns(EscalationWarning):
        _, controller = run(30_000, partitions=1, cores=1)
    assert not partitions_decided(controller)
    escalations = [r for r in controller.log.records if r["type"] == "escalation" and r["state"] == "started"]
    assert escalations and escalations[0]["details"]["max_rate"] < 30_000


def test_a_feasible_rate_is_not_scaled():
    _, controller = run(10_000, partitions=1, cores=2)
    assert not partitions_decided(controller)
    assert not controller.escalated
