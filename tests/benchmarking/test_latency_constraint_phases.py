"""benchmarks/latency_constraint.py's judging, on hand-made batches (no Spark): the trace ends
with an outage and a catch-up, transients count in a run's share within the bound, and the
catch-up is judged by its batches' length and the time to drain, not by the latency of rows
that waited through the outage."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import latency_constraint as lc

BOUND_S = 2.0


def batch(t, rows=1000, duration_s=0.5, p95_ms=900.0, backlog=100):
    return {"t": t, "rows": rows, "duration_s": duration_s, "p95_ms": p95_ms, "backlog": backlog}


def test_the_trace_ends_with_an_outage_and_a_catch_up_at_the_last_rate():
    phases = lc.trace(60_000, True, BOUND_S)
    assert [r for _, r in phases[-3:]] == [phases[-1][1]] * 3
    down_at, down_s = lc.outage_of(phases, BOUND_S)
    assert down_s == lc.OUTAGE_BOUNDS * BOUND_S
    assert down_at == pytest.approx(sum(s for s, _ in phases[:-2]))
    assert lc.outage_of(lc.trace(60_000, True, BOUND_S, outage=False), BOUND_S) is None
    assert max(r for _, r in phases) == pytest.approx(1.2 * 60_000)  # a step above the uncapped peak


def run_of(phases, first_catch_up: list[dict]) -> dict:
    down_at, down_s = lc.outage_of(phases, BOUND_S)
    batches, t = [], 0.0
    while t < down_at:
        # the first batch after each step is over the bound: a transient
        starts = {round(sum(s for s, _ in phases[:i]), 6) for i in range(len(phases))}
        batches.append(batch(t, p95_ms=3000.0 if round(t, 6) in starts else 900.0))
        t += 1.0
    restarted = down_at + down_s
    t = restarted
    for b in first_catch_up:
        batches.append({**b, "t": t})
        t += b["duration_s"] + 0.1
    end = sum(s for s, _ in phases)
    while t < end:
        batches.append(batch(t))
        t += 1.0
    return {"batches": batches, "decisions": [], "restarted_at": restarted}


def test_transients_count_and_the_catch_up_is_judged_apart():
    phases = lc.trace(60_000, True, BOUND_S)
    rate = phases[-1][1]
    waiting = int(rate * lc.OUTAGE_BOUNDS * BOUND_S)
    # uncapped: one batch takes all that waited and runs for several bounds
    uncapped = lc.summarize(
        run_of(phases, [batch(0, rows=waiting, duration_s=9.0, p95_ms=25_000.0, backlog=int(rate * 9.0))]),
        phases,
        BOUND_S * 1000,
    )
    # capped: batches a bound long drain it, each over the bound in latency (its rows waited)
    capped_batches = [
        batch(0, rows=40_000, duration_s=1.8, p95_ms=15_000.0, backlog=waiting - 40_000 * (i + 1)) for i in range(3)
    ]
    capped_batches.append(batch(0, rows=40_000, duration_s=1.8, p95_ms=4_000.0, backlog=100))
    capped = lc.summarize(run_of(phases, capped_batches), phases, BOUND_S * 1000)

    rate_phases = len(phases) - 2
    assert uncapped["transients"] == rate_phases  # one transient after each step, counted
    assert uncapped["within_share"] < uncapped["steady_within_share"] == 1.0
    assert uncapped["catch_up"]["batches_over_bound_while_draining"] == 1
    assert uncapped["catch_up"]["max_batch_s_while_draining"] == 9.0
    assert capped["catch_up"]["batches_over_bound_while_draining"] == 0
    assert capped["catch_up"]["batches_while_draining"] == 4
    assert capped["catch_up"]["drained_after_s"] == pytest.approx(4 * 1.8 + 3 * 0.1)
    kinds = [p.get("kind") for p in capped["phases"]]
    assert kinds[-2:] == ["outage", "catch_up"] and kinds[:-2] == [None] * rate_phases
    # the catch-up's late rows do not count against a run's share within the bound
    assert capped["within_share"] == uncapped["within_share"]


def test_targets_judge_the_rate_phases_only():
    phases = lc.trace(60_000, True, BOUND_S)
    run = run_of(phases, [batch(0, rows=50_000, duration_s=1.5, p95_ms=20_000.0, backlog=100)])
    summary = lc.summarize(run, phases, BOUND_S * 1000)
    goals = lc.targets({"uncapped": summary, "sluice": summary, "das_fixed_point": summary}, 60_000)
    # 5k, 60 % and 90 % of peak and the 10k phase; not 120 %, nor the outage and its catch-up
    assert goals["phases_judged"] == [5000, 36_000, 54_000, 10_000]
