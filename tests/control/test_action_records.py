"""Actions as the decisions log keeps them: one class a kind with typed fields, the logged
JSON form older logs have, and that form read back (old logs' value shapes included)."""

from __future__ import annotations

import json

import pytest

from sluice.control.actions import (
    Action,
    Admission,
    Chains,
    Escalate,
    Executors,
    Partitions,
    Routing,
    SwitchAlternate,
    Threads,
)
from sluice.errors import PlanError
from sluice.plan.physical import KeyedStagePlan, Plan

ACTIONS = [
    Admission(rows=800, reason="shrink", expected={"batch_ms": 50.0}, policy="batch_sizing"),
    Admission(target="clicks", rows=10, reason="one source"),
    Chains(chains=[["a", "b"], ["c"]], reason="fuse"),
    Chains(chains=(("a",), ("b", "c")), rebalance={"b": 4}, reason="split"),
    Threads(target="m", threads=3, reason="io"),
    Partitions(target="agg", count=4, reason="out"),
    Partitions(target="agg", count=2, routing=[0, 1, 1, 0], reason="in"),
    Routing.of("agg", [1, 0, 1, 0], "hot"),
    Routing(target="up+down", tables={"up": [0, 1], "down": [1, 0]}, reason="collocate"),
    SwitchAlternate(target="forecast", alternate="arima", reason="slack"),
    Executors(count=3, reason="more"),
    Escalate(target="latency_1", details={"bottleneck": "work", "max_rate": 10.0}, reason="too fast"),
]


@pytest.mark.parametrize("action", ACTIONS, ids=lambda a: f"{a.kind}-{a.target}")
def test_each_action_reads_back_from_its_logged_json(action):
    logged = json.loads(json.dumps(action.to_dict()))
    assert set(logged) == {"kind", "target", "value", "reason", "expected", "policy"}
    assert Action.from_dict(logged) == action


def test_the_logged_values_keep_the_shapes_of_older_logs():
    assert ACTIONS[0].to_dict() == {
        "kind": "admission",
        "target": "*",
        "value": 800,
        "reason": "shrink",
        "expected": {"batch_ms": 50.0},
        "policy": "batch_sizing",
    }
    values = [a.to_dict()["value"] for a in ACTIONS]
    assert values[2] == [["a", "b"], ["c"]]
    assert values[3] == {"chains": [["a"], ["b", "c"]], "rebalance": {"b": 4}}
    assert values[5] == 4 and values[6] == {"partitions": 2, "routing": [0, 1, 1, 0]}
    assert values[7] == [1, 0, 1, 0] and values[8] == {"up": [0, 1], "down": [1, 0]}
    assert values[9] == "arima" and values[10] == 3 and values[11] == {"bottleneck": "work", "max_rate": 10.0}


def test_old_log_lines_read_as_typed_actions():
    rescale = Action.from_dict({"kind": "partitions", "target": "agg", "value": {"partitions": 3}, "reason": "r"})
    assert isinstance(rescale, Partitions) and rescale.count == 3 and rescale.routing is None and rescale.policy == ""
    chains = Action.from_dict({"kind": "chains", "target": "*", "value": [["a", "b"]], "reason": "r", "expected": {}})
    assert isinstance(chains, Chains) and chains.chains == (("a", "b"),) and chains.rebalance is None
    routing = Action.from_dict({"kind": "routing", "target": "agg", "value": [0, 1], "reason": "r"})
    assert isinstance(routing, Routing) and routing.tables == {"agg": (0, 1)} and routing.value == [0, 1]


def test_an_unknown_kind_is_refused_naming_the_kinds_there_are():
    with pytest.raises(ValueError, match=r"unknown action kind 'set_max_rows'; kinds: \['admission'"):
        Action.from_dict({"kind": "set_max_rows", "target": "*", "value": 1})


def test_structural_actions_are_those_that_restructure_the_plan():
    assert {type(a).__name__ for a in ACTIONS if a.structural} == {"Chains", "Threads", "Partitions", "Routing", "Executors"}


def test_each_structural_action_applies_itself_to_the_plan_and_undoes_itself():
    plan = Plan(
        version=1,
        max_parallelism=4,
        chains=(("a", "b"), ("c",)),
        keyed={"agg": KeyedStagePlan(partitions=2, routing=(0, 0, 1, 1))},
    )
    rescaled = Partitions(target="agg", count=2, routing=[0, 1, 1, 0], reason="in").apply(plan, 2)
    assert rescaled.version == 2 and rescaled.keyed["agg"].routing == (0, 1, 1, 0)
    undo = Partitions(target="agg", count=2, routing=[0, 1, 1, 0], reason="in").undo(plan, 1)
    assert undo.apply(rescaled, 3).keyed["agg"].routing == (0, 0, 1, 1) and undo.in_force(plan, 1)
    assert Executors(count=3, reason="r").apply(plan, 2).executors == 3
    assert not Threads(target="m", threads=3, reason="r").in_force(plan, 1)
    with pytest.raises(PlanError, match="must cover the same Python operators"):
        Chains(chains=[["a"]], reason="r").apply(plan, 2)
    with pytest.raises(PlanError, match="'admission' is not a change of the plan"):
        Admission(rows=1, reason="r").apply(plan, 2)
