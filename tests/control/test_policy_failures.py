"""A policy that raises never stops the job: it is disabled, the decision log says why, and
the other policies go on (no Spark)."""

from __future__ import annotations

import pytest

from control_helpers import batch, constrained_graph
from sluice.control import Admission, Controller, Policy, read_decisions
from sluice.control.config import parse_policies
from sluice.control.guards import Guards
from sluice.errors import ConfigError
from sluice.plan.physical import initial_plan


class _Raising(Policy):
    name = "raising"

    def __init__(self, exc: BaseException):
        self.exc, self.calls = exc, 0

    def propose(self, view):
        self.calls += 1
        raise self.exc


class _Admits(Policy):
    name = "admits"

    def propose(self, view):
        return [Admission(rows=700 + view.batch_id, reason="steady")]


@pytest.mark.parametrize("exc", [ZeroDivisionError("float division by zero"), MemoryError(), RecursionError("deep")])
def test_a_failing_policy_is_disabled_logged_and_the_others_go_on(tmp_path, exc):
    graph = constrained_graph()
    plan = initial_plan(graph, 2)
    failing, steady = _Raising(exc), _Admits()
    controller = Controller(graph, [failing, steady], checkpoint=str(tmp_path))
    for i in range(3):
        controller(batch(i, float(i), rows=1000, mean_ms=100.0), plan)
    assert failing.calls == 1  # disabled after its first failure
    assert controller.policies == [steady]
    assert controller.admission.current() == {"source_1": 702}  # the other policy still acts
    failed = [r for r in read_decisions(str(tmp_path)) if r["type"] == "policy_failed"]
    assert len(failed) == 1
    assert failed[0]["policy"] == "raising" and failed[0]["batch_id"] == 0
    assert type(exc).__name__ in failed[0]["reason"] and "disabled" in failed[0]["reason"]


def test_a_guard_that_exhausts_memory_is_disabled_not_fatal(tmp_path):
    graph = constrained_graph()
    guards = Guards([{"when": "'a' * 99999999999999 == 'b'", "use": {"work": "fast"}}])
    controller = Controller(graph, [guards], checkpoint=str(tmp_path))
    controller(batch(0, 0.0, rows=1000, mean_ms=100.0), initial_plan(graph, 2))
    assert controller.policies == []
    failed = [r for r in read_decisions(str(tmp_path)) if r["type"] == "policy_failed"]
    assert failed and "MemoryError" in failed[0]["reason"]


@pytest.mark.parametrize("rho", [0, 0.0, -1, 1.5])
def test_fixed_point_rho_is_checked_with_the_policies_file(rho):
    with pytest.raises(ConfigError, match="rho"):
        parse_policies(f"policies:\n  - fixed_point: {{rho: {rho}}}\n", "policies.yaml")
