"""``sluice demo --grid``: the smart-grid pipeline (``examples.grid``) under a rate that rises
and falls, with the controller switching forecasters; prints and plots value, relative
throughput, executors, cost, profit and the active forecaster over time."""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass

from sluice.control.actions import SwitchAlternate
from sluice.core.decisions import Decision, parse_record
from sluice.examples import grid

PRICE_PER_HOUR = 0.35  # an executor priced like the thesis's m1.xlarge (2014 on-demand)


@dataclass
class GridRun:
    """What a demo run did: its metrics, decisions and the settings it ran with."""

    checkpoint: str
    metrics: list  # BatchMetrics of the run, batches with rows
    decisions: list[dict]
    peak: float
    phase_s: float
    alternates: dict  # name -> {"value", "cost"}
    started: float


def run_grid_demo(
    output: str,
    *,
    peak: float | None = None,
    phase_s: float = 30.0,
    policies=None,
    master=None,
    spark=None,
    keep: bool = False,
    on_batch=None,
    ui: bool | None = False,
) -> GridRun:
    """Profile the forecasters, run the pipeline over the trace, and return what it did.

    ``peak``: the highest rate of the trace (default: 90 % of what the cores could
    forecast with the regression alone, at the wall-clock cost profiled: with the rest of
    the pipeline's work it cannot hold the peak); ``policies``: the
    control policies (default ``AlternatesByLoad``). The trace starts when the query does,
    after a short warm-up run has started Spark's Python workers."""
    from sluice.control import AlternatesByLoad, read_decisions
    from sluice.runtime.session import spark_session

    output = os.path.abspath(output)
    if not keep and os.path.exists(output):
        shutil.rmtree(output)
    os.makedirs(output, exist_ok=True)
    if spark is None:
        from sluice.runtime.warmup import start_python_workers

        spark = spark_session(master, ui=ui)
        start_python_workers(spark).result(timeout=300)  # a busy machine is slow to start them
    cores = spark.sparkContext.defaultParallelism
    profiles = grid.profile_forecasters()
    alternates = grid.forecaster_alternates(profiles)
    if peak is None:  # by the wall-clock cost: on a busy machine a core gives the job less than a core
        peak = round(0.9 * cores / profiles["regression"].wall, -1)
    warm_up(spark, output, alternates)
    trace = grid.rate_trace(peak, phase_s)
    pipeline = grid.build(output, trace, phase_s, alternates=alternates)
    pipeline.economics(price_per_hour=PRICE_PER_HOUR, billing="second")
    checkpoint = os.path.join(output, "checkpoint")
    started = time.time()
    result = pipeline.run(
        checkpoint,
        spark=spark,
        policies=policies if policies is not None else [AlternatesByLoad()],
        on_batch=on_batch,
        duration=len(trace) * phase_s + 60.0,
    )
    return GridRun(
        checkpoint,
        [m for m in result.metrics if m.rows_in],
        read_decisions(checkpoint),
        peak,
        phase_s,
        {n: {"value": a.value, "cost": a.cost} for n, a in alternates.items()},
        started,
    )


def warm_up(spark, output: str, alternates: dict) -> None:
    """A few hundred readings through the same operators, so the trace's first batch is not
    the one that starts Spark's Python workers and compiles its code (tens of seconds on a
    busy machine, while the trace's rows pile up)."""
    from sluice import Pipeline, sinks, sources

    p = Pipeline("grid_warm_up", partitions=2, max_parallelism=32)
    readings = p.source(
        sources.generator(
            fields={
                "building": sources.Keys(grid.BUILDINGS, prefix="b"),
                "ts": sources.EventTime(),
                "noise": sources.Normal(0.0, 0.03),
            },
            total_rows=400,
            seed=99,
        ),
        name="warm_up",
    )
    readings.map_batches(grid.meter, schema=grid.READING_SCHEMA, name="meter").key_by("building").process(
        schema=grid.FORECAST_SCHEMA, name="forecast", alternates=alternates
    ).sink(sinks.memory(f"grid_warm_up_{time.time_ns()}"), name="out")
    p.run(os.path.join(output, "warm_up_checkpoint"), spark=spark)


def timeline(run: GridRun) -> list[dict]:
    """One row per batch: seconds from the first batch, rows/s admitted, the forecaster,
    value, Omega, executors, cost so far and profit."""
    if not run.metrics:
        return []
    t0 = run.metrics[0].started_at
    rows = []
    for m in run.metrics:
        d = m.dynamics or {}
        rows.append(
            {
                "t": round(m.started_at - t0, 1),
                "batch": m.batch_id,
                "rows": m.rows_in,
                "rate": round(m.rows_in / m.duration_s) if m.duration_s else None,
                "forecaster": m.alternates.get("forecast"),
                "value": d.get("value"),
                "omega": d.get("omega"),
                "executors": d.get("executors"),
                "cost": d.get("cost"),
                "profit": d.get("profit"),
                "profit_now": d.get("profit_now"),
                "backlog": sum(v for v in (m.backlog or {}).values() if v is not None),
            }
        )
    return rows


def print_report(run: GridRun) -> None:
    rows = timeline(run)
    print(
        "forecasters (profiled): "
        + ", ".join(f"{n}: value {a['value']:.3f}, {a['cost'] * 1e6:.1f} us/reading" for n, a in run.alternates.items())
    )
    print(f"rate trace: peak {run.peak:,.0f} readings/s, {run.phase_s:.0f} s phases at 15/50/100/50/15 % of it")
    print(
        f"{'t (s)':>7} {'batch':>5} {'rows':>7} {'backlog':>8} {'forecaster':>15} {'value':>6} {'omega':>6} "
        f"{'exec':>4} {'cost':>9} {'profit':>7}"
    )
    for r in rows:
        omega = "-" if r["omega"] is None else f"{r['omega']:.2f}"
        print(
            f"{r['t']:>7.1f} {r['batch']:>5} {r['rows']:>7,} {r['backlog']:>8,} {r['forecaster'] or '-':>15} "
            f"{r['value']:>6.3f} {omega:>6} {r['executors']:>4} {r['cost']:>9.5f} {r['profit']:>7.3f}"
        )
    switches = [
        (record, record.action)
        for record in map(parse_record, run.decisions)
        if isinstance(record, Decision) and record.action is not None and record.action.kind == SwitchAlternate.kind
    ]
    print(f"\n{len(switches)} forecaster switches:")
    for record, action in switches:
        print(f"  after batch {record.batch_id}: {action.value}  ({action.reason})")
    if rows:
        last = run.metrics[-1].dynamics
        print(
            f"\nover the run: value {last['value_mean']:.3f}, Omega {last['omega_mean'] or float('nan'):.3f}, "
            f"cost {last['cost']:.5f}, profit {last['profit']:.3f}"
        )


def plot(run: GridRun, path: str) -> None:
    """Value, Omega, rate, cost and profit over time, with the active forecaster shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = timeline(run)
    if not rows:
        return
    t = [r["t"] for r in rows]
    fig, axes = plt.subplots(4, 1, figsize=(9, 9), sharex=True)
    axes[0].plot(t, [r["rows"] for r in rows], label="rows admitted per batch")
    axes[0].plot(t, [r["backlog"] for r in rows], label="rows waiting (backlog)")
    axes[0].set_ylabel("rows")
    axes[1].step(t, [r["value"] for r in rows], where="post", label="value Gamma(t)")
    axes[1].plot(t, [r["omega"] if r["omega"] is not None else float("nan") for r in rows], label="Omega(t)")
    axes[1].set_ylabel("relative")
    axes[1].set_ylim(0, 1.05)
    axes[2].plot(t, [r["cost"] for r in rows], label="cost mu(t) ($)")
    axes[2].step(
        t, [r["executors"] * PRICE_PER_HOUR / 3600 * 1000 for r in rows], where="post", label="executors x price ($ per 1000 s)"
    )
    axes[2].set_ylabel("$")
    axes[3].plot(t, [r["profit"] for r in rows], label="profit Theta (run so far)")
    axes[3].plot(t, [r["profit_now"] for r in rows], label="profit of the interval", alpha=0.6)
    axes[3].axhline(0, color="grey", lw=0.5)
    axes[3].set_ylabel("Theta")
    axes[3].set_xlabel("seconds")
    for ax in axes:
        for i, r in enumerate(rows):
            if r["forecaster"] == "moving_average":
                end = t[i + 1] if i + 1 < len(t) else t[i] + 1
                ax.axvspan(t[i], end, color="orange", alpha=0.12, lw=0)
        ax.legend(loc="upper right", fontsize=7)
    axes[0].set_title("smart-grid demo: shaded while the cheap forecaster (moving average) runs")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def save(run: GridRun, path: str) -> None:
    with open(path, "w") as f:
        json.dump(
            {
                "peak": run.peak,
                "phase_s": run.phase_s,
                "alternates": run.alternates,
                "timeline": timeline(run),
                "switches": [d for d in run.decisions if d.get("type") == "decision"],
            },
            f,
            indent=1,
            default=str,
        )
