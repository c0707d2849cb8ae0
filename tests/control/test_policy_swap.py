"""Replacing a running job's policies (control.swap): a `sluice control` request or a change
of the watched policies file is picked up between batches, takes effect from the next batch,
and is a decision in decisions.jsonl; a file that does not load changes nothing."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest
from tests.crash_harness import batch_rows

import sluice
from sluice import Alt, sinks, sources
from sluice.cli import main as sluice_cli
from sluice.control import Controller, Guards, read_decisions
from sluice.control.swap import REQUEST, PolicySwaps, request_policies
from sluice.errors import ConfigError
from sluice.plan.physical import initial_plan
from sluice.runtime.batch.metrics import BatchMetrics

TO_B = "policies:\n  - guards:\n      rules:\n        - {when: 'batch_id >= 0', use: {work: b}}\n"
TO_A = "policies:\n  - guards:\n      rules:\n        - {when: 'rows >= 0', use: {work: a}}\n"


def tag(label: str):
    def fn(batch: pa.RecordBatch) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays([batch.column("id"), pa.array([label] * batch.num_rows)], names=["id", "alt"])

    fn.__name__ = f"tag_{label}"
    return fn


def build(out: str, rows: int = 100, per_batch: int = 100) -> sluice.Pipeline:
    p = sluice.Pipeline("swap", partitions=1, max_parallelism=4)
    src = p.source(
        sources.generator(fields={"id": sources.Sequence()}, total_rows=rows, max_rows_per_batch=per_batch, seed=3), name="src"
    )
    src.map_batches(
        name="work",
        schema={"id": "int64", "alt": "string"},
        alternates={"a": Alt(tag("a"), value=1.0), "b": Alt(tag("b"), value=0.6)},
    ).sink(sinks.files(out, format="parquet"), name="out")
    return p


def metrics(batch_id: int) -> BatchMetrics:
    return BatchMetrics(batch_id=batch_id, plan_version=0, started_at=float(batch_id), duration_s=0.1, rows_in=10)


def controller(tmp_path, watch: str | None = None) -> tuple[Controller, object]:
    checkpoint = str(tmp_path / "ckpt")
    graph = build(str(tmp_path / "out")).graph
    graph.validate()
    return Controller(graph, [], checkpoint=checkpoint, swaps=PolicySwaps(checkpoint, watch=watch)), graph


def test_a_request_takes_effect_from_the_next_batch_and_is_logged(tmp_path):
    control, graph = controller(tmp_path)
    plan = initial_plan(graph, 1)
    assert control(metrics(0), plan) is None
    (tmp_path / "ckpt" / "control").mkdir(parents=True)
    (tmp_path / "ckpt" / REQUEST).write_text(TO_B)
    new = control(metrics(1), plan)
    assert new.version == 2 and new.alternates == {"work": "b"}
    swap, switch = [r for r in read_decisions(str(tmp_path / "ckpt")) if r["type"] == "decision"]
    assert swap["action"]["kind"] == "policies" and swap["batch_id"] == 1 and swap["previous"] == []
    assert swap["policies"][0]["rules"] == [{"when": "batch_id >= 0", "use": {"work": "b"}}]
    assert switch["action"] == {**switch["action"], "kind": "alternate", "target": "work", "value": "b"}
    assert not (tmp_path / "ckpt" / REQUEST).exists()  # claimed: kept as what was applied
    assert (tmp_path / "ckpt" / "control" / "policies.000000001.yaml").read_text() == TO_B


def test_a_changed_policies_file_is_loaded_again_and_a_bad_one_changes_nothing(tmp_path):
    watched = tmp_path / "policies.yaml"
    watched.write_text(TO_A)
    control, graph = controller(tmp_path, watch=str(watched))
    plan = initial_plan(graph, 1)
    assert control(metrics(0), plan) is None  # unchanged since the job started
    watched.write_text("policies:\n  - guards: {rules: [{when: 'nonsense >', use: {work: b}}]}\n")
    os.utime(watched, ns=(1, 1))  # a new mtime, whatever the clock's resolution
    assert control(metrics(1), plan) is None
    (rejected,) = [r for r in read_decisions(str(tmp_path / "ckpt")) if r["type"] == "rejected"]
    assert "not an expression" in rejected["reason"] and control.policies == []
    watched.write_text(TO_B)
    os.utime(watched, ns=(2, 2))
    assert control(metrics(2), plan).alternates == {"work": "b"}
    assert [type(p) for p in control.policies] == [Guards]


def test_a_request_is_checked_before_it_is_made(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("policies:\n  - no_such_policy: {}\n")
    with pytest.raises(ConfigError, match="unknown policy 'no_such_policy'"):
        request_policies(str(tmp_path), str(bad))
    good = tmp_path / "good.yaml"
    good.write_text(TO_B)
    with pytest.raises(ConfigError, match="holds no job"):
        request_policies(str(tmp_path / "nothing_here"), str(good))
    assert sluice_cli(["control", str(tmp_path), "--policies", str(bad)]) == 1


@pytest.mark.spark
def test_a_swap_while_running_takes_effect_from_the_next_batch(spark, tmp_path):
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "ckpt")
    policies = tmp_path / "to_b.yaml"
    policies.write_text(TO_B)
    asked = []

    def after(m):
        if m.batch_id == 1 and not asked:  # the command, as a user would type it, while the job runs
            asked.append(sluice_cli(["control", checkpoint, "--policies", str(policies)]))

    result = build(out, rows=500).run(checkpoint, spark=spark, on_batch=after)
    assert asked == [0]
    ran = {m.batch_id: m.alternates["work"] for m in result.metrics if m.rows_in}
    (swap,) = [r for r in read_decisions(checkpoint) if r["type"] == "decision" and r["action"]["kind"] == "policies"]
    picked = swap["batch_id"]  # the first batch that ended after the request
    assert picked == 2
    assert all(alt == "a" for b, alt in ran.items() if b <= picked)
    assert all(alt == "b" for b, alt in ran.items() if b > picked) and max(ran) > picked
    written = batch_rows(out, "")
    ids = sorted(dict(r)["id"] for rows_ in written.values() for r in rows_)
    assert ids == list(range(500))  # no batch lost to the swap
