"""The QoS manager: Nephele's Eq. 1 over a sliding window, percentiles, the flush rule."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from control_helpers import batch, constrained_graph
from sluice.control import QoSManager
from sluice.graph.constraints import make_constraint


def test_eq1_weights_every_record_not_every_batch():
    qos = QoSManager([make_constraint("latency_1", "500ms", over="10s")])
    qos.observe(batch(0, 0.0, rows=100, mean_ms=900.0))
    qos.observe(batch(1, 1.0, rows=900, mean_ms=100.0))
    status = qos.status("latency_1")
    # (100 * 900 + 900 * 100) / 1000 records = 180 ms; the mean of the batch means would be 500
    assert status.mean_ms == 180.0
    assert status.state == "met"
    assert status.batches == 2 and status.rows == 1000


def test_window_forgets_measurements_older_than_t():
    qos = QoSManager([make_constraint("latency_1", "500ms", over="5s")])
    qos.observe(batch(0, 0.0, rows=10, mean_ms=2000.0))  # commits at 0.1 s
    assert qos.status("latency_1").state == "violated"
    qos.observe(batch(1, 4.0, rows=10, mean_ms=100.0))  # commits at 4.1: batch 0 is still within 5 s
    assert qos.status("latency_1").mean_ms == 1050.0
    qos.observe(batch(2, 5.5, rows=10, mean_ms=100.0))  # commits at 5.6: batch 0 (0.1) has left
    status = qos.status("latency_1")
    assert status.batches == 2 and status.mean_ms == 100.0 and status.state == "met"


def test_p95_bound_can_be_violated_while_the_mean_holds():
    qos = QoSManager([make_constraint("latency_1", "500ms", over="10s", p95="800ms")])
    qos.observe(batch(0, 0.0, rows=10, mean_ms=300.0, p95_ms=900.0))
    status = qos.status("latency_1")
    assert status.mean_ms == 300.0 and status.p95_ms == 900.0
    assert status.state == "violated"


def test_unknown_before_any_measurement_and_empty_batches_do_not_count():
    qos = QoSManager([make_constraint("latency_1", "500ms")])
    assert qos.status("latency_1").state == "unknown"
    qos.observe(batch(0, 0.0, rows=0, mean_ms=0.0))
    assert qos.status("latency_1").state == "unknown"


def test_flush_rule_waits_until_old_measurements_left_every_window():
    qos = QoSManager([make_constraint("a", "1s", over="3s"), make_constraint("b", "1s", over="6s")])
    for i in range(4):  # batches 0..3, one a second
        for name in ("a", "b"):
            qos.observe(batch(i, float(i), rows=10, mean_ms=100.0, name=name))
    assert not qos.flushed(after_batch=3)  # the change came after batch 3
    t = 4.0
    flushed_at = None
    for i in range(4, 20):
        for name in ("a", "b"):
            qos.observe(batch(i, t, rows=10, mean_ms=100.0, name=name))
        if qos.flushed(after_batch=3):
            flushed_at = t
            break
        t += 1.0
    # batch 3 committed at 3.1; b's 6 s window holds it until a batch commits later than 9.1
    # (the batch of 9.0 commits at 9.1 exactly, the one of 10.0 at 10.1)
    assert flushed_at == 10.0
    assert all(s.batch_id > 3 for s in qos.window("b"))


@given(st.lists(st.tuples(st.integers(1, 10_000), st.floats(1.0, 5000.0)), min_size=1, max_size=30))
def test_eq1_is_the_mean_over_records(batches):
    qos = QoSManager([make_constraint("latency_1", "1s", over="1000s")])
    for i, (rows, mean) in enumerate(batches):
        qos.observe(batch(i, float(i), rows=rows, mean_ms=mean))
    records = [mean for rows, mean in batches for _ in range(rows)]
    assert qos.status("latency_1").mean_ms == pytest.approx(sum(records) / len(records), rel=1e-6, abs=0.01)


def test_constraint_validation_names_the_path_problem():
    from sluice.errors import PipelineError

    graph = constrained_graph()
    graph.constraints.append(make_constraint("bad", "1s", path=("work", "source_1")))
    with pytest.raises(PipelineError, match="no path leads from 'work' to 'source_1'"):
        graph.validate()
    graph.constraints[-1] = make_constraint("bad", "1s", path=("nowhere", "work"))
    with pytest.raises(PipelineError, match="'nowhere' is not an operator"):
        graph.validate()
