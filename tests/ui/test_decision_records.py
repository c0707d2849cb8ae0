"""The decisions log as typed records: what the controller writes reads back as Decision,
Measured, Escalation, Rejected, Held and PolicyFailed records, and the dashboard's rows and
`sluice status` come from them; lines an older Sluice (or a hand) wrote read too."""

from __future__ import annotations

import json
import os

import pytest

from control_helpers import batch, constrained_graph
from sluice.cli.status import status_text
from sluice.control import Admission, Controller, Escalate, EscalationWarning, Policy, SwitchAlternate
from sluice.core.decisions import (
    Decision,
    Escalation,
    Held,
    LoggedAction,
    Measured,
    OtherRecord,
    PolicyFailed,
    Rejected,
    parse_record,
    read_decisions,
    read_records,
)
from sluice.plan.physical import initial_plan
from sluice.ui.job_view import JobView


class _Scripted(Policy):
    name = "scripted"

    def __init__(self, script):
        self.script = script

    def propose(self, view):
        step = self.script.pop(0) if self.script else []
        if step == "fail":
            raise ZeroDivisionError("float division by zero")
        return step

    def drain_notes(self):
        return [{"member": "scaling", "kind": "partitions", "target": "agg", "reason": "held: measuring", "proposal": "out"}]


def _log_batch(checkpoint: str, metrics) -> None:
    """The fields of a metrics line that `sluice status` reads."""
    line = {"batch_id": metrics.batch_id, "started_at": metrics.started_at, "duration_s": metrics.duration_s}
    with open(os.path.join(checkpoint, "metrics.jsonl"), "a") as f:
        f.write(json.dumps({**line, "rows_in": metrics.rows_in}) + "\n")


def _controlled_checkpoint(tmp_path) -> str:
    checkpoint = str(tmp_path)
    graph = constrained_graph()
    plan = initial_plan(graph, 2)
    script = [
        [Admission(rows=800, reason="shrink", expected={"batch_ms": 50.0})],
        [
            Escalate(target="latency_1", details={"bottleneck": "work", "max_rate": 10.0}, reason="too fast"),
            SwitchAlternate(target="work", alternate="fast", reason="typo"),
        ],
        "fail",
    ]
    controller = Controller(graph, [_Scripted(script)], checkpoint=checkpoint)
    with pytest.warns(EscalationWarning, match="latency_1"):
        for i in range(3):
            metrics = batch(i, float(i), rows=1000 - 100 * i, mean_ms=1500.0 - 300 * i)
            _log_batch(checkpoint, metrics)
            controller(metrics, plan)
    controller.replace_policies([], 2, "a test")
    return checkpoint


def test_what_the_controller_logs_reads_back_typed(tmp_path):
    records = read_records(_controlled_checkpoint(tmp_path))
    assert [type(r).__name__ for r in records] == [
        "Held",
        "Decision",
        "Measured",
        "Held",
        "Escalation",
        "Rejected",
        "PolicyFailed",
        "Escalation",
        "Decision",
    ]
    held, decision, measured, _, started, rejected, failed, ended, swap = records
    assert isinstance(held, Held) and held.member == "scaling" and held.kind == "partitions" and held.reason == "held: measuring"
    assert isinstance(decision, Decision) and decision.action is not None
    assert (decision.action.kind, decision.action.value, decision.policy, decision.batch_id) == ("admission", 800, "scripted", 0)
    assert decision.expected == {"batch_ms": 50.0} and decision.constraints["latency_1"]["state"] == "violated"
    assert isinstance(measured, Measured) and measured.decision == decision.id and measured.measured["rows"] == 900
    assert isinstance(started, Escalation) and (started.constraint, started.state) == ("latency_1", "started")
    assert started.details == {"bottleneck": "work", "max_rate": 10.0}
    assert isinstance(rejected, Rejected) and rejected.action is not None and rejected.action.kind == "alternate"
    assert "no operator with alternates" in rejected.reason
    assert isinstance(failed, PolicyFailed) and "ZeroDivisionError" in failed.reason
    assert isinstance(ended, Escalation) and ended.state == "ended"
    assert isinstance(swap, Decision) and swap.action is not None and swap.action.kind == "policies"
    assert swap.reason == "policies replaced from a test"


def test_each_line_the_controller_wrote_is_its_records_logged_form(tmp_path):
    checkpoint = _controlled_checkpoint(tmp_path)
    lines = read_decisions(checkpoint)
    assert [parse_record(line).to_dict() for line in lines] == lines


def test_the_dashboard_rows_and_status_come_from_the_records(tmp_path):
    checkpoint = _controlled_checkpoint(tmp_path)
    view = JobView(checkpoint)
    view.refresh()
    rows = view.decisions
    assert [r.type for r in rows] == [
        "held",
        "decision",
        "held",
        "escalation",
        "rejected",
        "policy_failed",
        "escalation",
        "decision",
    ]
    decision = rows[1]
    assert (decision.batch_id, decision.policy, decision.action, decision.reason) == (
        0,
        "scripted",
        "admission * -> 800",
        "shrink",
    )
    assert decision.expected == {"batch_ms": 50.0} and decision.measured is not None and decision.measured["rows"] == 900
    assert rows[3].action == "escalation started: latency_1" and rows[3].expected == {"bottleneck": "work", "max_rate": 10.0}
    assert rows[4].action == "alternate work -> fast" and rows[7].action == "policies * -> none"
    state = view.state()
    assert state["decisions"][1] == {
        "type": "decision",
        "batch_id": 0,
        "policy": "scripted",
        "action": "admission * -> 800",
        "reason": "shrink",
        "expected": {"batch_ms": 50.0},
        "measured": decision.measured,
    }
    assert state["constraints"]["latency_1"]["state"] == "violated"
    text = status_text(checkpoint, decisions=8, now=10.0)
    assert "decisions          8; the last 8:" in text
    assert "batch 0: scripted admission * -> 800 - shrink; measured {'batch_ms': 100.0, 'rows': 900" in text


def test_lines_of_older_or_hand_written_logs_read_tolerantly():
    untyped = parse_record({"batch_id": 1, "policy": "rebalance", "action": "move", "reason": "hot key group"})
    assert isinstance(untyped, Decision) and untyped.action == LoggedAction(kind=None, raw="move")
    assert untyped.action.text() == "move" and untyped.id is None and untyped.constraints is None
    kindless = parse_record({"batch": 2, "action": {"max_rows": 5}})
    assert isinstance(kindless, Decision) and kindless.batch_id == 2
    assert kindless.action is not None and kindless.action.text() == json.dumps({"max_rows": 5})
    rescale = parse_record(
        {"type": "decision", "id": 3, "action": {"kind": "partitions", "target": "agg", "value": {"partitions": 4}}}
    )
    assert isinstance(rescale, Decision) and rescale.action is not None and rescale.action.text() == "partitions agg -> 4"
    other = parse_record({"type": "note", "batch_id": 4, "reason": "why"})
    assert isinstance(other, OtherRecord) and (other.kind, other.batch_id, other.reason) == ("note", 4, "why")
