"""The autopilot on Spark: a job with goals and no policies named runs it, it does not thrash
on a steady input, its balancing and collocation never undo each other, and its changes keep
the output exactly once."""

from __future__ import annotations

from collections import Counter

import pytest

import sluice
from sluice import agg, sinks, sources
from sluice.control import read_decisions

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore::sluice.control.EscalationWarning")]

STRUCTURAL = ("partitions", "routing", "chains", "threads", "executors")


def _structural(decisions):
    return [r for r in decisions if r["type"] == "decision" and r["action"]["kind"] in STRUCTURAL]


def _no_reversal(changes):
    """No (kind, target) goes back to a value it had before a later change of it, except by
    the arbiter's own undo of a change that measured worse."""
    seen: dict[tuple, list] = {}
    for r in changes:
        if r["action"]["reason"].startswith("undo "):
            continue
        a = r["action"]
        targets = a["value"] if a["kind"] == "routing" and isinstance(a["value"], dict) else {a["target"]: a["value"]}
        for target, value in targets.items():
            history = seen.setdefault((a["kind"], target), [])
            assert repr(value) not in history[:-1] if history else True, f"{a['kind']} of {target} went back: {r}"
            history.append(repr(value))


def test_a_steady_input_runs_the_autopilot_without_thrashing_and_exactly_once(spark, tmp_path):
    rows = 60_000
    p = sluice.Pipeline("steady_goals", partitions=2, max_parallelism=16)
    events = p.source(
        sources.generator(
            fields={"k": sources.Keys(200, distribution="zipf", skew=1.1), "v": sources.Normal(1, 1)},
            rate=2500.0,
            total_rows=rows,
            seed=3,
        ),
        name="events",
    )
    latest: dict = {}

    def keep(batch_id, table):
        for row in table.to_pylist():
            latest[row["k"]] = row["n"]

    events.key_by("k").aggregate(n=agg.count(), name="per_key").sink(sinks.callback(keep), name="out")
    p.goals(latency="5s", over="5s")
    checkpoint = str(tmp_path / "checkpoint")
    result = p.run(checkpoint, spark=spark, duration=45)
    decisions = read_decisions(checkpoint)
    described = [r for r in decisions if r["type"] == "decision"]
    assert described and all(r["policy"] == "autopilot" for r in described)  # no policy named: the autopilot ran
    changes = _structural(decisions)
    # a steady input: at most a couple of changes (settling), none taken back
    assert len(changes) <= 3, changes
    _no_reversal(changes)
    # exactly once: every admitted row counted once
    admitted = sum(m.rows_in for m in result.metrics)
    assert sum(latest.values()) == admitted
    spec = sources.generator(
        fields={"k": sources.Keys(200, distribution="zipf", skew=1.1), "v": sources.Normal(1, 1)},
        rate=2500.0,
        total_rows=rows,
        seed=3,
    )
    import pyarrow as pa

    table = pa.Table.from_batches(spec.generate(0, admitted, 0))
    assert latest == dict(Counter(table.column("k").to_pylist()))


def test_balancing_and_collocation_never_undo_each_other(spark, tmp_path):
    p = sluice.Pipeline("two_keys_goals", partitions=2, max_parallelism=8)
    readings = p.source(
        sources.generator(
            fields={"k": sources.Keys(40, distribution="zipf", skew=1.3), "v": sources.Normal(1, 1)},
            rate=1500.0,
            total_rows=45_000,
            seed=7,
        ),
        name="readings",
    )
    per_key = readings.key_by("k").aggregate(n=agg.count(), name="per_key")
    latest: dict = {}

    def keep(batch_id, table):
        for row in table.to_pylist():
            latest[row["g"]] = row["updates"]

    (
        per_key.with_columns(g="k div 5")
        .key_by("g")
        .aggregate(updates=agg.count(), name="per_group")
        .sink(sinks.callback(keep), name="out")
    )
    p.goals(latency="10s", over="5s")
    checkpoint = str(tmp_path / "checkpoint")
    p.run(checkpoint, spark=spark, duration=50)
    decisions = read_decisions(checkpoint)
    routing = [r for r in _structural(decisions) if r["action"]["kind"] == "routing"]
    assert routing, "the skewed keys must make the autopilot re-route a stage"
    _no_reversal(routing)
    # one owner per stage: balancing never re-routes a stage collocation placed, nor the reverse
    owners: dict[str, set] = {}
    for r in routing:
        reason = r["action"]["reason"]
        member = "undo" if reason.startswith("undo ") else reason.split(":", 1)[0]
        value = r["action"]["value"]
        for stage in value if isinstance(value, dict) else {r["action"]["target"]: None}:
            owners.setdefault(stage, set()).add(member)
    assert all(len(members - {"undo"}) <= 1 for members in owners.values()), owners
    held = [r for r in decisions if r["type"] == "held"]
    assert all(r["policy"] == "autopilot" and r["reason"].startswith("held: ") for r in held)
    assert latest  # the job ran through
