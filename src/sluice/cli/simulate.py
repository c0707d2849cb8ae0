"""``sluice simulate SCENARIO.yaml``: run a dynamic-dataflow scenario in the simulator.

Shows a progress bar, prints a summary table, and writes into the output directory
``summary.json``, ``timeseries.csv`` and ``timeseries.png`` (Omega, Theta, cost and VMs over
time). ``--scheduler`` may be given several times to compare schedulers on the same scenario.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sluice.errors import ConfigError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "simulate", help="simulate a dynamic dataflow on an elastic cloud (thesis ch. 4-5)", description=__doc__.splitlines()[0]
    )
    p.add_argument("scenario", help="scenario YAML (see examples/scenarios/)")
    p.add_argument(
        "--scheduler",
        action="append",
        default=None,
        help="override the scenario's scheduler (BR, GA, CE, SH, PLASTICC, CAF, WAAF, WPA, WPO, WPP); repeatable",
    )
    p.add_argument("--out", default=None, help="output directory (default: sim-out/<scenario name>)")
    p.add_argument("--seed", type=int, default=None, help="override the scenario's seed")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def progress_bar(label: str, stream=sys.stderr, width: int = 30):
    shown = {"filled": -1}

    def show(done: int, total: int) -> None:
        filled = int(width * done / max(total, 1))
        if filled == shown["filled"] and done < total:
            return  # redraw only when the bar moves
        shown["filled"] = filled
        stream.write(f"\r{label:<10} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
        if done >= total:
            stream.write("\n")
        stream.flush()

    return show


def format_table(rows: list[dict]) -> str:
    cols = ["scheduler", "omega", "gamma", "cost", "profit", "violations", "excursions", "max_vms", "deploy_s", "adapt_s_mean"]

    def fmt(v):
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    cells = [[fmt(r[c]) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]

    def line(vals: list[str]) -> str:
        return "| " + " | ".join(v.rjust(w) for v, w in zip(vals, widths)) + " |"

    out = [line(cols), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(row) for row in cells]
    return "\n".join(out)


def plot_results(results, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(4, 1, figsize=(8, 9), sharex=True)
    for res in results:
        hours = res.time_s / 3600.0
        label = res.scenario.scheduler
        axes[0].plot(hours, res.omega, label=label, lw=1)
        axes[1].plot(hours, res.profit, label=label, lw=1)
        axes[2].plot(hours, res.cost, label=label, lw=1)
        axes[3].plot(hours, res.vms, label=label, lw=1)
    sc = results[0].scenario
    axes[0].axhline(sc.omega_target, color="k", ls="--", lw=0.8)
    axes[0].axhspan(sc.omega_target - sc.epsilon, sc.omega_target + sc.epsilon, color="grey", alpha=0.15)
    for ax, name in zip(axes, ["Omega (relative throughput)", "Theta so far (profit)", "cost so far ($)", "VMs"]):
        ax.set_ylabel(name, fontsize=8)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("hours")
    axes[0].legend(fontsize=7, ncol=min(len(results), 6))
    axes[0].set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    from sluice.sim.scenario import Scenario, simulate

    base = Scenario.from_yaml(args.scenario)
    if args.seed is not None:
        base.seed = args.seed
    schedulers = args.scheduler or [base.scheduler]
    out = Path(args.out or Path("sim-out") / base.name)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create output directory {out}: {exc}") from exc
    results = []
    for name in schedulers:
        sc = Scenario.from_dict({**base.to_dict(), "scheduler": name})
        bar = None if args.quiet else progress_bar(name)
        results.append(simulate(sc, progress=bar))
    rows = [r.summary() for r in results]
    print(f"scenario {base.name}: {base.dataflow}, {base.hours:g} h at {base.step_s:g} s steps, rate {base.rate}")
    print(format_table(rows))
    (out / "summary.json").write_text(json.dumps({"scenario": base.to_dict(), "results": rows}, indent=2))
    with open(out / "timeseries.csv", "w") as f:
        f.write("scheduler,time_s,rate,omega,gamma,cost,profit,vms,cores\n")
        for r in results:
            for k in range(len(r.time_s)):
                f.write(
                    f"{r.scenario.scheduler},{r.time_s[k]:.0f},{r.rate[k]:.4f},{r.omega[k]:.5f},{r.gamma[k]:.5f},"
                    f"{r.cost[k]:.4f},{r.profit[k]:.5f},{int(r.vms[k])},{int(r.cores[k])}\n"
                )
    if not args.no_plot:
        plot_results(results, out / "timeseries.png", f"{base.name}: {base.dataflow}")
    print(f"wrote {out}/summary.json, timeseries.csv" + ("" if args.no_plot else ", timeseries.png"))
    return 0
