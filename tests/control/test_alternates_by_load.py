"""AlternatesByLoad on hand-made batches (no Spark): a throughput dip that the active
alternate's load does not explain (one batch stalled, the cores mostly idle) switches
nothing; the same dip with the active alternate's load over the target switches down."""

from __future__ import annotations

import pyarrow as pa

import sluice
from sluice import Alt, sinks, sources
from sluice.control import AlternatesByLoad, Controller
from sluice.plan.physical import initial_plan
from sluice.runtime.batch.metrics import BatchMetrics

ACCURATE_S, CHEAP_S = 1e-3, 2e-5


def same(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch


def graph():
    p = sluice.Pipeline("alternates_by_load_unit", partitions=2)
    readings = p.source(sources.generator(fields={"id": sources.Sequence()}, rate=300.0), name="readings")
    readings.map_batches(
        name="score",
        alternates={"accurate": Alt(same, value=1.0, cost=ACCURATE_S), "cheap": Alt(same, value=0.6, cost=CHEAP_S)},
    ).sink(sinks.memory("alternates_by_load_unit"), name="out")
    p.graph.validate()
    return p.graph


def batch(batch_id: int, started: float, duration_s: float, rows: int, backlog: int) -> BatchMetrics:
    busy = rows * ACCURATE_S
    return BatchMetrics(
        batch_id=batch_id,
        plan_version=0,
        started_at=started,
        duration_s=duration_s,
        rows_in=rows,
        rows_by_source={"readings": rows},
        backlog={"readings": backlog},
        operators={"score": {"rows_in": rows, "time_s": busy}},
        alternates={"score": "accurate"},
        dynamics={"alternates": {"score": {"alternate": "accurate", "cost": ACCURATE_S}}},
    )


def run(rate: float, stall_s: float) -> list[dict]:
    """Batches of 0.3 s at ``rate``; the last one stalls for ``stall_s`` and leaves what
    arrived meanwhile waiting. Returns the decisions."""
    g = graph()
    control = Controller(g, [AlternatesByLoad()])
    plan = initial_plan(g, 2)
    t, per = 0.0, int(rate * 0.35)
    for b in range(4):
        control(batch(b, t, 0.3, per, per // 3), plan)
        t += 0.35
    control(batch(4, t, stall_s, per, int(rate * stall_s)), plan)
    return [d for d in control.log.records if d["type"] == "decision"]


def test_a_stalled_batch_the_alternates_load_does_not_explain_switches_nothing():
    # 300 rows/s: the accurate alternate would keep 2 cores 0.15 busy; one batch stalls for
    # 1.2 s (other work on the machine), and the rows that arrived meanwhile wait: Omega dips
    assert run(300.0, 1.2) == []


def test_the_same_dip_with_the_alternates_load_over_the_target_switches_down():
    # 1,500 rows/s: the accurate alternate would keep 2 cores 0.75 busy, over the 0.6 target
    (switch,) = run(1500.0, 1.2)
    assert switch["action"]["value"] == "cheap" and "behind" in switch["action"]["reason"]
