"""Failure must not look like success: an operator that dead-letters a whole batch stops the
job (a bug, not bad data) before the batch commits, so the fixed operator replays it; a map
that leaves out a declared field sends the record to dead letters instead of writing NULLs;
the totals of dead letters and late records reach the JobResult and ``sluice run``'s summary."""

from __future__ import annotations

import os
import re

import pytest

import sluice
from crash_harness import done_batches
from sluice import sinks, sources
from sluice.cli import main as cli_main
from sluice.core.metrics import OperatorProgress, StageProgress
from sluice.errors import ConfigError, DeadLetterBudgetExceeded
from sluice.runtime.batch import metrics as metrics_log
from sluice.runtime.side_outputs import DEAD_LETTER, read_side_output
from sluice.runtime.sinks import clear_memory, memory_table

ROWS, PER_BATCH = 2000, 1000


def numbers_pipeline(fn, out: str) -> sluice.Pipeline:
    p = sluice.Pipeline("budget")
    numbers = p.source(
        sources.generator(fields={"i": sources.Sequence()}, total_rows=ROWS, max_rows_per_batch=PER_BATCH), name="numbers"
    )
    numbers.map(fn, schema={"i": "int64", "twice": "int64"}, name="double").sink(sinks.memory(out))
    return p


@pytest.mark.spark
def test_a_map_that_fails_on_every_record_stops_the_job_and_the_fixed_map_replays_the_batch(spark, tmp_path):
    checkpoint = str(tmp_path / "ck")
    clear_memory("budget_out")
    broken = numbers_pipeline(lambda r: 2 * r["i"], "budget_out")  # returns an int, not a dict
    with pytest.raises(DeadLetterBudgetExceeded) as failure:
        broken.run(checkpoint, spark=spark)
    message = str(failure.value)
    assert "operator 'double'" in message and "1,000 of the 1,000 records" in message and "batch 0" in message
    assert "map must return a dict, got int" in message and "test_dead_letter_budget.py" in message
    dead = read_side_output(checkpoint, DEAD_LETTER, 0)
    assert sorted(r["record"] for r in dead) == sorted(f'{{"i": {i}}}' for i in range(PER_BATCH))
    assert done_batches(checkpoint) == set()  # batch 0 not committed

    clear_memory("budget_out")
    fixed = numbers_pipeline(lambda r: {"i": r["i"], "twice": 2 * r["i"]}, "budget_out")
    result = fixed.run(checkpoint, spark=spark)  # replays batch 0 with the fix, then goes on
    out = memory_table("budget_out").to_pylist()
    assert sorted(r["i"] for r in out) == list(range(ROWS)) and all(r["twice"] == 2 * r["i"] for r in out)
    assert result.dead_letters == 0 and read_side_output(checkpoint, DEAD_LETTER) == []


@pytest.mark.spark
def test_missing_declared_fields_are_dead_letters_and_a_budget_below_them_stops(spark, tmp_path):
    def drop_twice_of_tenths(r):
        return {"i": r["i"]} if r["i"] % 10 == 0 else {"i": r["i"], "twice": 2 * r["i"]}

    clear_memory("declared")
    checkpoint = str(tmp_path / "ck")
    result = numbers_pipeline(drop_twice_of_tenths, "declared").run(checkpoint, spark=spark)
    out = memory_table("declared").to_pylist()
    assert sorted(r["i"] for r in out) == [i for i in range(ROWS) if i % 10] and None not in {r["twice"] for r in out}
    dead = read_side_output(checkpoint, DEAD_LETTER)
    assert sorted(int(r["record"][6:-1]) for r in dead) == list(range(0, ROWS, 10))
    assert all("lacks declared field(s) ['twice']" in r["error"] and r["operator"] == "double" for r in dead)
    assert result.dead_letters == ROWS // 10 == sum(m.dead_letters for m in metrics_log.read(checkpoint))

    clear_memory("declared")
    with pytest.raises(DeadLetterBudgetExceeded, match="100 of the 1,000 records .* budget of 5%"):
        numbers_pipeline(drop_twice_of_tenths, "declared").run(str(tmp_path / "ck2"), spark=spark, dead_letter_budget=0.05)
    with pytest.raises(ConfigError, match="dead_letter_budget"):
        sluice.Pipeline("x").dead_letter(budget=0)


@pytest.mark.spark
def test_sluice_run_reports_dead_letters_and_exits_1_over_its_budget(spark, tmp_path, capsys):
    pipeline = os.path.join(os.path.dirname(__file__), "..", "pipelines", "half_declared.py")
    os.environ["SLUICE_TEST_OUT"] = str(tmp_path / "out")
    try:
        assert cli_main(["run", pipeline, "--checkpoint", str(tmp_path / "ck"), "--quiet"]) == 0
        summary = capsys.readouterr().out
        assert re.search(r"rows processed\s+2,000 ", summary) and re.search(r"dead letters\s+200 ", summary)
        assert re.search(r"late records\s+0\b", summary)
        code = cli_main(["run", pipeline, "--checkpoint", str(tmp_path / "ck2"), "--quiet", "--dead-letter-budget", "5%"])
        err = capsys.readouterr().err
        assert code == 1 and "sluice: error: operator 'double'" in err and "budget of 5%" in err
    finally:
        del os.environ["SLUICE_TEST_OUT"]


def test_the_budget_counts_each_operator_against_the_records_it_received():
    from sluice.runtime.dead_letters import check_budget

    p = sluice.Pipeline("pure")
    s = p.source(sources.generator(fields={"i": sources.Sequence()}), name="numbers")
    s.filter(lambda r: 1 / 0, name="broken").sink(sinks.memory("never"))

    def dead(n: int, operator: str = "broken") -> list[dict]:
        return [{"operator": operator, "error": "ZeroDivisionError: division by zero"}] * n

    per_op = {"broken": OperatorProgress(rows_in=400)}
    check_budget(p.graph, 0, dead(399), per_op, 1.0, "x")  # one record got through: not all
    check_budget(p.graph, 0, dead(99), {"broken": OperatorProgress(rows_in=99)}, 1.0, "x")  # too few to judge
    check_budget(p.graph, 0, dead(1000, "numbers"), per_op, 0.01, "x")  # a source's rejects are bad data
    check_budget(p.graph, 0, dead(19), per_op, 0.05, "x")
    with pytest.raises(DeadLetterBudgetExceeded, match="'broken' .* 400 of the 400 records .* ZeroDivisionError"):
        check_budget(p.graph, 7, dead(400), per_op, 1.0, "x")
    with pytest.raises(DeadLetterBudgetExceeded, match="20 of the 400 records it received in batch 3"):
        check_budget(p.graph, 3, dead(20), per_op, 0.05, "x")


def test_a_window_is_judged_by_the_records_its_combine_received_not_the_combined_rows():
    """A window combined in Python reports its own rows_in as combined rows (a few per key and
    pane); its dead letters are records. 300 bad records of 1,000 must not look like all of
    150 combined rows."""
    from sluice.runtime.dead_letters import check_budget

    p = sluice.Pipeline("windowed")
    s = p.source(sources.generator(fields={"k": sources.Keys(10), "v": sources.Normal(0, 1)}), name="numbers")
    s.key_by("k").window(sluice.windows.tumbling("10s"), time="processing").aggregate(n=sluice.agg.count()).sink(
        sinks.memory("o")
    )
    w = next(op for op in p.graph.operators if op.kind == "window")
    dead = [{"operator": w.name, "error": "ValueError: bad"}] * 300
    per_op = {w.id: OperatorProgress(rows_in=150, combine=StageProgress(rows_in=1000))}
    check_budget(p.graph, 0, dead, per_op, 1.0, "x")
    with pytest.raises(DeadLetterBudgetExceeded, match="300 of the 1,000 records"):
        check_budget(p.graph, 0, dead, per_op, 0.25, "x")
