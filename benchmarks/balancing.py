"""Key-group balancing benchmark: the ALBIC paper's sections 5.1 and 5.3 on synthetic workloads.

    .venv/bin/python benchmarks/balancing.py [--quick]

5.1a  MILP vs Flux (and PoTC for reference) load distance at equal maxMigrations, over three
      cluster sizes and a perturbed fraction of nodes. Also the solve time at 40 nodes x 800
      key groups (must be under 5 s).
5.1b  Integrated vs non-integrated scale-in: largest cluster, maxMigrations = 20, 10 nodes
      marked for removal, 1 or 5 overloaded (100 %) nodes; load distance per round and the
      round N_r is drained.
5.3   ALBIC vs COLA on (20 nodes, 400 key groups, 10 operators), (40, 800, 20), (60, 1200, 30),
      50 % maximum collocation: load distance, collocation factor, migrations per round, solve time.

Writes docs/results/balancing.json, balancing.md and balancing_*.png; the last line printed
is a JSON object whose ``ratio`` is Flux's mean load distance over the MILP's in 5.1a.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from sluice.plan.balancing import (
    AlbicSettings,
    MigrationBudget,
    MilpSettings,
    NoScaling,
    adapt,
    albic,
    cola,
    collocation_factor,
    flux,
    load_distance,
    non_integrated_scale_in,
    potc,
    release_drained_nodes,
    solve_milp,
)
from sluice.sim.balancing_workloads import collocation_workload, scale_in_workload, solver_workload

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import Anchor, Record, no_outputs

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"
SIZES = [(10, 200), (20, 400), (40, 800)]
FRACTIONS = [0.1, 0.3, 0.5]
CONFIGS_5_3 = [(20, 400, 10), (40, 800, 20), (60, 1200, 30)]


def log(msg: str) -> None:
    print(msg, flush=True)


def solver_comparison(quick: bool) -> dict:
    """5.1a: MILP vs Flux at equal maxMigrations (= K / 20)."""
    time_limit = 1.0 if quick else 4.0  # 4 s leaves room for building the model within 5 s
    seeds = [0] if quick else [0, 1]
    rows = []
    for nodes, key_groups in SIZES:
        budget = MigrationBudget(max_count=key_groups // 20)
        for fraction in FRACTIONS:
            for seed in seeds:
                problem = solver_workload(nodes, key_groups, fraction, seed=seed)
                started = time.perf_counter()
                f = flux(problem, budget)
                flux_seconds = time.perf_counter() - started
                m = solve_milp(problem, budget, MilpSettings(time_limit=time_limit))
                p = potc(problem)
                rows.append(
                    {
                        "nodes": nodes,
                        "key_groups": key_groups,
                        "perturbed": fraction,
                        "seed": seed,
                        "max_migrations": budget.max_count,
                        "initial": load_distance(problem),
                        "flux": f.load_distance,
                        "flux_migrations": len(f.migrations),
                        "flux_seconds": flux_seconds,
                        "milp": m.load_distance,
                        "milp_migrations": len(m.migrations),
                        "milp_seconds": m.solve_seconds,
                        "milp_status": m.status,
                        "greedy_start": m.notes.get("start_load_distance"),
                        "potc": p.load_distance,
                    }
                )
                r = rows[-1]
                log(
                    f"  5.1a N={nodes:3d} K={key_groups:4d} perturbed={fraction:.1f} seed={seed}: "
                    f"initial {r['initial']:6.2f}  Flux {r['flux']:6.2f}  MILP {r['milp']:6.2f} "
                    f"(greedy start {r['greedy_start']:6.2f}, {r['milp_seconds']:.2f} s)  PoTC {r['potc']:6.2f}"
                )
    return {"time_limit": time_limit, "rows": rows}


def scale_in(quick: bool) -> dict:
    """5.1b: integrated (Algorithm 1 + MILP) vs non-integrated scale-in."""
    nodes, key_groups = SIZES[-1]
    budget = MigrationBudget(max_count=20)
    settings = MilpSettings(time_limit=0.5 if quick else 2.0)
    rounds = 14 if quick else 24
    out = {}
    for overloaded in (1, 5):
        start = scale_in_workload(nodes, key_groups, num_removing=10, num_overloaded=overloaded, seed=0)
        for name in ("integrated", "non_integrated"):
            problem, series, drained_at, seconds = start, [], None, []
            for r in range(rounds):
                if name == "integrated":
                    result = adapt(problem, lambda p: solve_milp(p, budget, settings), NoScaling())
                    problem, plan = result.problem, result.plan
                else:
                    problem, _ = release_drained_nodes(problem)
                    plan = non_integrated_scale_in(problem, budget, settings)
                seconds.append(plan.solve_seconds)
                problem = problem.with_assignment(plan.assignment)
                left = int(problem.removing[problem.assignment_index].sum())
                series.append(
                    {
                        "round": r + 1,
                        "load_distance": plan.load_distance,
                        "left_on_removed": left,
                        "migrations": len(plan.migrations),
                    }
                )
                if left == 0 and drained_at is None:
                    drained_at = r + 1
            key = f"{name}_OL{overloaded}"
            out[key] = {"series": series, "drained_round": drained_at, "mean_seconds": float(np.mean(seconds))}
            dist = [s["load_distance"] for s in series]
            log(f"  5.1b {key:20s} drained at round {drained_at}; load distance by round: " + " ".join(f"{d:.1f}" for d in dist))
    return {"max_migrations": 20, "removing": 10, "rounds": rounds, "time_limit": settings.time_limit, "runs": out}


def albic_vs_cola(quick: bool) -> dict:
    """5.3: ALBIC (adaptive) vs COLA (full re-optimization every round)."""
    rounds = 8 if quick else 25
    milp = MilpSettings(time_limit=0.5 if quick else 1.5)
    settings = AlbicSettings(max_new_pairs=None, milp=milp)
    out = []
    for nodes, key_groups, operators in CONFIGS_5_3:
        workload = collocation_workload(nodes, key_groups, operators, one_to_one_fraction=0.5, seed=0)
        budget = MigrationBudget(max_count=key_groups // 20)
        a_assign = c_assign = workload.problem.assignment
        series = []
        for r in range(rounds):
            a_problem = workload.next_round(a_assign, np.random.default_rng(100 + r))
            c_problem = workload.next_round(c_assign, np.random.default_rng(100 + r))
            a_plan = albic(a_problem, budget, settings)
            started = time.perf_counter()
            c_plan = cola(c_problem, settings.max_load_distance)
            c_seconds = time.perf_counter() - started
            a_assign, c_assign = a_plan.assignment, c_plan.assignment
            series.append(
                {
                    "round": r + 1,
                    "albic_load_distance": a_plan.load_distance,
                    "cola_load_distance": c_plan.load_distance,
                    "albic_collocation": collocation_factor(a_problem, a_assign),
                    "cola_collocation": collocation_factor(c_problem, c_assign),
                    "albic_migrations": len(a_plan.migrations),
                    "cola_migrations": len(c_plan.migrations),
                    "albic_seconds": a_plan.solve_seconds,
                    "cola_seconds": c_seconds,
                    "albic_solves": a_plan.notes.get("solves", 1),
                }
            )
        mean = lambda key: float(np.mean([s[key] for s in series]))  # noqa: E731
        summary = {
            "nodes": nodes,
            "key_groups": key_groups,
            "operators": operators,
            "max_migrations": budget.max_count,
            "albic_load_distance": mean("albic_load_distance"),
            "cola_load_distance": mean("cola_load_distance"),
            "albic_final_collocation": series[-1]["albic_collocation"],
            "cola_final_collocation": series[-1]["cola_collocation"],
            "albic_migrations": mean("albic_migrations"),
            "cola_migrations": mean("cola_migrations"),
            "albic_seconds": mean("albic_seconds"),
            "cola_seconds": mean("cola_seconds"),
            "albic_resolves": int(sum(s["albic_solves"] > 1 for s in series)),
            "series": series,
        }
        out.append(summary)
        log(
            f"  5.3 ({nodes}, {key_groups}, {operators}): load distance ALBIC {summary['albic_load_distance']:.2f} "
            f"COLA {summary['cola_load_distance']:.2f}; collocation ALBIC {summary['albic_final_collocation']:.3f} "
            f"COLA {summary['cola_final_collocation']:.3f}; migrations/round ALBIC {summary['albic_migrations']:.1f} "
            f"COLA {summary['cola_migrations']:.1f}; seconds ALBIC {summary['albic_seconds']:.2f} "
            f"COLA {summary['cola_seconds']:.2f}"
        )
    return {"rounds": rounds, "time_limit": milp.time_limit, "configs": out}


# -- reporting -------------------------------------------------------------------------------


NOTES = """## Notes (choices where the paper's text was lost; see the module docstrings)

- MILP rows (1)-(5) reconstructed from the prose (src/sluice/plan/balancing/milp.py); L-bar is the
  total load over the capacity of N_s; objective eps - 1e-3 (eps_u + eps_l) plus a 1e-7 tie-break.
- HiGHS alone cannot improve a large model within seconds (LP bound ~0), so the MILP starts from a
  greedy descent on its own objective and, above 4000 unit x node columns, is solved exactly on
  rotating neighbourhoods of 6 extreme nodes (large-neighbourhood search). "greedy start" in 5.1a is
  that warm start; the MILP column is what the solver returns within its limit.
- Drain pace: with whole key groups the pure MILP can keep the last key groups on N_r (Lemma 4.2 needs
  divisible load), so while N_r is not empty at least half the budget drains it.
- Workload constants lost in extraction (key-group jitter +-20 %, perturbation +-30 %, node mean 50 %,
  maxMigrations = K / 20 in 5.1a and 5.3, D_max = 10, sigma = 2, Delta = 6.25) are our choices.
- ALBIC pins several pairs per round (up to half the budget) instead of the paper's one, so collocation
  converges in ~25 rounds; COLA is re-run from scratch each round (bins matched to nodes to keep state).
"""


def tables(result: dict) -> str:
    lines = [
        "## 5.1a MILP vs Flux (load distance, percentage points; mean over seeds)",
        "",
        "| nodes | key groups | maxMigrations | perturbed | initial | Flux | MILP | greedy start | PoTC | MILP s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    rows = result["solver"]["rows"]
    for nodes, key_groups in SIZES:
        for fraction in FRACTIONS:
            sel = [r for r in rows if r["nodes"] == nodes and r["perturbed"] == fraction]
            m = lambda k: np.mean([r[k] for r in sel])  # noqa: E731
            lines.append(
                f"| {nodes} | {key_groups} | {sel[0]['max_migrations']} | {fraction} | {m('initial'):.2f} | "
                f"{m('flux'):.2f} | {m('milp'):.2f} | {m('greedy_start'):.2f} | {m('potc'):.2f} | "
                f"{m('milp_seconds'):.2f} |"
            )
    lines += [
        "",
        "## 5.1b Integrated vs non-integrated scale-in (40 nodes, 800 key groups, 10 in N_r, maxMigrations 20)",
        "",
        "| run | drained at round | load distance at rounds 1, 3, 5, 10, last |",
        "|---|---|---|",
    ]
    for key, run in result["scale_in"]["runs"].items():
        d = [s["load_distance"] for s in run["series"]]
        picks = [d[i] for i in (0, 2, 4, 9) if i < len(d)] + [d[-1]]
        lines.append(f"| {key} | {run['drained_round']} | {', '.join(f'{x:.1f}' for x in picks)} |")
    lines += [
        "",
        "## 5.3 ALBIC vs COLA (means over rounds; collocation after the last round)",
        "",
        "| nodes | key groups | operators | load distance ALBIC | COLA | collocation ALBIC | COLA | "
        "migrations/round ALBIC | COLA | solve s ALBIC | COLA |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in result["collocation"]["configs"]:
        lines.append(
            f"| {c['nodes']} | {c['key_groups']} | {c['operators']} | {c['albic_load_distance']:.2f} | "
            f"{c['cola_load_distance']:.2f} | {c['albic_final_collocation']:.3f} | {c['cola_final_collocation']:.3f} | "
            f"{c['albic_migrations']:.1f} | {c['cola_migrations']:.1f} | {c['albic_seconds']:.2f} | "
            f"{c['cola_seconds']:.2f} |"
        )
    return "\n".join(lines)


def plots(result: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["solver"]["rows"]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), sharey=True)
    for ax, (nodes, key_groups) in zip(axes, SIZES):
        x = np.arange(len(FRACTIONS))
        for i, (key, label) in enumerate([("flux", "Flux"), ("milp", "MILP"), ("potc", "PoTC")]):
            vals = [np.mean([r[key] for r in rows if r["nodes"] == nodes and r["perturbed"] == f]) for f in FRACTIONS]
            ax.bar(x + (i - 1) * 0.27, vals, 0.27, label=label)
        ax.set_xticks(x, [f"{f:.0%}" for f in FRACTIONS])
        ax.set_title(f"{nodes} nodes, {key_groups} key groups")
        ax.set_xlabel("perturbed nodes")
    axes[0].set_ylabel("load distance (pp)")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "balancing_milp_vs_flux.png", dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for key, run in result["scale_in"]["runs"].items():
        r = [s["round"] for s in run["series"]]
        style = "-" if key.startswith("integrated") else "--"
        axes[0].plot(r, [s["load_distance"] for s in run["series"]], style, label=key)
        axes[1].plot(r, [s["left_on_removed"] for s in run["series"]], style, label=key)
    axes[0].set_ylabel("load distance (pp)")
    axes[1].set_ylabel("key groups left on N_r")
    for ax in axes:
        ax.set_xlabel("round")
        ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "balancing_scale_in.png", dpi=110)
    plt.close(fig)

    configs = result["collocation"]["configs"]
    fig, axes = plt.subplots(3, len(configs), figsize=(13, 8), sharex=True)
    for j, c in enumerate(configs):
        r = [s["round"] for s in c["series"]]
        for i, (metric, label) in enumerate(
            [("collocation", "collocation factor"), ("load_distance", "load distance"), ("migrations", "migrations")]
        ):
            axes[i, j].plot(r, [s[f"albic_{metric}"] for s in c["series"]], label="ALBIC")
            axes[i, j].plot(r, [s[f"cola_{metric}"] for s in c["series"]], "--", label="COLA")
            axes[i, j].set_ylabel(label)
        axes[0, j].set_title(f"({c['nodes']}, {c['key_groups']}, {c['operators']})")
        axes[2, j].set_xlabel("round")
    axes[0, 0].legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "balancing_albic_vs_cola.png", dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter solver limits, fewer rounds and seeds")
    args = parser.parse_args(argv)
    record = Record("balancing", args.quick)
    started = time.perf_counter()
    log("5.1a solver performance: MILP vs Flux")
    solver = solver_comparison(args.quick)
    log("5.1b integrated vs non-integrated scale-in")
    scaling = scale_in(args.quick)
    log("5.3 ALBIC vs COLA")
    colloc = albic_vs_cola(args.quick)
    result = {"mode": "quick" if args.quick else "full", "solver": solver, "scale_in": scaling, "collocation": colloc}

    rows = solver["rows"]
    flux_mean = float(np.mean([r["flux"] for r in rows]))
    milp_mean = float(np.mean([r["milp"] for r in rows]))
    big = [r["milp_seconds"] for r in rows if (r["nodes"], r["key_groups"]) == (40, 800)]
    runs = scaling["runs"]

    def first_round_below(run, threshold):
        return next((s["round"] for s in run["series"] if s["load_distance"] <= threshold), None)

    threshold = 10.0
    figures = {
        "benchmark": "balancing",
        "mode": result["mode"],
        "ratio": flux_mean / milp_mean,
        "flux_mean_load_distance": flux_mean,
        "milp_mean_load_distance": milp_mean,
        "potc_mean_load_distance": float(np.mean([r["potc"] for r in rows])),
        "milp_beats_flux_cases": int(sum(r["milp"] <= r["flux"] + 1e-9 for r in rows)),
        "cases": len(rows),
        "milp_40x800_max_seconds": float(max(big)),
        "scale_in_rounds_to_distance_10": {k: first_round_below(v, threshold) for k, v in runs.items()},
        "scale_in_drained_round": {k: v["drained_round"] for k, v in runs.items()},
        "albic_vs_cola": [
            {
                k: c[k]
                for k in (
                    "nodes",
                    "key_groups",
                    "operators",
                    "albic_load_distance",
                    "cola_load_distance",
                    "albic_final_collocation",
                    "cola_final_collocation",
                    "albic_migrations",
                    "cola_migrations",
                    "albic_seconds",
                    "cola_seconds",
                )
            }
            for c in colloc["configs"]
        ],
        "seconds": time.perf_counter() - started,
    }
    result["figures"] = figures
    text = tables(result)
    (RESULTS / "balancing.md").write_text(
        f"# Key-group balancing benchmark ({result['mode']} mode)\n\nProduced by `benchmarks/balancing.py"
        f"{' --quick' if args.quick else ''}`. Load values are percentage points of an average node.\n\n" + text + "\n\n" + NOTES
    )
    plots(result)
    log("")
    log(text)
    log("")
    log(f"MILP solve time at 40 nodes x 800 key groups: max {max(big):.2f} s (limit 5 s)")
    record.publish(
        RESULTS / "balancing.json",
        result,
        figures,
        anchor=Anchor(
            ran="Flux (pairwise key-group swaps), on the same synthetic loads",
            formulation="ratio = Flux's mean load distance over ALBIC's MILP's at equal maxMigrations (5.1a); "
            "PoTC beside it, COLA against ALBIC in 5.3",
        ),
        **no_outputs("placement solvers on synthetic loads: no stream runs"),
        indent=1,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
