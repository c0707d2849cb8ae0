"""The thesis's elastic schedulers as control policies (``control.elastic``), driven by the
simulated engine with elastic executors (``sim.elastic``): they switch alternates and hold
executors for the offered rate; PLAStiCC with a forecast of the rate starts executors before
a rise arrives, where reactive CE starts them after it; and the run's economics add up."""

from __future__ import annotations

import pytest

import sluice
from sluice import Alt, sinks, sources
from sluice.control import Controller, read_decisions
from sluice.control.elastic import ce_policy, plasticc_policy
from sluice.graph.economics import Economics
from sluice.models.dynamic import ProfitModel
from sluice.plan.elastic.forecast import TraceForecast
from sluice.plan.physical import initial_plan
from sluice.sim.elastic import ElasticEngine, figures, run
from sluice.sim.executors import SimulatedExecutors

RISE_AT, FALL_AT, END = 100.0, 200.0, 300.0


def same(batch):
    return batch


def graph(accurate_cost=2.5e-3, cheap_cost=0.8e-3):
    p = sluice.Pipeline("grid_like")
    s = p.source(sources.generator(fields={"k": sources.Keys(10)}, rate=100), name="meters")
    s.map_batches(
        alternates={"regression": Alt(same, value=1.0, cost=accurate_cost), "mean": Alt(same, value=0.6, cost=cheap_cost)},
        name="forecast",
    ).sink(sinks.memory("grid_like_out"), name="alerts")
    return p.graph


def rate(t: float) -> float:
    return 1100.0 if RISE_AT <= t < FALL_AT else 250.0


def simulate(policy, g, tmp_path, name):
    engine = ElasticEngine(g, rate, overhead_s=0.5)
    executors = engine.executors = SimulatedExecutors(lambda: engine.clock, held=1, max_executors=4, startup_s=15)
    checkpoint = str(tmp_path / name)
    controller = Controller(g, [policy], executors=executors, checkpoint=checkpoint)
    batches = run(engine, controller, initial_plan(g, 1), END)
    decisions = [d for d in read_decisions(checkpoint) if d["type"] == "decision"]
    return engine, batches, decisions


def first_scale_out(decisions, batches):
    at = {m.batch_id: m.started_at + m.duration_s for m in batches}
    outs = [at[d["batch_id"]] for d in decisions if d["action"]["kind"] == "executors" and d["action"]["value"] > 1]
    return min(outs) if outs else None


def options():
    return {"price_per_hour": 1.0, "interval_s": 10.0, "startup_s": 15.0, "omega_target": 0.95, "horizon": 4}


def test_reactive_ce_scales_out_after_the_rise_and_in_after_the_fall(tmp_path):
    g = graph()
    engine, batches, decisions = simulate(ce_policy(**options()), g, tmp_path, "ce")
    out = first_scale_out(decisions, batches)
    assert out is not None and out > RISE_AT  # reactive: it sees the rise once it is there
    assert batches[-1].executors and len([e for e in batches[-1].executors if e["id"] != "driver"]) == 1
    assert sum(m.rows_in for m in batches) > 0.95 * engine.arrived  # it kept up, backlog aside


def first_adaptation(decisions, batches):
    """When the first executors or alternate action toward the rise was decided."""
    at = {m.batch_id: m.started_at + m.duration_s for m in batches}
    acts = [
        at[d["batch_id"]]
        for d in decisions
        if (d["action"]["kind"] == "executors" and d["action"]["value"] > 1)
        or (d["action"]["kind"] == "alternate" and d["action"]["value"] == "mean")
    ]
    return min(acts) if acts else None


def test_plasticc_with_a_forecast_adapts_before_the_rise(tmp_path):
    g = graph()
    forecast = TraceForecast(rate, mean_error=0.05, seed=1)
    _, batches, decisions = simulate(plasticc_policy(forecast, **options()), g, tmp_path, "plasticc")
    # its look-ahead acts before the load arrives: billed by the hour, the cheaper alternate
    # costs Theta less than a new executor's hour
    out = first_adaptation(decisions, batches)
    assert out is not None and out < RISE_AT
    _, ce_batches, _ = simulate(ce_policy(**options()), g, tmp_path, "ce")
    worst = max(sum(m.backlog.values()) for m in batches if m.started_at >= RISE_AT)
    ce_worst = max(sum(m.backlog.values()) for m in ce_batches if m.started_at >= RISE_AT)
    assert worst < ce_worst  # so fewer rows wait when the rise comes


def test_the_simulator_measures_economics_as_the_running_job_does():
    g = graph()
    g.economics = Economics(price_per_hour=3.6, break_even_best=7.2, break_even_worst=3.6)
    engine = ElasticEngine(g, lambda t: 100.0, overhead_s=0.5)
    engine.executors = SimulatedExecutors(lambda: engine.clock, held=2, max_executors=2)
    batches = run(engine, None, initial_plan(g, 1), 60.0)
    f = figures(batches, engine.arrived)
    seconds = sum(m.duration_s for m in batches)
    assert f["executor_seconds"] == pytest.approx(2 * seconds, abs=0.01)
    assert f["cost"] == pytest.approx(2 * seconds / 3600 * 3.6, rel=1e-6)
    assert f["value"] == pytest.approx(1.0)  # the regression alternate ran throughout (the highest value)
    hours = seconds / 3600
    model = ProfitModel(0.6, 1.0, 3.6 * hours, 7.2 * hours)
    assert f["profit"] == pytest.approx(float(model.profit(1.0, f["cost"])), rel=1e-6)
    assert 0.97 < f["omega"] <= 1.0  # it kept up with what arrived


def test_configurable_by_name():
    from sluice.control import build_policies

    ce, plasticc = build_policies(
        {"policies": [{"elastic_ce": {"price_per_hour": 2.0, "interval_s": 30}}, {"elastic_plasticc": {}}]}
    )
    assert (ce.name, ce.price_per_hour, ce.interval_s) == ("elastic_ce", 2.0, 30)
    # from YAML PLAStiCC gets a forecaster learned from the job's own arrivals
    from sluice.control.forecast import HoltWinters, SeasonalMovingAverage

    assert plasticc.name == "elastic_plasticc" and isinstance(plasticc.forecaster, HoltWinters)
    (seasonal,) = build_policies([{"elastic_plasticc": {"forecaster": {"seasonal_average": {"season_s": 600}}}}])
    assert isinstance(seasonal.forecaster, SeasonalMovingAverage) and seasonal.forecaster.season_s == 600
    (none,) = build_policies([{"elastic_plasticc": {"forecaster": None}}])
    assert none.forecaster is None


def test_a_simulated_executor_bills_from_its_request_and_takes_tasks_once_it_joins():
    # one executor, 1,000 rows at 2.5 ms: 2.5 core-seconds of work after a 0.5 s overhead. A second
    # executor asked for at t=0 joins at t=1: 0.5 core-seconds done on one core by then (0.5..1),
    # the 2.0 left on two cores take 1 s more, so the batch ends at 2.0 (on one core: 3.0). Both
    # are billed from t=0.
    g = graph()
    g.economics = Economics(price_per_hour=3.6, break_even_best=7.2, break_even_worst=3.6)
    engine = ElasticEngine(g, lambda t: 0.0, overhead_s=0.5)
    engine.executors = SimulatedExecutors(lambda: engine.clock, held=1, max_executors=2, startup_s=1.0)
    engine.arrived = 1000.0
    engine.executors.set_total(2)
    m = engine.step(initial_plan(g, 1))
    assert m.duration_s == pytest.approx(2.0)
    assert m.dynamics["cost"] == pytest.approx(2 * 2.0 / 3600 * 3.6)


def test_a_batch_waits_for_the_python_workers_of_an_executor_that_registers_while_it_runs():
    # 1,000 rows at 2.5 ms as 4 tasks of 0.625 s after a 0.5 s overhead, one warm executor; a second
    # asked for at t=0 registers at t=1 and takes the next task at once, but runs it only once its
    # Python workers are up (warmup 3 s: from t=4, done at 4.625); the warm one runs the other
    # three (0.5-1.125, 1.125-1.75, 1.75-2.375). Without the warm-up the batch ends at 2.25.
    def batch(warmup_s: float) -> float:
        g = graph()
        engine = ElasticEngine(g, lambda t: 0.0, overhead_s=0.5, tasks=4)
        engine.executors = SimulatedExecutors(lambda: engine.clock, held=1, max_executors=2, startup_s=1.0, warmup_s=warmup_s)
        engine.arrived = 1000.0
        engine.executors.set_total(2)
        return engine.step(initial_plan(g, 1)).duration_s

    assert batch(3.0) == pytest.approx(4.625)
    assert batch(0.0) == pytest.approx(2.25)


def test_figures_from_a_start_time_on():
    # a run's batches before its input starts are left out: the cost from the end of the batch before
    g = graph()
    g.economics = Economics(price_per_hour=3.6, break_even_best=7.2, break_even_worst=3.6)
    engine = ElasticEngine(g, lambda t: 100.0 if t >= 10.0 else 20.0, overhead_s=0.5)
    engine.executors = SimulatedExecutors(lambda: engine.clock, held=2, max_executors=2)
    batches = run(engine, None, initial_plan(g, 1), 30.0)
    f = figures(batches, 2000.0, since=10.0, economics=g.economics, bounds=(0.6, 1.0))
    kept = [m for m in batches if m.started_at >= 10.0]
    before = [m for m in batches if m.started_at < 10.0][-1]
    end = kept[-1].started_at + kept[-1].duration_s
    assert f["cost"] == pytest.approx(2 * (end - before.started_at - before.duration_s) / 3600 * 3.6, rel=1e-6)
    hours = (end - before.started_at - before.duration_s) / 3600
    assert f["profit"] == pytest.approx(float(ProfitModel(0.6, 1.0, 3.6 * hours, 7.2 * hours).profit(1.0, f["cost"])))


def test_the_simulator_runs_no_batch_before_input_arrives():
    # as Spark: no new input, no batch (and no controller decision); the first batch starts once
    # a row has arrived (rows arrive from t=5 at 100 rows/s: the first by 5.1)
    g = graph()
    engine = ElasticEngine(g, lambda t: 100.0 if t >= 5.0 else 0.0, overhead_s=0.5)
    batches = run(engine, None, initial_plan(g, 1), 8.0)
    assert batches[0].started_at == pytest.approx(5.1) and all(m.rows_in > 0 for m in batches)


def test_plasticc_scales_out_though_a_joining_executor_stalls_the_job(tmp_path):
    # one executor holds 60 rows/s and not 600 (a served model at 2 ms a row, no lighter
    # alternate); a new executor registers 10 s after the request and its Python workers take
    # 5 s more, during which the job stalls. The stall holds up steps that already miss Omega-hat
    # and is repaid over the look-ahead: PLAStiCC asks for the second executor during the rise
    p = sluice.Pipeline("served")
    s = p.source(sources.generator(fields={"k": sources.Keys(10)}, rate=100), name="meters")
    s.map_batches(alternates={"model": Alt(same, value=1.0, cost=2e-3)}, name="serve").sink(
        sinks.memory("served_out"), name="out"
    )
    g = p.economics(price_per_hour=1.0, billing="second").graph

    def served(policy, name):
        engine = ElasticEngine(g, lambda t: 600.0 if 20.0 <= t < 70.0 else 60.0, overhead_s=0.3, tasks=2)
        executors = engine.executors = SimulatedExecutors(
            lambda: engine.clock, held=1, max_executors=2, startup_s=15.0, warmup_s=5.0
        )
        checkpoint = str(tmp_path / name)
        controller = Controller(g, [policy] if policy else [], executors=executors, checkpoint=checkpoint)
        batches = run(engine, controller, initial_plan(g, 2), 100.0)
        return batches, [d for d in read_decisions(checkpoint) if d["type"] == "decision"] if policy else []

    options = {"price_per_hour": 1.0, "interval_s": 5.0, "startup_s": 15.0, "warmup_s": 5.0, "horizon": 6}
    batches, decisions = served(plasticc_policy(**options), "plasticc")
    out = first_scale_out(decisions, batches)
    assert out is not None and 20.0 < out < 70.0
    grown = [m for m in batches if len([e for e in m.executors if e["id"] != "driver"]) == 2]
    assert grown  # the executor joined
    static, _ = served(None, "static")
    worst = max(sum(m.backlog.values()) for m in batches)
    assert worst < max(sum(m.backlog.values()) for m in static)  # fewer rows waited than on one executor
