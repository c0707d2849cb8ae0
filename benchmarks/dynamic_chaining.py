"""Dynamic chaining live on Spark: the policy's decision and its speed-up, in two workloads.

1. *fuse*: four cheap Python operators over a source with as many partitions as cores,
   started unfused (four passes). Every core is busy already, so each pass only costs: the
   policy should fuse them into one.
2. *rebalance*: two CPU-heavy Python operators over a source that gives one partition a
   batch, started fused. One core works, the other idles: the policy should put a rebalance
   exchange before them so both cores share the work (on Spark 4 unfused passes of one task
   do not run side by side, so a plain split would not help).

Each workload runs three ways on the same input, alternating, best of ``--runs``: the
starting layout held fixed, the policy's target layout held fixed, and the policy live
(starting from the first and deciding by itself). Reported per workload: the decision
(batch and reason), median batch time of each layout, and the speed-up of the live run's
batches after its decision over the starting layout. Also measured: what one more Python
pass and a rebalance exchange cost per row (identity operators), against the policy's
defaults.

``ratio`` = the smaller of the two workloads' speed-ups (fixed target over fixed start).

    .venv/bin/python benchmarks/dynamic_chaining.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import sluice
from sluice import sinks, sources
from sluice.control import Controller, DynamicChaining, Resources
from sluice.control.chaining import EXCHANGE_US_PER_ROW, PASS_US_PER_ROW
from sluice.job import RunOptions
from sluice.job.run import run_pipeline
from sluice.plan.physical import Plan, initial_plan
from sluice.runtime.session import spark_session

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import Anchor, Record

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"


def ident(batch):
    return batch


def heavy(batch):
    x = batch.column("v").to_numpy()
    for _ in range(200):
        x = np.sin(x) + 0.5
    return batch.set_column(batch.schema.get_field_index("w"), "w", pa.array(x))


def pipeline(ops, rows: int, per_batch: int) -> sluice.Pipeline:
    p = sluice.Pipeline("chaining_bench")
    s = p.source(
        sources.generator(
            fields={"k": sources.Keys(100), "v": sources.Normal(0, 1), "w": sources.Normal(0, 1)},
            total_rows=rows,
            max_rows_per_batch=per_batch,
            seed=3,
        )
    )
    for i, fn in enumerate(ops):
        s = s.map_batches(fn, name=f"op{i}")
    s.sink(sinks.callback(lambda batch_id, table: _received.append(_digest(table))))
    return p


_received: list[tuple[int, float]] = []  # (rows, sum of w) of each batch the running pipeline's sink got


def _digest(table) -> tuple[int, float]:
    return table.num_rows, float(pc.sum(table.column("w")).as_py() or 0.0)


def _total(digests: list[tuple[int, float]]) -> tuple[int, float]:
    return sum(n for n, _ in digests), sum(w for _, w in digests)


def _all_equal(totals: list[tuple[int, float]]) -> bool:
    """Whether every run wrote the same rows with the same sum of w (two layouts add the
    doubles in different orders)."""
    return all(n == totals[0][0] and math.isclose(w, totals[0][1], rel_tol=1e-9) for n, w in totals)


_outputs: list[tuple[int, float]] = []  # (rows, sum of w) of each run of the current workload


def run(spark, p, plan: Plan | None, policy: DynamicChaining | None, fuse: bool):
    checkpoint = tempfile.mkdtemp(prefix="sluice-chaining-")
    try:
        controller = None
        if policy is not None:
            controller = Controller(p.graph, [policy], checkpoint=checkpoint, resources=Resources(cores=2))
        metrics = []
        _received.clear()
        run_pipeline(p, checkpoint, RunOptions(spark=spark, plan=plan, fuse=fuse, controller=controller, on_batch=metrics.append))
        _outputs.append(_total(_received))
        decisions = []
        if controller is not None and controller.decisions:
            decisions = [json.loads(line) for line in open(f"{checkpoint}/decisions.jsonl")]
        return [m for m in metrics if m.rows_in > 0], decisions
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)


def median_batch(metrics, skip: int = 2) -> float:
    steady = metrics[skip:] or metrics
    return statistics.median(m.duration_s for m in steady)


def workload(spark, name, ops, rows, per_batch, start_fused: bool, target: Plan, runs: int) -> dict:
    p = pipeline(ops, rows, per_batch)
    start = initial_plan(p.graph, 2, fuse=start_fused)
    _outputs.clear()
    fixed = {"start": [], "target": []}
    live = None
    for _ in range(runs):
        for label, plan in (("start", start), ("target", target)):
            m, _ = run(spark, pipeline(ops, rows, per_batch), plan, None, start_fused)
            fixed[label].append(median_batch(m))
        m, decisions = run(spark, pipeline(ops, rows, per_batch), start, DynamicChaining(min_batches=2), start_fused)
        decided = [d for d in decisions if d.get("type") == "decision"]
        after = [x for x in m if decided and x.batch_id > decided[0]["batch_id"] + 1]
        candidate = {"decision": decided[0] if decided else None, "batch_s_after": median_batch(after, 0) if after else None}
        if live is None or (candidate["batch_s_after"] or 1e9) < (live["batch_s_after"] or 1e9):
            live = candidate
    start_s, target_s = min(fixed["start"]), min(fixed["target"])
    decision = live["decision"]
    return {
        "workload": name,
        "start_batch_s": round(start_s, 4),
        "target_batch_s": round(target_s, 4),
        "speedup": round(start_s / target_s, 3),
        "live_decision": None
        if decision is None
        else {"batch_id": decision["batch_id"], "value": decision["action"]["value"], "reason": decision["action"]["reason"]},
        "live_chose_target": decision is not None and _layout_of(decision) == _layout_of_plan(target),
        "live_batch_s_after": None if live["batch_s_after"] is None else round(live["batch_s_after"], 4),
        "live_speedup": None if live["batch_s_after"] is None else round(start_s / live["batch_s_after"], 3),
        "runs": {k: [round(v, 4) for v in vs] for k, vs in fixed.items()},
        "outputs_equal": _all_equal(_outputs),
    }


def _layout_of(decision) -> tuple:
    value = decision["action"]["value"]
    return tuple(tuple(c) for c in value["chains"]), tuple(sorted(value["rebalance"].items()))


def _layout_of_plan(plan: Plan) -> tuple:
    return plan.chains, tuple(sorted(plan.rebalance.items()))


def transfer_costs(spark, rows: int, samples: int) -> dict:
    """Microseconds a row of one more identity pass and of a rebalance exchange (the best of
    ``samples`` runs of each)."""
    per_batch = rows // 6
    times = {}
    for label, n_ops, rebalance in (("one", 1, False), ("four", 4, False), ("rebalanced", 1, True)):
        p = pipeline([ident] * n_ops, rows, per_batch)
        plan = initial_plan(p.graph, 2, fuse=False)
        if rebalance:
            plan = Plan(plan.version, plan.max_parallelism, plan.keyed, plan.chains, rebalance={"op0": 2})
        samples = []
        for _ in range(samples):
            m, _ = run(spark, pipeline([ident] * n_ops, rows, per_batch), plan, None, False)
            samples.append(median_batch(m))
        times[label] = min(samples)
    return {
        "pass_us_per_row": round((times["four"] - times["one"]) / 3 / per_batch * 1e6, 3),
        "exchange_us_per_row": round((times["rebalanced"] - times["one"]) / per_batch * 1e6, 3),
        "policy_defaults": {"pass_us_per_row": PASS_US_PER_ROW, "exchange_us_per_row": EXCHANGE_US_PER_ROW},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few minutes: fewer rows and runs")
    args = parser.parse_args()
    record = Record("dynamic_chaining", args.quick)
    runs = 1 if args.quick else 3
    scale = 1 if args.quick else 2
    spark = spark_session("local[2]")
    t0 = time.time()

    fuse_ops = [ident] * 4
    p = pipeline(fuse_ops, 1, 1)
    fuse_target = initial_plan(p.graph, 2, fuse=True)
    cheap = workload(spark, "fuse", fuse_ops, 480_000 * scale, 80_000, start_fused=False, target=fuse_target, runs=runs)
    print(json.dumps(cheap), flush=True)

    heavy_ops = [heavy, heavy]
    p = pipeline(heavy_ops, 1, 1)
    fused = initial_plan(p.graph, 2, fuse=True)
    heavy_target = Plan(fused.version, fused.max_parallelism, fused.keyed, fused.chains, rebalance={"op0": 2})
    costly = workload(spark, "rebalance", heavy_ops, 60_000 * scale, 10_000, start_fused=True, target=heavy_target, runs=runs)
    print(json.dumps(costly), flush=True)

    costs = transfer_costs(spark, 240_000 if args.quick else 480_000, 1 if args.quick else 2)
    print(json.dumps(costs), flush=True)
    result = {
        "benchmark": "dynamic_chaining",
        "ratio": round(min(cheap["speedup"], costly["speedup"]), 3),
        "quick": args.quick,
        "workloads": [cheap, costly],
        "measured_costs": costs,
        "elapsed_s": round(time.time() - t0, 1),
        "note": "ratio = min over the two workloads of (start layout batch time / the policy's target layout's)",
    }
    equal = cheap["outputs_equal"] and costly["outputs_equal"]
    record.publish(
        RESULTS / "dynamic_chaining.json",
        result,
        result,
        anchor=Anchor(
            ran="Sluice held at each workload's starting layout (fuse: four passes unfused; rebalance: fused, "
            "one task a batch), not Spark's own query",
            formulation="median batch time of the starting layout over the policy's target layout, each held "
            "fixed; generator source, local[2]",
        ),
        outputs_equal=equal,
        spark=spark,
        outputs_compared="rows and the sum of w written by every run of each workload (start, target, live)",
    )
    return 0 if equal else 1


if __name__ == "__main__":
    raise SystemExit(main())
