"""Alternates in the API, the graph, the Plan and the control plane (pure: no Spark)."""

from __future__ import annotations

import pyarrow as pa
import pytest

import sluice
from sluice import Alt, sinks, sources
from sluice.control import Controller, Guards, build_policies
from sluice.control.actions import SwitchAlternate
from sluice.errors import ConfigError, PipelineError, PlanError
from sluice.graph.alternates import application_value, value_bounds, with_alternate
from sluice.plan.physical import Plan, adapted_plan, initial_plan
from sluice.runtime.batch.metrics import BatchMetrics


def fast(batch):
    return batch


def slow(batch):
    return batch


def count(key, rows, state):
    return None


def pipeline(**alternates_of_forecast) -> sluice.Pipeline:
    p = sluice.Pipeline("alts")
    src = p.source(sources.generator(fields={"k": sources.Keys(10), "x": sources.Uniform(0, 1)}, rate=100), name="meters")
    alts = alternates_of_forecast or {"regression": Alt(slow, value=1.0, cost=2e-4), "mean": Alt(fast, value=0.7)}
    forecast = src.map_batches(alternates=alts, name="forecast")
    forecast.key_by("k").process(alternates={"a": Alt(count, value=0.9), "b": count}, name="state").sink(sinks.memory("alts_out"))
    p.graph.validate()
    return p


def test_default_alternate_is_the_best_and_the_function_is_its():
    g = pipeline().graph
    assert g["forecast"].spec.active == "regression" and g["forecast"].spec.fn is slow
    assert g["state"].spec.active == "b"  # a plain function is an alternate of value 1
    assert initial_plan(g, 2).alternates == {"forecast": "regression", "state": "b"}


def test_with_alternate_swaps_only_the_function():
    op = pipeline().graph["forecast"]
    assert with_alternate(op, "mean").spec.fn is fast
    assert with_alternate(op, "mean").id == op.id and op.spec.fn is slow
    with pytest.raises(PlanError, match="no alternate 'arima'"):
        with_alternate(op, "arima")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"fn": fast, "alternates": {"a": Alt(fast)}}, "not both"),
        ({"alternates": {}}, "non-empty dict"),
        ({"alternates": {"a": 3}}, "must be Alt"),
        ({"alternates": {"a": Alt(fast)}, "active": "b"}, "not one of its alternates"),
        ({"fn": fast, "active": "a"}, "no alternates= were given"),
    ],
)
def test_bad_alternates_name_the_problem(kwargs, message):
    p = sluice.Pipeline("bad")
    src = p.source(sources.generator(fields={"k": sources.Keys(3)}, rate=10))
    with pytest.raises(PipelineError, match=message):
        src.map_batches(**kwargs)


def test_alt_checks_its_figures():
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        Alt(fast, value=1.2)
    with pytest.raises(ValueError, match="seconds of CPU"):
        Alt(fast, cost=-1)


def test_plan_keeps_alternates_through_json_and_adaptation():
    g = pipeline().graph
    plan = initial_plan(g, 2)
    switched = Plan.from_json(
        Plan(**{**plan.__dict__, "alternates": {"forecast": "mean", "state": "a"}, "executors": 3}).to_json()
    )
    assert switched.alternates == {"forecast": "mean", "state": "a"} and switched.executors == 3
    # a changed pipeline: an alternate still there is kept, one removed falls back to the default
    changed = pipeline(regression=Alt(slow, value=1.0), arima=Alt(fast, value=0.9)).graph
    fitted = adapted_plan(switched, changed, 2, 10)
    assert fitted.alternates == {"forecast": "regression", "state": "a"}
    assert Plan.from_json('{"version": 0, "max_parallelism": 8, "keyed": {}, "chains": []}').alternates == {}


def test_application_value_is_the_mean_over_processing_elements():
    g = pipeline().graph  # PEs: forecast (1.0 / 0.7) and state (0.9 / 1.0); sources, key_by and sinks are not
    assert application_value(g, {"forecast": "mean", "state": "a"}) == pytest.approx((0.7 + 0.9) / 2)
    assert value_bounds(g) == (pytest.approx(0.8), pytest.approx(1.0))


def metrics(batch_id: int, **fields) -> BatchMetrics:
    return BatchMetrics(batch_id=batch_id, plan_version=0, started_at=1000.0 + batch_id, duration_s=0.5, rows_in=100, **fields)


def test_guards_switch_alternates_of_several_operators_in_one_batch():
    g = pipeline().graph
    guards = Guards(
        [{"when": "batch_id >= 2 and rows > 50", "use": {"forecast": "mean", "state": "a"}}], otherwise={"forecast": "regression"}
    )
    control = Controller(g, [guards])
    plan = initial_plan(g, 2)
    assert control(metrics(1), plan) is None  # the otherwise holds, and is in force
    new = control(metrics(2), plan)
    assert new.version == 3 and new.alternates == {"forecast": "mean", "state": "a"}
    decisions = [r for r in control.log.records if r["type"] == "decision"]
    assert [d["action"]["target"] for d in decisions] == ["forecast", "state"]
    assert "batch_id >= 2" in decisions[0]["action"]["reason"]
    assert control(metrics(3), new) is None  # in force: no churn


def test_guards_wait_for_a_rule_to_hold_for_batches_in_a_row():
    g = pipeline().graph
    control = Controller(g, [Guards([{"when": "metric('forecast', 'err') > 0.1", "use": {"forecast": "mean"}}], for_batches=2)])
    plan = initial_plan(g, 2)
    user = {"forecast": {"user.err.sum": 0.6, "user.err.count": 3}}  # mean 0.2
    assert control(metrics(1, operators=user), plan) is None
    assert control(metrics(2, operators={}), plan) is None  # unmeasured: does not hold, the count restarts
    assert control(metrics(3, operators=user), plan) is None
    assert control(metrics(4, operators=user), plan).alternates["forecast"] == "mean"


def test_a_switch_to_an_unknown_alternate_is_rejected_and_logged():
    g = pipeline().graph

    class Bad(Guards):
        def propose(self, view):
            return [SwitchAlternate(target="forecast", alternate="arima", reason="typo")]

    control = Controller(g, [Bad([{"when": "1", "use": {"forecast": "mean"}}])])
    assert control(metrics(1), initial_plan(g, 2)) is None
    (rejected,) = [r for r in control.log.records if r["type"] == "rejected"]
    assert "no alternate 'arima'" in rejected["reason"]


@pytest.mark.parametrize(
    "when, message",
    [
        ("__import__('os')", "calls something other"),
        ("latency_ms.real > 1", "Attribute"),
        ("speed > 3", "names 'speed'"),
        ("latency_ms >", "not an expression"),
    ],
)
def test_guard_conditions_are_checked_when_configured(when, message):
    with pytest.raises(ConfigError, match=message):
        build_policies([{"guards": {"rules": [{"when": when, "use": {"forecast": "mean"}}]}}])


def test_arrow_functions_of_alternates_run_as_the_plan_says():
    g = pipeline(
        double=Alt(
            lambda b: pa.RecordBatch.from_arrays([b.column("k"), pa.compute.multiply(b.column("x"), 2)], names=["k", "x"]),
            value=1.0,
        ),
        same=Alt(fast, value=0.5),
    ).graph
    batch = pa.RecordBatch.from_pydict({"k": ["a"], "x": [1.5]})
    assert with_alternate(g["forecast"], "double").spec.fn(batch).column("x").to_pylist() == [3.0]
    assert with_alternate(g["forecast"], "same").spec.fn(batch).column("x").to_pylist() == [1.5]


def test_the_view_gives_an_alternates_measured_cost_else_the_declared_one():
    g = pipeline().graph
    control = Controller(g, [])
    ran = {"alternates": {"forecast": {"alternate": "mean", "cost": 2e-6, "selectivity": 1.0}}}
    control(metrics(1, operators={"forecast": {"rows_in": 100}}, dynamics=ran), initial_plan(g, 2))
    view = control.view(1, initial_plan(g, 2))
    assert view.alternate_cost("forecast", "mean") == pytest.approx(2e-6)
    assert view.alternate_cost("forecast", "regression") == pytest.approx(2e-4)  # declared, never measured
    assert view.alternate_cost("state", "a") is None


def test_a_restart_without_the_alternate_in_force_runs_the_default_and_says_so(tmp_path):
    from sluice.runtime.pipeline_record import fit_plan_log
    from sluice.runtime.planlog import PlanLog

    log = PlanLog(str(tmp_path))
    g = pipeline().graph
    log.write(initial_plan(g, 2))
    log.write(Plan(**{**initial_plan(g, 2).__dict__, "version": 3, "alternates": {"forecast": "mean", "state": "a"}}))
    changed = pipeline(regression=Alt(slow, value=1.0), arima=Alt(fast, value=0.9)).graph  # "mean" is gone
    with pytest.warns(UserWarning, match="no longer has the alternate 'mean'"):
        fit_plan_log(log, changed, 2, 5)
    assert log.plan_for(5).alternates == {"forecast": "regression", "state": "a"}
    assert log.plan_for(3).alternates["forecast"] == "mean"  # batches that ran keep their plan


def test_an_unmeasured_alternates_cost_is_its_declared_cost_scaled_like_the_measured_ones():
    g = pipeline(regression=Alt(slow, value=1.0, cost=2e-4), mean=Alt(fast, value=0.7, cost=1e-6)).graph
    control = Controller(g, [])
    ran = {"alternates": {"forecast": {"alternate": "mean", "cost": 3e-6, "selectivity": 1.0}}}
    control(metrics(1, operators={"forecast": {"rows_in": 100}}, dynamics=ran), initial_plan(g, 2))
    view = control.view(1, initial_plan(g, 2))
    assert view.alternate_cost("forecast", "mean") == pytest.approx(3e-6)
    assert view.alternate_cost("forecast", "regression") == pytest.approx(6e-4)  # measured 3x its profile
