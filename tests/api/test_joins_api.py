"""The join operator in the job graph (pure: no Spark): its schema and validation errors, and
pipeline-change detection (a changed window, interval, join type or side columns is a state
change a restart refuses)."""

from __future__ import annotations

import pytest

from sluice import Pipeline, sinks, sources
from sluice import windows as W
from sluice.errors import PipelineError, SchemaError
from sluice.graph.identity import differences, state_record


def pipeline(**join):
    p = Pipeline("j")
    fields = {"k": sources.Keys(5, prefix="k"), "x": sources.Uniform(0, 1), "ts": sources.EventTime(jitter=0.1)}
    left = p.source(sources.generator(fields=fields, total_rows=10), name="left").key_by("k")
    right = p.source(sources.generator(fields=fields, total_rows=10), name="right").key_by("k")
    out = left.join(right, **join)
    out.sink(sinks.memory("j_api"))
    p.graph.validate()
    return p, out.op


def test_schema_with_suffixes_and_window_columns():
    _, op = pipeline(window=W.tumbling("1m"), how="outer")
    assert op.schema.names == ["k", "window_start", "window_end", "x_left", "ts_left", "x_right", "ts_right"]
    assert op.id.startswith("join_")  # an identity of its own, derived from both sides


@pytest.mark.parametrize(
    "change, words",
    [
        ({"window": W.tumbling("2m"), "how": "outer"}, "window tumbling(2m)"),
        ({"window": W.tumbling("1m"), "how": "inner"}, "inner join"),
        ({"between": ("-5m", "+1m")}, "between(-5m,+1m)"),
    ],
)
def test_changed_join_is_a_state_change(change, words):
    p, op = pipeline(window=W.tumbling("1m"), how="outer")
    q, op2 = pipeline(**change)
    old, new = state_record(p.graph, op), state_record(q.graph, op2)
    found = differences(old, new)
    assert found and "join changed" in found[0] and words in found[0]
    assert differences(old, state_record(pipeline(window=W.tumbling("1m"), how="outer")[0].graph, op)) == []


def test_bad_joins_are_refused_at_the_users_line():
    with pytest.raises(PipelineError, match="how must be"):
        pipeline(window=W.tumbling("1m"), how="cross")
    with pytest.raises(PipelineError, match="exactly one"):
        pipeline(window=W.tumbling("1m"), between=(0, 1))
    with pytest.raises(PipelineError, match="lower bound above"):
        pipeline(between=("+1m", "-1m"))
    with pytest.raises(SchemaError, match="appear twice"):
        pipeline(window=W.tumbling("1m"), suffixes=("", ""))
