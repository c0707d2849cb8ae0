"""Slots needed by LSA+RSM versus MBA+SAM on the paper's micro-DAGs (Shukla and Simmhan, Fig. 7).

For the Linear, Diamond and Star micro-DAGs (5 tasks each, plus source and sink) with the
paper-like performance models of ``sluice/models/library``, at 50, 100 and 200 tuples/s:
the slots each allocation estimates (rho), the slots its mapping finally needs (the add-a-slot
retry), the rate the model predicts for the result, and the planning time.

The paper reports MBA+SAM needing about half the slots of LSA+RSM (e.g. Linear: 7, 13, 28
against 4, 7, 15). ``ratio`` = LSA+RSM slots / MBA+SAM slots, summed over the nine cases.

    .venv/bin/python benchmarks/planning.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from sluice.plan.allocation import allocate, paper_micro_dag
from sluice.plan.mapping import plan_mapping
from sluice.plan.predict import predict

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import Anchor, Record, no_outputs

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
SHAPES = ("linear", "diamond", "star")
RATES = (50, 100, 200)
PAIRS = (("LSA", "RSM"), ("MBA", "SAM"))
PAPER_LINEAR = {"LSA+RSM": (7, 13, 28), "MBA+SAM": (4, 7, 15)}


def plan_once(dag, rate, allocation, mapping, models):
    alloc = allocate(allocation, dag, rate, models)
    result = plan_mapping(dag, alloc, mapping, models)
    return alloc, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer timing repeats")
    args = parser.parse_args()
    record = Record("planning", args.quick)
    repeats = 5 if args.quick else 50

    cases = []
    for shape in SHAPES:
        dag = paper_micro_dag(shape)
        models = dag.models()
        for rate in RATES:
            row = {"dag": shape, "rate": rate}
            for allocation, mapping in PAIRS:
                times = []
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    alloc, result = plan_once(dag, rate, allocation, mapping, models)
                    times.append(time.perf_counter() - t0)
                key = f"{allocation}+{mapping}"
                row[key] = {
                    "threads": alloc.total_threads,
                    "cpu": round(alloc.total_cpu, 4),
                    "memory": round(alloc.total_memory, 4),
                    "allocated_slots": alloc.slots,
                    "extra_slots": result.extra_slots,
                    "slots": result.slots,
                    "executors": list(result.cluster.vm_slots),
                    "predicted_rate_even": round(predict(dag, result.mapping, models, routing="even").rate, 2),
                    "predicted_rate_capacity": round(predict(dag, result.mapping, models, routing="capacity").rate, 2),
                    "planning_ms": round(1000 * statistics.median(times), 3),
                }
            cases.append(row)

    print(
        f"{'DAG':<9}{'rate':>5} | {'LSA+RSM rho':>11}{'+map':>5}{'slots':>6}{'pred':>7} | "
        f"{'MBA+SAM rho':>11}{'+map':>5}{'slots':>6}{'pred':>7} | {'ms (L/M)':>12}"
    )
    for c in cases:
        a, b = c["LSA+RSM"], c["MBA+SAM"]
        print(
            f"{c['dag']:<9}{c['rate']:>5} | {a['allocated_slots']:>11}{a['extra_slots']:>5}{a['slots']:>6}"
            f"{a['predicted_rate_even']:>7.0f} | {b['allocated_slots']:>11}{b['extra_slots']:>5}{b['slots']:>6}"
            f"{b['predicted_rate_even']:>7.0f} | {a['planning_ms']:>5.2f}/{b['planning_ms']:<5.2f}"
        )
    lsa = sum(c["LSA+RSM"]["slots"] for c in cases)
    mba = sum(c["MBA+SAM"]["slots"] for c in cases)
    ratio = lsa / mba
    linear = {k: [c[k]["slots"] for c in cases if c["dag"] == "linear"] for k in ("LSA+RSM", "MBA+SAM")}
    print(f"\nslots summed over 9 cases: LSA+RSM {lsa}, MBA+SAM {mba}, ratio {ratio:.2f} (paper: about 2)")
    print(
        f"Linear DAG slots at 50/100/200 t/s: LSA+RSM {linear['LSA+RSM']} (paper {list(PAPER_LINEAR['LSA+RSM'])}), "
        f"MBA+SAM {linear['MBA+SAM']} (paper {list(PAPER_LINEAR['MBA+SAM'])})"
    )
    print("pred = rate the model predicts for the mapping with Storm-like even routing (t/s)")

    summary = {
        "benchmark": "planning",
        "ratio": round(ratio, 3),
        "lsa_rsm_slots": lsa,
        "mba_sam_slots": mba,
        "linear_lsa_rsm_slots": linear["LSA+RSM"],
        "linear_mba_sam_slots": linear["MBA+SAM"],
        "max_planning_ms": max(max(c["LSA+RSM"]["planning_ms"], c["MBA+SAM"]["planning_ms"]) for c in cases),
        "mode": "quick" if args.quick else "full",
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    _plot(cases)
    record.publish(
        RESULTS / "planning.json",
        {**summary, "cases": cases},
        summary,
        anchor=Anchor(
            ran="LSA allocation with RSM mapping (the paper's baseline), on the same micro-DAGs and models",
            formulation="ratio = LSA+RSM slots over MBA+SAM slots, summed over the nine cases (paper: about 2)",
        ),
        **no_outputs("planners on performance models: no stream runs"),
    )
    return 0


def _plot(cases) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        return
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6), sharey=True)
    for ax, shape in zip(axes, SHAPES):
        rows = [c for c in cases if c["dag"] == shape]
        x = range(len(rows))
        for offset, key, color in ((-0.2, "LSA+RSM", "tab:red"), (0.2, "MBA+SAM", "tab:blue")):
            alloc = [r[key]["allocated_slots"] for r in rows]
            extra = [r[key]["extra_slots"] for r in rows]
            ax.bar([i + offset for i in x], alloc, 0.38, color=color, label=f"{key} allocated")
            ax.bar([i + offset for i in x], extra, 0.38, bottom=alloc, color=color, alpha=0.4, label=f"{key} +mapping")
        ax.set_xticks(list(x), [f"{r['rate']} t/s" for r in rows])
        ax.set_title(f"{shape} micro-DAG")
    axes[0].set_ylabel("slots")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / "planning.png", dpi=110)


if __name__ == "__main__":
    raise SystemExit(main())
