"""The arbiter and the controller's loop, on synthetic batches (no Spark)."""

from __future__ import annotations

import pytest

from control_helpers import batch, constrained_graph
from sluice.control import (
    Action,
    Admission,
    Chains,
    Controller,
    Escalate,
    EscalationWarning,
    Partitions,
    Policy,
    Threads,
    read_decisions,
)
from sluice.control.arbiter import Arbiter
from sluice.control.qos import QoSManager
from sluice.graph.constraints import make_constraint
from sluice.plan.physical import initial_plan


def _partitions(n: int, policy: str = "p") -> Action:
    return Partitions(target="agg", count=n, reason="test", policy=policy)


def test_one_structural_change_then_wait_for_the_flush():
    qos = QoSManager([make_constraint("latency_1", "1s", over="3.5s")])
    arbiter = Arbiter()
    qos.observe(batch(0, 0.0, rows=10, mean_ms=100.0))
    verdict = arbiter.arbitrate([_partitions(4), Threads(target="m", threads=2, reason="test")], 0, qos, {})
    assert [a.kind for a in verdict.accepted] == ["partitions"]
    assert verdict.deferred[0][1] == "one structural change at a time"
    # while batch 0's measurement is in the window, no structural change passes; sizing does
    for i in range(1, 4):
        qos.observe(batch(i, float(i), rows=10, mean_ms=100.0))
        verdict = arbiter.arbitrate([Threads(target="m", threads=2, reason="t"), Admission(rows=500 + i, reason="t")], i, qos, {})
        assert [a.kind for a in verdict.accepted] == ["admission"]
        assert "flush" in verdict.deferred[0][1]
    qos.observe(batch(4, 4.0, rows=10, mean_ms=100.0))  # commits at 4.1: batch 0 (0.1) left the 3.5 s window
    verdict = arbiter.arbitrate([Threads(target="m", threads=2, reason="t")], 4, qos, {})
    assert [a.kind for a in verdict.accepted] == ["threads"]


def test_a_policy_that_judges_its_own_changes_is_not_held_by_the_flush_rule():
    qos = QoSManager([make_constraint("latency_1", "1s", over="3.5s")])
    arbiter = Arbiter()
    qos.observe(batch(0, 0.0, rows=10, mean_ms=100.0))
    assert arbiter.arbitrate([_partitions(4, "autopilot")], 0, qos, {}).accepted
    qos.observe(batch(1, 1.0, rows=10, mean_ms=100.0))
    proposals = [_partitions(6, "autopilot"), _partitions(8, "ds2")]
    verdict = arbiter.arbitrate(proposals, 1, qos, {}, frozenset({"autopilot"}))
    assert [(a.policy, a.value) for a in verdict.accepted] == [("autopilot", 6)]
    assert [a.policy for a, _ in verdict.deferred] == ["ds2"]
    # a named policy's change still waits for the flush
    qos.observe(batch(2, 2.0, rows=10, mean_ms=100.0))
    verdict = arbiter.arbitrate([_partitions(8, "ds2")], 2, qos, {}, frozenset({"autopilot"}))
    assert not verdict.accepted and "flush" in verdict.deferred[0][1]


def test_first_policy_wins_a_contested_size_and_no_ops_are_dropped():
    qos = QoSManager([make_constraint("latency_1", "1s")])
    verdict = Arbiter().arbitrate(
        [Admission(rows=100, reason="a"), Admission(rows=50, reason="b"), Partitions(target="agg", count=2, reason="same")],
        0,
        qos,
        {("partitions", "agg"): 2},
    )
    assert [(a.kind, a.value) for a in verdict.accepted] == [("admission", 100)]
    assert len(verdict.deferred) == 1


class _Scripted(Policy):
    name = "scripted"

    def __init__(self, script):
        self.script = script
        self.views = []

    def propose(self, view):
        self.views.append(view)
        return self.script.pop(0) if self.script else []


def test_controller_applies_logs_and_measures(tmp_path):
    graph = constrained_graph()
    plan = initial_plan(graph, 2)
    policy = _Scripted(
        [
            [Admission(rows=800, reason="shrink", expected={"batch_ms": 50.0})],
            [Escalate(target="latency_1", details={"bottleneck": "work", "max_rate": 10.0}, reason="too fast")],
            [],
        ]
    )
    controller = Controller(graph, [policy], checkpoint=str(tmp_path))
    assert controller(batch(0, 0.0, rows=1000, mean_ms=1500.0, p95_ms=2000.0), plan) is None
    assert controller.admission.current() == {"source_1": 800}
    view = policy.views[0]
    assert view.status["latency_1"].state == "violated" and view.plan is plan and view.graph is graph
    with pytest.warns(EscalationWarning, match="latency_1"):
        controller(batch(1, 1.0, rows=800, mean_ms=900.0), plan)
    assert controller.state()["constraints"]["latency_1"]["state"] == "escalated"
    controller(batch(2, 2.0, rows=800, mean_ms=900.0), plan)
    records = read_decisions(str(tmp_path))
    assert [r["type"] for r in records] == ["decision", "measured", "escalation", "escalation"]
    decision, measured, started, ended = records
    assert decision["action"]["value"] == 800 and decision["policy"] == "scripted" and decision["batch_id"] == 0
    assert measured["decision"] == decision["id"] and measured["measured"]["rows"] == 800
    assert measured["expected"] == {"batch_ms": 50.0}
    assert started["state"] == "started" and started["details"]["bottleneck"] == "work"
    assert ended["state"] == "ended" and ended["batch_id"] == 2


def test_controller_returns_the_next_plan_for_a_structural_change():
    graph = constrained_graph()
    plan = initial_plan(graph, 2)
    chains = plan.chains
    policy = _Scripted([[Chains(chains=chains, reason="same chains")], [Threads(target="work", threads=3, reason="io")]])
    controller = Controller(graph, [policy])
    assert controller(batch(0, 0.0, rows=10, mean_ms=10.0), plan) is None  # same chains: nothing to do
    new = controller(batch(1, 1.0, rows=10, mean_ms=10.0), plan)
    assert new.version == 2 and new.threads == {"work": 3}


def test_progress_line_shows_each_constraint_and_the_last_decision():
    from sluice.cli.progress import control_summary

    graph = constrained_graph()
    controller = Controller(graph, [_Scripted([[Admission(rows=800, reason="shrink")]])])
    controller(batch(0, 0.0, rows=1000, mean_ms=1500.0), initial_plan(graph, 2))
    text = control_summary(controller.state())
    assert "latency_1 adapting 1500/1000 ms" in text
    assert "last: admission * -> 800 (batch 0)" in text


def test_a_deferred_proposal_is_logged_as_held_once_until_its_reason_changes(tmp_path):
    graph = constrained_graph()
    plan = initial_plan(graph, 2)
    ask = [Threads(target="work", threads=2, reason="io")]
    policy = _Scripted([[Threads(target="work", threads=3, reason="io")], ask, ask, ask])
    controller = Controller(graph, [policy], checkpoint=str(tmp_path))
    plan = controller(batch(0, 0.0, rows=10, mean_ms=10.0), plan)
    assert plan.threads == {"work": 3}
    for i in (1, 2, 3):  # batch 0's measurement is still in the window: the change waits
        assert controller(batch(i, 0.1 * i, rows=10, mean_ms=10.0), plan) is None
    held = [r for r in read_decisions(str(tmp_path)) if r["type"] == "held"]
    assert len(held) == 1, held
    assert held[0]["policy"] == "scripted" and held[0]["kind"] == "threads" and held[0]["target"] == "work"
    assert "flush" in held[0]["reason"] and held[0]["proposal"] == "io"
