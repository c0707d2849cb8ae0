"""Run every benchmark one after another, each in a process of its own, and summarize them.

    .venv/bin/python benchmarks/run_all.py --quick [--only a,b] [--list] [--lock PATH ...]

Each benchmark runs its own ``--quick`` mode (its full mode without ``--quick``) in a
subprocess from the repository root; its output is passed through, each line prefixed with
its name, and its last line (one JSON object: the benchmark's figures, ``anchor``,
``outputs_equal``, ``load``, cores and versions, written by ``measure.Record``) is kept. The
whole run holds the bench lock (``/tmp/sluice-bench.lock``, ``fcntl.flock``; more with
``--lock``), so no other benchmark measures beside it on the same machine. Run under a
wrapper that already holds that lock, pass ``--no-lock``.

Every benchmark still writes its own results file (``docs/results/<name>.json``). This one
prints one JSON line per benchmark as it ends and, last, one JSON line with each
benchmark's headline ``ratio``, ``anchor``, ``outputs_equal``, exit status and seconds, and
writes the same to ``docs/results/run_all_quick.json`` (``run_all.json`` for full modes).

``EXPECTED_QUICK_S`` is each quick mode's expected duration on 2 quiet cores; ``--list``
prints them, with the seconds each took in the last run where one is on file. The quick
modes together are meant to take under ``BUDGET_S`` (30 minutes).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "benchmarks"
RESULTS = ROOT / "docs" / "results"
BENCH_LOCK = "/tmp/sluice-bench.lock"
BUDGET_S = 30 * 60


@dataclass(frozen=True)
class Bench:
    """One benchmark: how to start it, and its quick mode's expected seconds on 2 quiet cores."""

    name: str
    expected_quick_s: int
    module: str | None = None  # run as ``python -m module`` (a package), else benchmarks/<name>.py

    def command(self, quick: bool) -> list[str]:
        start = ["-m", self.module] if self.module else [str(HERE / f"{self.name}.py")]
        return [sys.executable, *start, *(["--quick"] if quick else [])]


# In the order they run: the simulators first (no Spark), then Spark on local[2], then the
# standalone clusters. Expected seconds on 2 cores: measured for planning, balancing,
# balancing_scale, dynamic_scheduling, chaining, collocation, joins, keyed_throughput,
# state_ttl and startup (one quick run each, load 3-11); the others estimated from their
# workload and earlier runs. --list shows them beside the seconds of the last run on file.
BENCHMARKS: dict[str, Bench] = {
    b.name: b
    for b in (
        Bench("planning", 5),
        Bench("balancing", 45),
        Bench("balancing_scale", 60),
        Bench("dynamic_scheduling", 90),
        Bench("autopilot", 90),
        Bench("chaining", 20),
        Bench("collocation", 25),
        Bench("joins", 65),
        Bench("keyed_throughput", 35),
        Bench("sliding_windows", 120),
        Bench("state_ttl", 70),
        Bench("skew_balancing", 160),  # with Spark's groupBy on both state stores
        Bench("dynamic_chaining", 180),
        Bench("latency_constraint", 530),  # with the outage and catch-up phases (5 runs x ~50 s more)
        Bench("plan_validation", 150),
        Bench("startup", 100),
        Bench("recovery", 180),
        Bench("chaos", 760),  # 20 kills: 21 x 33 s of input, then the checks
        Bench("soak", 260),  # 180 s of input, then the checks
        Bench("connectors", 150),
        Bench("latency_floor", 170),
        Bench("nexmark", 240, module="benchmarks.nexmark"),
        Bench("collocation_keys", 120),
        Bench("cluster_recovery", 150),
        Bench("elastic_live", 240),
        Bench("rescaling", 480),  # with Spark's static peak and dynamic allocation
    )
}


def benchmark_scripts() -> set[str]:
    """The names of the benchmarks in benchmarks/: every script with a main that runs as a
    program, and every package with a ``__main__``."""
    names = set()
    for path in HERE.glob("*.py"):
        text = path.read_text()
        if path.name != "run_all.py" and "def main(" in text and '__name__ == "__main__"' in text:
            names.add(path.stem)
    names |= {d.name for d in HERE.iterdir() if (d / "__main__.py").is_file()}
    return names


def last_json(lines: list[str]) -> dict | None:
    """The last line that is one JSON object (a benchmark's summary), if any."""
    for line in reversed(lines):
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return None


def run_one(bench: Bench, quick: bool, timeout_s: float) -> dict:
    """Run one benchmark in its own process group, its output passed through; returns its
    summary: status, seconds, and the headline fields of its last JSON line."""
    started = time.time()
    proc = subprocess.Popen(
        bench.command(quick),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        start_new_session=True,  # its Spark JVMs and children go with it on a timeout
    )
    lines: list[str] = []
    timed_out = threading.Event()

    def stop() -> None:
        timed_out.set()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)

    watchdog = threading.Timer(timeout_s, stop)
    watchdog.start()
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            lines.append(line)
            print(f"[{bench.name}] {line}", end="", flush=True)
        rc = proc.wait()
    finally:
        watchdog.cancel()
    elapsed = round(time.time() - started, 1)
    line = last_json(lines) or {}
    status = f"timeout ({timeout_s:.0f} s)" if timed_out.is_set() else ("ok" if rc == 0 and line else f"failed (exit {rc})")
    return {
        "status": status,
        "elapsed_s": elapsed,
        "expected_s": bench.expected_quick_s if quick else None,
        "ratio": line.get("ratio"),
        "ratio_is": line.get("ratio_is"),
        "mode": line.get("mode"),
        "anchor": line.get("anchor"),
        "outputs_equal": line.get("outputs_equal"),
        "outputs_compared": line.get("outputs_compared"),
        "load": line.get("load"),
    }


def hold_locks(paths: list[str]) -> list:
    """Hold an exclusive flock on each path (waiting for it, saying so) until this process ends."""
    held = []
    for path in paths:
        f = open(path, "a")  # held open for the whole run
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(
                f"waiting for {path} (another benchmark holds it; run under a wrapper holding it already, pass --no-lock)",
                flush=True,
            )
            fcntl.flock(f, fcntl.LOCK_EX)
        held.append(f)
    return held


def results_path(quick: bool) -> Path:
    return RESULTS / ("run_all_quick.json" if quick else "run_all.json")


def listing(names: list[str], quick: bool) -> str:
    """The benchmarks in run order, with expected and last measured seconds."""
    last = {}
    path = results_path(quick)
    if path.exists():
        last = json.loads(path.read_text()).get("benchmarks", {})
    rows = []
    for name in names:
        took = last.get(name, {}).get("elapsed_s")
        rows.append(
            f"{name:20s} expected {BENCHMARKS[name].expected_quick_s:>4d} s quick"
            + (f"   last run {took:>6.0f} s ({last[name]['status']})" if took is not None else "")
        )
    total = sum(BENCHMARKS[n].expected_quick_s for n in names)
    rows.append(f"{'total':20s} expected {total:>4d} s quick (budget {BUDGET_S} s)")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="each benchmark's quick mode")
    parser.add_argument("--only", default=None, help="comma-separated benchmarks to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and their expected seconds, and stop")
    parser.add_argument("--lock", action="append", default=[], help="another lock file to hold (repeatable)")
    parser.add_argument("--no-lock", action="store_true", help="hold no lock (the caller holds the bench lock)")
    parser.add_argument(
        "--timeout-factor", type=float, default=4.0, help="stop a quick mode after this many times its expected seconds"
    )
    args = parser.parse_args(argv)
    names = list(BENCHMARKS)
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in names if n not in BENCHMARKS]
        if unknown:
            parser.error(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
    if args.list:
        print(listing(names, True))
        return 0
    held = [] if args.no_lock else hold_locks([BENCH_LOCK, *args.lock])
    sys.path.insert(0, str(HERE))
    from measure import environment

    load_before = [round(x, 2) for x in os.getloadavg()]
    started = time.time()
    summary: dict[str, dict] = {}
    for i, name in enumerate(names, 1):
        bench = BENCHMARKS[name]
        print(
            f"== {i}/{len(names)} {name} ({'quick' if args.quick else 'full'}; expected {bench.expected_quick_s} s "
            f"quick; {time.time() - started:.0f} s so far)",
            flush=True,
        )
        timeout = bench.expected_quick_s * args.timeout_factor if args.quick else 6 * 3600
        summary[name] = run_one(bench, args.quick, timeout)
        print(json.dumps({"benchmark": name, **summary[name]}), flush=True)
    env = environment()
    path = results_path(args.quick)
    if args.only and path.exists():  # a partial run updates its benchmarks in the last summary
        summary = {**json.loads(path.read_text()).get("benchmarks", {}), **summary}
    elapsed = round(sum(s["elapsed_s"] for s in summary.values()), 1)
    out = {
        "benchmark": "run_all",
        "mode": "quick" if args.quick else "full",
        "elapsed_s": elapsed,
        "elapsed_is": "the benchmarks' seconds summed (with --only, those on file for the others)",
        "budget_s": BUDGET_S if args.quick else None,
        # said only of a summary that holds every benchmark
        "within_budget": elapsed <= BUDGET_S if args.quick and set(summary) >= set(BENCHMARKS) else None,
        "updated": names,
        "failed": [n for n, s in summary.items() if s["status"] != "ok"],
        "outputs_unequal": [n for n, s in summary.items() if s["outputs_equal"] is False],
        "benchmarks": summary,
        **env,
        "load": {"before": load_before, "after": env["load"]},
    }
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out), flush=True)
    for f in held:
        f.close()
    return 0 if not out["failed"] else 1


if __name__ == "__main__":
    sys.exit(main())
