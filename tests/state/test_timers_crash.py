"""Timers survive a crash and a rescale: the driver of a pipeline with event-time and
processing-time timers (tests/pipelines/timers_crash.py) is SIGKILLed in the middle of a batch
and again between a timer operator's state write and its commit, in the first batch after a
rescale from 2 to 3 partitions with a new routing table; restarted, every event-time alert
equals the reference (``silence_reference`` of tests/state/test_process_timers.py) over the
batches and watermarks as they ran, and every processing-time timer fired exactly once, in
the batch after the one that registered it."""

from __future__ import annotations

import glob
import os

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from tests import crash_harness as harness
from tests.crash_harness import done_batches, kill_when, started_batches, state_written
from tests.pipelines import timers_crash
from tests.state.test_process_timers import silence_reference

from sluice.core.checkpoint import Checkpoint
from sluice.plan.physical import initial_plan
from sluice.runtime.planlog import PlanLog

pytestmark = pytest.mark.spark

ROWS, PER_BATCH = 8000, 1000
TS = pa.timestamp("us", tz="UTC")
RESCALE_AT = 3  # the first batch with 3 partitions and a new routing table


def tables(out: str, sink: str) -> dict[int, pa.Table]:
    """batch id -> the rows a file sink committed in that batch."""
    per_batch = {}
    for d in sorted(glob.glob(os.path.join(out, sink, "batch=*"))):
        assert os.path.exists(os.path.join(d, "_SUCCESS")), f"incomplete batch directory {d}"
        files = sorted(f for f in glob.glob(os.path.join(d, "part-*")) if os.path.getsize(f) > 0)
        if files:
            per_batch[int(d.rsplit("=", 1)[1])] = ds.dataset(files, format="parquet").to_table()
    return per_batch


def rescale_from(checkpoint: str, batch: int) -> None:
    """Log the plans before the first run: from ``batch`` on both timer operators run on 3
    partitions, their key groups dealt round-robin backwards."""
    graph = timers_crash.build(os.devnull).graph
    graph.validate()
    first = initial_plan(graph, 2)
    log = PlanLog(checkpoint)
    log.write(first)
    moved = first
    for op_id, stage in first.keyed.items():
        routing = [(len(stage.routing) - 1 - kg) % 3 for kg in range(len(stage.routing))]
        moved = moved.with_routing(batch, op_id, routing, partitions=3)
    log.write(moved)


@pytest.mark.slow
def test_timers_survive_sigkill_and_rescaling(tmp_path):
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    rescale_from(checkpoint, RESCALE_AT)
    env = {"SLUICE_TEST_OUT": out, "SLUICE_TEST_ROWS": str(ROWS), "SLUICE_TEST_PER_BATCH": str(PER_BATCH)}
    # 1. in the middle of batch 2: timers registered by batches 0-1 are in state
    proc = harness.launch(timers_crash.__file__, checkpoint, env)
    kill_when(proc, lambda: 2 in started_batches(checkpoint) and 2 not in done_batches(checkpoint))
    # 2. in the first batch after the rescale, once a timer operator has written state, before the commit
    proc = harness.launch(timers_crash.__file__, checkpoint, env)
    kill_when(proc, lambda: state_written(checkpoint, RESCALE_AT) and RESCALE_AT not in done_batches(checkpoint))
    # 3. restart and let it finish
    proc = harness.launch(timers_crash.__file__, checkpoint, env)
    assert proc.wait(timeout=400) == 0
    assert PlanLog(checkpoint).plan_for(RESCALE_AT).keyed["silence"].partitions == 3

    ids = sorted(done_batches(checkpoint))
    assert ids == list(range(len(ids)))
    marks = [Checkpoint(checkpoint).read_json(Checkpoint.batch_record(b, "done"))["watermark"] for b in ids]
    raw, alerts, rings = tables(out, "raw"), tables(out, "alerts"), tables(out, "rings")
    empty = raw[0].slice(0, 0)
    # the reference counts in microseconds, as the timers do (the files may hold another unit)
    batches = [t.set_column(t.schema.get_field_index("ts"), "ts", t["ts"].cast(TS)) for t in (raw.get(b, empty) for b in ids)]
    assert sum(t.num_rows for t in batches) == ROWS

    # event time: every alert in the batch the reference fires it in, none twice, none left
    want, pending = silence_reference(batches, marks, timers_crash.QUIET_US)
    got = [sorted((r["k"], r["silent_at"]) for r in alerts[b].to_pylist()) if b in alerts else [] for b in ids]
    assert got == want
    assert sum(len(w) for w in want) > 500 and not pending  # the end of input fired the rest

    # processing time: each meter's timer fired once, in the batch after its first record's
    first_seen: dict[str, int] = {}
    for b, rows in zip(ids, batches):
        for k in rows["k"].to_pylist():
            first_seen.setdefault(k, b)
    rang = sorted((r["k"], b) for b, t in rings.items() for r in t.to_pylist())
    assert len(rang) == len({k for k, _ in rang}), "a processing-time timer fired twice"
    assert rang == sorted((k, ids[ids.index(b) + 1]) for k, b in first_seen.items())
    assert {b for _, b in rang} >= {RESCALE_AT, RESCALE_AT + 1}  # fired around the kill and the rescale
