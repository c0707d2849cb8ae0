"""Value, relative throughput, cost and profit per batch (thesis Eq. 4.2, 4.3, 4.4/4.7, 4.8,
4.9) against hand-computed figures; and measured live on a small Spark run."""

from __future__ import annotations

import pytest

import sluice
from sluice import Alt, sinks, sources
from sluice.errors import ConfigError
from sluice.graph.alternates import application_value, value_bounds
from sluice.graph.economics import Economics
from sluice.models.dynamic import vm_cost
from sluice.models.economics import BatchFacts, EconomicsMeter, omega


def same(batch):
    return batch


def tweets() -> sluice.Pipeline:
    """The thesis's Fig. 4.1/4.2: a parser with one implementation, a classifier with three
    alternates of value 0.65 (Bayes), 0.70 (LDA) and 1.00 (MWE)."""
    p = sluice.Pipeline("tweets")
    src = p.source(sources.generator(fields={"text": sources.Keys(5)}, rate=10), name="tweets")
    src.map_batches(same, name="parser").map_batches(
        name="classifier", alternates={"bayes": Alt(same, value=0.65), "lda": Alt(same, value=0.70), "mwe": Alt(same, value=1.0)}
    ).sink(sinks.memory("tweets_out"))
    p.graph.validate()
    return p


def test_application_value_of_the_thesis_example():
    g = tweets().graph
    # Fig. 4.2(b): the active alternates (e_1^1, e_2^2) are the parser and LDA: (1 + 0.70) / 2
    assert application_value(g, {"classifier": "lda"}) == pytest.approx(0.85)
    assert value_bounds(g) == (pytest.approx(0.825), pytest.approx(1.0))


def test_omega_is_what_was_processed_of_what_arrived():
    assert omega(900, {"a": 100}, None) == pytest.approx(0.9)  # 1000 arrived, 100 left waiting
    assert omega(900, {"a": 60, "b": 40}, 0.0) == pytest.approx(0.9)
    # keeping up: it took the 1000 that waited, 1000 more arrived while it ran
    assert omega(1000, {"a": 1000}, 1000.0) == 1.0
    # falling behind: 1000 taken, 1500 arrived (the wait grew by 500)
    assert omega(1000, {"a": 1500}, 1000.0) == pytest.approx(1000 / 1500)
    assert omega(1000, {"a": 0}, 500.0) == 1.0  # draining a backlog: at most 1
    assert omega(0, {"a": 0}, 0.0) == 1.0
    assert omega(900, {"a": None}, None) is None and omega(900, {}, None) is None  # a pull source: unknown


def meter(billing: str) -> EconomicsMeter:
    econ = Economics(price_per_hour=0.35, billing=billing, break_even_best=1.4, break_even_worst=0.7)
    return EconomicsMeter(econ, *value_bounds(tweets().graph))


# two intervals: [0, 1800 s) on 2 executors with LDA (value 0.85, 900 of 1000 rows admitted),
# then [1800, 5400 s) on 1 executor with MWE (value 1.0, everything admitted)
FIRST = BatchFacts(started_at=0.0, ended_at=1800.0, value=0.85, rows_in=900, backlog={"tweets": 100}, executors=2)
SECOND = BatchFacts(started_at=1800.0, ended_at=5400.0, value=1.0, rows_in=1000, backlog={"tweets": 0}, executors=1)


def test_hourly_billing_value_cost_and_profit_by_hand():
    m = meter("hour")
    first = m.measure(FIRST)
    # mu: 2 executors x 1 started hour x 0.35 = 0.70 (Eq. 4.2)
    # half an hour: break-even 0.70 at Gamma_max = 1, 0.35 at Gamma_min = 0.825, sigma = 0.175 / 0.35 = 0.5
    # Theta = 0.85 - 0.5 (0.70 - 0.70) - 1 = -0.15 (Eq. 4.8 with the break-even line at 0)
    assert first["value"] == pytest.approx(0.85) and first["omega"] == pytest.approx(0.9)
    assert first["cost"] == pytest.approx(0.70) and first["executors"] == 2
    assert first["profit"] == pytest.approx(-0.15)
    # now: 0.70/h against 1.4/h and 0.7/h over an hour: sigma = 0.25, Theta = 0.85 + 0.25 * 0.7 - 1 = 0.025
    assert first["profit_now"] == pytest.approx(0.025) and first["cost_per_hour"] == pytest.approx(0.70)
    second = m.measure(SECOND)
    # the newest executor is released at 1800 s (one started hour: 0.35); the other runs to
    # 5400 s, 1.5 h, billed 2 hours (0.70): mu = 1.05, as models.dynamic.vm_cost bills it
    assert second["cost"] == pytest.approx(1.05)
    assert second["cost"] == pytest.approx(float(vm_cost([0.0, 0.0], [1800.0, float("inf")], 5400.0, 0.35).sum()))
    # Gamma-bar = (0.85 * 1800 + 1.0 * 3600) / 5400 = 0.95; Omega-bar = (0.9 * 1800 + 3600) / 5400
    assert second["value_mean"] == pytest.approx(0.95)
    assert second["omega_mean"] == pytest.approx((0.9 * 1800 + 3600) / 5400, abs=1e-6)
    # 1.5 h: break-even 2.1 at best, 1.05 at worst, sigma = 0.175 / 1.05; Theta = 0.95 + sigma * 1.05 - 1 = 0.125
    assert second["profit"] == pytest.approx(0.125)


def test_per_second_billing_by_hand():
    m = meter("second")
    assert m.measure(FIRST)["cost"] == pytest.approx(2 * 0.5 * 0.35)
    second = m.measure(SECOND)
    # 0.5 h of the released executor + 1.5 h of the other, at 0.35/h
    assert second["cost"] == pytest.approx(0.70)
    assert second["profit"] == pytest.approx(0.95 - (0.175 / 1.05) * (0.70 - 2.1) - 1.0, abs=1e-6)


def test_a_restart_goes_on_from_the_last_record_without_billing_the_downtime():
    m = meter("second")
    m.measure(FIRST)
    last = m.measure(SECOND)
    again = EconomicsMeter(m.economics, m.gamma_min, m.gamma_max, last)
    later = again.measure(BatchFacts(7200.0, 7560.0, 1.0, 10, {"tweets": 0}, 1))  # down from 5400 to 7200 s
    assert later["cost"] == pytest.approx(0.70 + 0.1 * 0.35)
    assert later["value_mean"] == pytest.approx((0.85 * 1800 + 3600 + 360) / 5760, abs=1e-6)


def test_economics_are_checked():
    with pytest.raises(ConfigError, match="billing"):
        Economics(billing="month")
    with pytest.raises(ConfigError, match="must exceed"):
        Economics(break_even_best=1.0, break_even_worst=2.0)
    p = tweets()
    assert p.economics(price_per_hour=0.5, billing="hour") is p and p.graph.economics.break_even_rates == (1.0, 0.5)


@pytest.mark.spark
def test_value_cost_and_profit_are_measured_every_batch(spark, tmp_path):
    p = sluice.Pipeline("economics", partitions=1, max_parallelism=4)
    src = p.source(
        sources.generator(
            fields={"k": sources.Keys(5), "id": sources.Sequence()}, total_rows=600, max_rows_per_batch=200, seed=1
        ),
        name="src",
    )
    src.map_batches(name="work", alternates={"good": Alt(same, value=1.0), "cheap": Alt(same, value=0.5)}, active="cheap").sink(
        sinks.memory("economics_out")
    )
    p.economics(price_per_hour=3.6, billing="second", break_even_best=7.2, break_even_worst=3.6)
    result = p.run(str(tmp_path / "ckpt"), spark=spark)
    batches = [m for m in result.metrics if m.rows_in]
    assert len(batches) == 3
    for m in batches:
        d = m.dynamics
        assert d["value"] == pytest.approx(0.5)  # one PE, on its cheap alternate
        assert d["executors"] == 1  # local Spark: the driver
        assert d["alternates"]["work"]["alternate"] == "cheap"
        assert d["alternates"]["work"]["cost"] > 0 and d["alternates"]["work"]["selectivity"] == pytest.approx(1.0)
        # on the break-even line's worst end: 1 executor at 3.6/h with value Gamma_min
        assert d["profit_now"] == pytest.approx(0.0, abs=1e-9)
    seconds = batches[-1].dynamics["state"]["seconds"]
    # the record keeps cost to 9 decimals (a nano-dollar), so a tiny cost differs by up to 5e-10
    assert batches[-1].dynamics["cost"] == pytest.approx(3.6 * seconds / 3600, rel=1e-6, abs=1e-9)
    assert batches[-1].dynamics["cost"] > batches[0].dynamics["cost"]


def test_a_running_job_pays_for_the_executors_it_asked_for_from_the_request_on():
    from dataclasses import replace

    from sluice.plan.physical import initial_plan
    from sluice.runtime.batch.executor import executors_held

    plan = initial_plan(tweets().graph, 1)
    registered = [{"id": "driver"}, {"id": "0"}, {"id": "1"}]
    assert executors_held(plan, registered) == 2
    assert executors_held(replace(plan, executors=3), registered) == 3  # the third is starting: billed already
    assert executors_held(replace(plan, executors=1), registered) == 2  # a release Spark has not seen yet
    assert executors_held(plan, [{"id": "driver"}]) == 1  # local Spark: the driver runs the tasks
