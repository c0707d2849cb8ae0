"""`sluice check` validates a pipeline without Spark; `sluice run` and `sluice plan` run the same
check first; `--version`, `--help` and `sluice run`'s Spark options. Pure Python: each case
runs the real command in a child interpreter and asserts that it never imported pyspark."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HEADER = """
import sluice
from sluice import agg, sinks, sources, windows as W
pipeline = sluice.Pipeline("orders")
orders = pipeline.source(sources.generator(fields={"customer": sources.Keys(10), "amount": sources.Normal(20, 5),
                                                   "ts": sources.EventTime()}, rate=100), name="orders")
"""

# (case, the pipeline's body, what the error must say)
MISTAKES = [
    (
        "column typo",
        'orders.key_by("custmer").aggregate(n=agg.count()).sink(sinks.console())',
        ["key_by uses unknown column(s) ['custmer']", "available: ['customer', 'amount', 'ts']", "pipeline.py:7"],
    ),
    ("typo in SQL", 'orders.filter("amont > 0").sink(sinks.console())', ["unknown column(s) ['amont']", "pipeline.py:7"]),
    (
        "typo in an aggregate",
        'orders.key_by("customer").aggregate(total=agg.sum("amout")).sink(sinks.console())',
        ["aggregate 'total' uses unknown column(s) ['amout']"],
    ),
    (
        "flat_map without schema",
        'orders.flat_map(lambda r: [{"item": "a"}], name="items").key_by("item").aggregate(n=agg.count()).sink(sinks.console())',
        ["flat_map has no schema=", "schema is probably missing", "operator 'items'"],
    ),
    (
        "forgotten sink",
        'orders.sink(sinks.console()); orders.key_by("customer").aggregate(n=agg.count(), name="per_customer")',
        ["this stream goes nowhere", "operator 'per_customer'"],
    ),
    ("no sink at all", 'orders.filter("amount > 0")', ["the pipeline has no sink: nothing would be written (use .sink(...))"]),
    (
        "window without a column",
        'orders.key_by("customer").window(W.tumbling("1m"), time="when").aggregate(n=agg.count()).sink(sinks.console())',
        ["when"],
    ),
]


def write_pipeline(directory: Path, body: str, name: str = "pipeline.py") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(HEADER) + body + "\n")
    return path


def run_cli(*args: str) -> tuple[int, str, str]:
    """The real `sluice` command in a fresh interpreter: exit code, stdout, stderr; it fails the
    test if the command imported pyspark (nothing it checks needs a JVM)."""
    code = textwrap.dedent(f"""
        import sys
        from sluice.cli import main
        rc = main({list(args)!r})
        sys.stdout.flush()
        if "pyspark" in sys.modules:
            print("PYSPARK IMPORTED", file=sys.stderr)
            rc = 99
        sys.exit(rc)
    """)
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60)
    assert "PYSPARK IMPORTED" not in out.stderr, out.stderr
    return out.returncode, out.stdout, out.stderr


@pytest.mark.parametrize(("case", "body", "expected"), MISTAKES, ids=[m[0] for m in MISTAKES])
def test_check_names_each_mistake_with_exit_code_1(tmp_path, case, body, expected):
    path = write_pipeline(tmp_path, body)
    rc, out, err = run_cli("check", str(path))
    assert rc == 1, (out, err)
    assert err.startswith("sluice: error: ") and "Traceback" not in err
    for text in expected:
        assert text in err, (text, err)


def test_check_passes_a_valid_pipeline(tmp_path):
    path = write_pipeline(
        tmp_path, 'orders.key_by("customer").window(W.tumbling("1m")).aggregate(n=agg.count()).sink(sinks.console())'
    )
    rc, out, err = run_cli("check", str(path))
    assert rc == 0, err
    assert "pipeline 'orders' is valid: 1 source(s), 2 operator(s), 1 sink(s)" in out


def test_check_against_a_checkpoint_says_what_changed_and_leaves_it_alone(tmp_path):
    """A changed aggregate on a checkpoint: the restart's own message, with no JVM, and the
    checkpoint's files untouched."""
    from sluice.cli.loading import load_pipeline
    from sluice.runtime.checkpoint import Checkpoint
    from sluice.runtime.pipeline_record import open_checkpoint
    from sluice.runtime.planlog import PlanLog

    before = write_pipeline(
        tmp_path, 'orders.key_by("customer").aggregate(total=agg.sum("amount"), name="totals").sink(sinks.console())', "before.py"
    )
    pipeline = load_pipeline(str(before))
    pipeline.job_graph().validate()
    checkpoint = Checkpoint(str(tmp_path / "ckpt"))
    open_checkpoint(pipeline.job_graph(), checkpoint, PlanLog(checkpoint), pipeline.partitions)
    files_before = {p: p.read_bytes() for p in (tmp_path / "ckpt").rglob("*") if p.is_file()}

    same = run_cli("check", str(before), "--checkpoint", str(tmp_path / "ckpt"))
    assert same[0] == 0 and "its state fits the checkpoint" in same[1], same

    after = write_pipeline(
        tmp_path, 'orders.key_by("customer").aggregate(total=agg.max("amount"), name="totals").sink(sinks.console())', "after.py"
    )
    rc, _, err = run_cli("check", str(after), "--checkpoint", str(tmp_path / "ckpt"))
    assert rc == 1
    assert "the pipeline changed in a way the state in checkpoint" in err and "--reset-state totals" in err
    assert {p: p.read_bytes() for p in (tmp_path / "ckpt").rglob("*") if p.is_file()} == files_before


def test_run_checks_before_spark_starts(tmp_path):
    path = write_pipeline(tmp_path, 'orders.key_by("custmer").aggregate(n=agg.count()).sink(sinks.console())')
    rc, _, err = run_cli("run", str(path), "--checkpoint", str(tmp_path / "ckpt"), "--quiet")
    assert rc == 1 and "key_by uses unknown column(s) ['custmer']" in err
    assert not (tmp_path / "ckpt").exists()


def test_plan_fails_on_an_invalid_pipeline_and_plans_built_in_operators(tmp_path):
    bad = write_pipeline(tmp_path, 'orders.key_by("custmer").aggregate(n=agg.count()).sink(sinks.console())')
    rc, _, err = run_cli("plan", str(bad), "--rate", "1000")
    assert rc == 1 and "unknown column(s) ['custmer']" in err
    good = write_pipeline(
        tmp_path,
        'orders.key_by("customer").aggregate(n=agg.count(), name="totals").sink(sinks.console())\n'
        'orders.key_by("customer").window(W.tumbling("1m")).aggregate(n=agg.count(), name="w")'
        ".sink(sinks.console())",
        "good.py",
    )
    rc, out, err = run_cli("plan", str(good), "--rate", "100000", "--json")
    assert rc == 0, err
    report = json.loads(out)
    models = {o["id"]: o["model"] for o in report["operators"]}
    assert models["totals"] == "builtin_aggregate" and models["w"] == "builtin_window"
    assert report["predicted_rate"] > 0 and report["bottleneck"]


def test_version_and_help_say_what_sluice_is():
    from sluice import __version__

    rc, out, _ = run_cli("--version")
    assert rc == 0 and out.strip() == f"sluice {__version__}"
    rc, out, _ = run_cli("--help")
    assert rc == 0
    description = out.split("\n\n")[1]
    assert description.startswith("Sluice runs streaming pipelines written in Python on Apache Spark")
    assert "check" in out and "validate a pipeline file without starting Spark" in out


def test_run_passes_conf_packages_and_jars_to_spark():
    from sluice.cli import build_parser
    from sluice.cli.run import spark_conf_of

    args = build_parser().parse_args(
        [
            "run",
            "p.py",
            "--conf",
            "spark.driver.memory=4g",
            "--conf",
            "spark.sql.shuffle.partitions=8",
            "--packages",
            "org.x:y:1.0",
            "--jars",
            "/a.jar,/b.jar",
            "--conf",
            "spark.jars=/c.jar",
        ]
    )
    assert spark_conf_of(args) == {
        "spark.driver.memory": "4g",
        "spark.sql.shuffle.partitions": "8",
        "spark.jars.packages": "org.x:y:1.0",
        "spark.jars": "/c.jar,/a.jar,/b.jar",
    }
    rc, _, err = run_cli("run", "p.py", "--conf", "nonsense")
    assert rc == 2 and "expected KEY=VALUE such as spark.driver.memory=4g, got 'nonsense'" in err


def test_status_piped_into_head_ends_quietly(tmp_path):
    """`sluice status CKPT | head -1`: the closed pipe ends the command without a traceback
    (the output, 20,000 decisions, is far more than a pipe's buffer holds)."""
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    line = {"batch_id": 0, "t": 1.0, "duration_s": 0.5, "rows_in": 10}
    (checkpoint / "metrics.jsonl").write_text(
        "\n".join(json.dumps({**line, "batch_id": i, "t": 1.0 + i}) for i in range(3)) + "\n"
    )
    decision = {"batch_id": 1, "policy": "batch_sizing", "action": "max_rows 1000", "reason": "the bound holds"}
    (checkpoint / "decisions.jsonl").write_text("\n".join(json.dumps(decision) for _ in range(20_000)) + "\n")
    proc = subprocess.run(
        f"{sys.executable} -m sluice status {checkpoint} --decisions 20000 | head -1",
        shell=True,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.stdout.startswith("job checkpoint")
    assert proc.stderr == ""
