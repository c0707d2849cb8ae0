"""A changed pipeline on an existing checkpoint, on local Spark (issue 12, item 4).

Each case runs a pipeline over a first file, then a changed pipeline over a second one with
the same checkpoint. A compatible change continues with exact results (state carried over,
counted against the input); any other stops before running anything with one
PipelineChangedError naming the operator and what changed: no new batch, state untouched,
nothing written to a sink. ``reset_state`` is the way out.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

import sluice
from sluice import agg, sinks, sources
from sluice import windows as W
from sluice.errors import PipelineChangedError
from sluice.runtime.sinks import clear_memory, memory_batches

pytestmark = [pytest.mark.spark, pytest.mark.slow]

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
KEYS = ["a", "b", "c"]


def records(first: int, n: int) -> list[dict]:
    """Record i: key a/b/c, another key g, values v and w, event time i seconds."""
    return [
        {"id": i, "k": KEYS[i % 3], "g": f"g{i % 2}", "v": i, "w": 2 * i, "ts": (EPOCH + timedelta(seconds=i)).isoformat()}
        for i in range(first, first + n)
    ]


def add_file(inbox, name: str, rows: list[dict]) -> None:
    tmp = inbox / f".{name}.tmp"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    os.rename(tmp, inbox / name)


FIRST, SECOND = records(0, 30), records(30, 30)  # event times 0..29 s, then 30..59 s


@pytest.fixture
def inbox(tmp_path):
    path = tmp_path / "inbox"
    path.mkdir()
    add_file(path, "1.json", FIRST)
    return path


def source(p, inbox):
    return p.source(sources.directory(str(inbox), event_time="ts"), name="events")


def run(p, checkpoint, spark, rows: int, **options):
    """Run until ``rows`` new records have gone through a batch."""
    seen = []
    return p.run(
        checkpoint, spark=spark, on_batch=lambda m: seen.append(m.rows_in), stop_when=lambda ex: sum(seen) >= rows, **options
    )


def last_per_key(sink: str, key: str = "k") -> dict:
    out = {}
    for b in sorted(memory_batches(sink)):
        for row in memory_batches(sink)[b].to_pylist():
            out[row[key]] = row
    return out


def snapshot(checkpoint: str) -> dict:
    """Every file under the checkpoint's state and batch records, with its size."""
    out = {}
    for sub in ("state", "batches", "plans"):
        for root, _, files in os.walk(os.path.join(checkpoint, sub)):
            for f in files:
                out[os.path.join(root, f)] = os.path.getsize(os.path.join(root, f))
    return out


def counts(rows: list[dict], key: str = "k") -> dict:
    return dict(Counter(r[key] for r in rows))


# ---- one pipeline per case: `changed=False` is the pipeline the checkpoint was written by ----


def counting(inbox, sink, aggregates=None, key="k", before=None, name=None):
    p = sluice.Pipeline("changes")
    s = source(p, inbox)
    if before is not None:
        s = before(s)
    s.key_by(key).aggregate(name=name, **(aggregates or {"n": agg.count()})).sink(sinks.memory(sink))
    return p


def windowed(inbox, sink, window):
    p = sluice.Pipeline("changes")
    source(p, inbox).key_by("k").window(window).aggregate(n=agg.count()).sink(sinks.memory(sink))
    return p


def first_run(spark, tmp_path, build):
    clear_memory()
    checkpoint = str(tmp_path / "ckpt")
    run(build(), checkpoint, spark, len(FIRST))
    return checkpoint


def assert_stops(spark, tmp_path, inbox, build, changed, *phrases):
    """The changed pipeline stops with one message naming the operator and the change;
    nothing ran and the checkpoint is as it was. Returns the error."""
    checkpoint = first_run(spark, tmp_path, build)
    before, emitted = snapshot(checkpoint), {n: dict(memory_batches(n)) for n in ("out", "out2")}
    add_file(inbox, "2.json", SECOND)
    with pytest.raises(PipelineChangedError) as caught:
        run(changed(), checkpoint, spark, len(SECOND))
    message = str(caught.value)
    for phrase in phrases:
        assert phrase in message, message
    assert "nothing was run" in message and "reset_state=" in message and "--reset-state" in message
    assert "Traceback" not in message and "py4j" not in message.lower()
    assert snapshot(checkpoint) == before  # no new batch, state untouched
    assert {n: dict(memory_batches(n)) for n in ("out", "out2")} == emitted
    return checkpoint, caught.value


# ---- changes the state cannot follow: one clear error -------------------------------------


def test_renamed_aggregate_stops(spark, tmp_path, inbox):
    old = counting(inbox, "out")
    op_id = next(op.id for op in old.graph.operators if op.kind == "aggregate")
    assert_stops(
        spark,
        tmp_path,
        inbox,
        lambda: counting(inbox, "out"),
        lambda: counting(inbox, "out", {"m": agg.count()}),
        op_id,
        "aggregate 'n' was renamed to 'm' (count(*))",
    )


@pytest.mark.parametrize("name", ["counts", None], ids=["named", "unnamed"])
def test_changed_key_stops(spark, tmp_path, inbox, name):
    old_id = next(op.id for op in counting(inbox, "out", name=name).graph.operators if op.kind == "aggregate")
    assert_stops(
        spark,
        tmp_path,
        inbox,
        lambda: counting(inbox, "out", name=name),
        lambda: counting(inbox, "out", key="g", name=name),
        f"aggregate {old_id!r}",
        "key changed from (k string) to (g string)",
    )


def test_changed_aggregate_column_stops(spark, tmp_path, inbox):
    assert_stops(
        spark,
        tmp_path,
        inbox,
        lambda: counting(inbox, "out", {"total": agg.sum("v")}),
        lambda: counting(inbox, "out", {"total": agg.sum("w")}),
        "aggregate 'total' changed from sum(v int64) to sum(w int64)",
    )


def test_changed_aggregate_function_stops(spark, tmp_path, inbox):
    assert_stops(
        spark,
        tmp_path,
        inbox,
        lambda: counting(inbox, "out", {"total": agg.sum("v")}),
        lambda: counting(inbox, "out", {"total": agg.max("v")}),
        "aggregate 'total' changed from sum(v int64) to max(v int64)",
    )


@pytest.mark.parametrize(
    "old, new, was, now",
    [
        (W.tumbling("10s"), W.tumbling("20s"), "tumbling(10s)", "tumbling(20s)"),
        (W.sliding("20s", "10s"), W.sliding("20s", "5s"), "sliding(20s,10s)", "sliding(20s,5s)"),
        (W.tumbling("10s"), W.session("10s"), "tumbling(10s)", "session(10s)"),
    ],
    ids=["size", "slide", "type"],
)
def test_changed_window_stops(spark, tmp_path, inbox, old, new, was, now):
    old_op = next(op for op in windowed(inbox, "out", old).graph.operators if op.kind == "window")
    _, error = assert_stops(
        spark,
        tmp_path,
        inbox,
        lambda: windowed(inbox, "out", old),
        lambda: windowed(inbox, "out", new),
        old_op.id,
        "window changed from",
    )
    assert f"[{was} on event time ts" in str(error) and f"to [{now} on event time ts" in str(error)


def dedupe(key, rows, state):
    """A stateful operator to put in front of an aggregate: passes rows through."""
    state.update((state.value or 0) + rows.num_rows)
    return rows


def test_stateful_operator_added_before_stops(spark, tmp_path, inbox):
    old_id = next(op.id for op in counting(inbox, "out").graph.operators if op.kind == "aggregate")

    def with_process_before(s):
        return s.key_by("k").process(dedupe, schema=s.schema)

    assert_stops(
        spark,
        tmp_path,
        inbox,
        lambda: counting(inbox, "out"),
        lambda: counting(inbox, "out", before=with_process_before),
        f"aggregate {old_id!r} by k string (n=count(*))",
        "it is not in this pipeline",
    )


def test_added_source_stops(spark, tmp_path, inbox):
    other = tmp_path / "other"
    other.mkdir()
    add_file(other, "1.json", records(1000, 3))

    def two_sources():
        p = sluice.Pipeline("changes")
        more = p.source(sources.directory(str(other), event_time="ts"), name="more")
        source(p, inbox).union(more).key_by("k").aggregate(n=agg.count()).sink(sinks.memory("out"))
        return p

    checkpoint = first_run(spark, tmp_path, lambda: counting(inbox, "out"))
    before, emitted = snapshot(checkpoint), dict(memory_batches("out"))
    with pytest.raises(PipelineChangedError) as caught:
        run(two_sources(), checkpoint, spark, 3)
    message = str(caught.value)
    assert "sources changed" in message and "holds the offsets of DirectorySource 'events', the pipeline reads" in message
    assert "DirectorySource 'more'" in message
    assert "Nothing was run" in message and "new checkpoint" in message
    assert snapshot(checkpoint) == before and dict(memory_batches("out")) == emitted


def test_reset_state_drops_that_operator_only_and_continues(spark, tmp_path, inbox):
    checkpoint, error = assert_stops(
        spark,
        tmp_path,
        inbox,
        lambda: counting(inbox, "out", name="counts"),
        lambda: counting(inbox, "out", {"m": agg.count()}, name="counts"),
        "aggregate 'counts'",
        "renamed to 'm'",
    )
    assert "reset_state=['counts']" in str(error) and "--reset-state counts" in str(error)
    with pytest.raises(PipelineChangedError, match=r"reset_state names \['nope'\]"):
        run(counting(inbox, "out", {"m": agg.count()}, name="counts"), checkpoint, spark, 1, reset_state=["nope"])
    result = run(
        counting(inbox, "out", {"m": agg.count()}, name="counts"), checkpoint, spark, len(SECOND), reset_state=["counts"]
    )
    assert result.rows_in == len(SECOND)
    assert {k: r["m"] for k, r in last_per_key("out").items()} == counts(SECOND)  # started empty


# ---- compatible changes: continue with exact results ----------------------------------------


def test_stateless_operators_added_before_an_aggregate_continue(spark, tmp_path, inbox):
    checkpoint = first_run(spark, tmp_path, lambda: counting(inbox, "out", {"n": agg.count(), "total": agg.sum("v")}))
    add_file(inbox, "2.json", SECOND)

    def filtered(s):  # a native filter and a fused Python chain the first run did not have
        return s.filter("v >= 0").filter(lambda r: r["v"] % 4 != 0).map(lambda r: dict(r, w=r["w"] + 1))

    changed = counting(inbox, "out", {"n": agg.count(), "total": agg.sum("v")}, before=filtered)
    run(changed, checkpoint, spark, len(SECOND))
    kept = FIRST + [r for r in SECOND if r["v"] % 4 != 0]
    got = last_per_key("out")
    assert {k: r["n"] for k, r in got.items()} == counts(kept)
    assert {k: r["total"] for k, r in got.items()} == {k: sum(r["v"] for r in kept if r["k"] == k) for k in KEYS}


def test_unrelated_aggregate_defined_before_an_existing_one_continues(spark, tmp_path, inbox):
    """The new aggregate (another key, same source) comes first in the code: ids numbered in
    order of definition used to hand it the existing aggregate's state."""
    checkpoint = first_run(spark, tmp_path, lambda: counting(inbox, "out"))
    add_file(inbox, "2.json", SECOND)

    def other_aggregate_first(s):
        s.key_by("g").aggregate(total=agg.sum("v")).sink(sinks.memory("out2"))
        return s

    run(counting(inbox, "out", before=other_aggregate_first), checkpoint, spark, len(SECOND))
    assert {k: r["n"] for k, r in last_per_key("out").items()} == counts(FIRST + SECOND)
    assert {g: r["total"] for g, r in last_per_key("out2", "g").items()} == {
        g: sum(r["v"] for r in SECOND if r["g"] == g) for g in ("g0", "g1")
    }  # new: started empty


def test_stateful_operator_added_after_continues(spark, tmp_path, inbox):
    checkpoint = first_run(spark, tmp_path, lambda: counting(inbox, "out"))
    add_file(inbox, "2.json", SECOND)
    p = sluice.Pipeline("changes")
    counted = source(p, inbox).key_by("k").aggregate(n=agg.count())
    counted.sink(sinks.memory("out"))
    counted.key_by("k").aggregate(updates=agg.count(), top=agg.max("n")).sink(sinks.memory("out2"))
    run(p, checkpoint, spark, len(SECOND))
    assert {k: r["n"] for k, r in last_per_key("out").items()} == counts(FIRST + SECOND)  # carried over
    # the new operator started empty: it saw the running counts of the second run only
    second_rows = [r for b, t in memory_batches("out").items() for r in t.to_pylist() if b >= min(memory_batches("out2"))]
    assert {k: (r["updates"], r["top"]) for k, r in last_per_key("out2").items()} == {
        k: (sum(1 for r in second_rows if r["k"] == k), counts(FIRST + SECOND)[k]) for k in KEYS
    }


def test_filter_added_before_a_window_keeps_its_open_windows(spark, tmp_path, inbox):
    checkpoint = first_run(spark, tmp_path, lambda: windowed(inbox, "out", W.tumbling("20s")))
    add_file(inbox, "2.json", SECOND)
    p = sluice.Pipeline("changes")
    (
        source(p, inbox)
        .filter(lambda r: r["v"] >= 0)
        .key_by("k")
        .window(W.tumbling("20s"))
        .aggregate(n=agg.count())
        .sink(sinks.memory("out"))
    )
    seen = []

    def on_batch(m):  # once the second file is in, one more record moves the watermark past it
        seen.append(m.rows_in)
        if sum(seen) == len(SECOND) and m.rows_in:
            add_file(inbox, "3.json", records(100, 1))

    # the third file's record (100 s) moves the watermark past [40, 60); a batch without new
    # input follows to close it (docs/event-time.md), and the run stops after that batch
    p.run(
        checkpoint, spark=spark, on_batch=on_batch, duration=120, stop_when=lambda ex: sum(seen) > len(SECOND) and seen[-1] == 0
    )
    got = {(r["k"], r["window_start"].timestamp()): r["n"] for t in memory_batches("out").values() for r in t.to_pylist()}
    # every window of the first two files closed, [20, 40) with records of both runs
    closed = [r for r in FIRST + SECOND if r["v"] < 60]
    want = Counter((r["k"], (EPOCH + timedelta(seconds=r["v"] // 20 * 20)).timestamp()) for r in closed)
    assert got == dict(want)


def test_checkpoint_without_a_pipeline_record_is_accepted_and_recorded(spark, tmp_path, inbox):
    """A checkpoint written before pipeline records kept state under ids numbered in order of
    definition (here 'aggregate_1'); it is read under those ids and recorded."""
    checkpoint = first_run(spark, tmp_path, lambda: counting(inbox, "out", name="aggregate_1"))
    os.remove(os.path.join(checkpoint, "pipeline.json"))  # as the code before this record left it
    add_file(inbox, "2.json", SECOND)
    run(counting(inbox, "out"), checkpoint, spark, len(SECOND))
    assert {k: r["n"] for k, r in last_per_key("out").items()} == counts(FIRST + SECOND)
    record = json.load(open(os.path.join(checkpoint, "pipeline.json")))
    assert list(record["operators"]) == ["aggregate_1"] and sorted(os.listdir(os.path.join(checkpoint, "state"))) == [
        "aggregate_1"
    ]
    # and a later change is checked against the record
    with pytest.raises(PipelineChangedError, match="aggregate 'n' was renamed to 'm'"):
        run(counting(inbox, "out", {"m": agg.count()}), checkpoint, spark, 1)


def test_cli_reports_the_change_as_one_error_and_takes_reset_state(spark, tmp_path, inbox, capsys):
    from sluice.cli import main

    checkpoint = first_run(spark, tmp_path, lambda: counting(inbox, "out", name="counts"))
    add_file(inbox, "2.json", SECOND)
    path = tmp_path / "changed.py"
    path.write_text(
        "import sluice\nfrom sluice import agg, sinks, sources\n"
        "pipeline = sluice.Pipeline('changes')\n"
        f"s = pipeline.source(sources.directory({str(inbox)!r}, event_time='ts'), name='events')\n"
        "s.key_by('k').aggregate(name='counts', m=agg.count()).sink(sinks.memory('out'))\n"
    )
    assert main(["run", str(path), "--checkpoint", checkpoint, "--quiet", "--duration", "30"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("sluice: error: the pipeline changed") and err.count("sluice: error") == 1
    assert "aggregate 'n' was renamed to 'm'" in err and "--reset-state counts" in err and "Traceback" not in err
    from sluice.cli import build_parser

    args = build_parser().parse_args(["run", str(path), "--reset-state", "counts", "--reset-state", "other"])
    assert args.reset_state == ["counts", "other"]  # handed to Pipeline.run(reset_state=...)
