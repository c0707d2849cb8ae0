"""``sluice status CHECKPOINT``: a job summarized from its checkpoint (running or finished):
batches, rates, latency, state size, dead letters and late records, the plan and the
controller's last decisions. Reads files only: no Spark is started."""

from __future__ import annotations

import os
import time

from sluice.errors import ConfigError


def register(subparsers) -> None:
    p = subparsers.add_parser("status", help="summarize a job from its checkpoint")
    p.add_argument("checkpoint", help="the job's checkpoint directory")
    p.add_argument("--decisions", type=int, default=5, help="how many of the last decisions to show")
    p.set_defaults(func=main)


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} TiB"


def _clock(epoch_s: float) -> str:
    """Wall-clock time in UTC, as a person reads it."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch_s))


def status_text(checkpoint: str, decisions: int = 5, now: float | None = None) -> str:
    from sluice.cli.summary import median
    from sluice.ui.job_view import JobView

    view = JobView(checkpoint)
    view.refresh()
    batches = [b for b in view.batches if not b["skipped"]]
    if not batches:
        return f"{checkpoint}: no batch recorded yet (no metrics.jsonl lines)"
    now = time.time() if now is None else now
    t = view.totals()
    last = batches[-1]
    recent = batches[-10:]
    span = recent[-1]["t"] + recent[-1]["duration_s"] - recent[0]["t"]
    whole = t["last_t"] - t["first_t"]
    age = now - t["last_t"]
    from sluice.ui.job_view import recorded_pipeline_name

    name = recorded_pipeline_name(checkpoint)
    lines = [
        f"job {name!r} at checkpoint {checkpoint}" if name else f"job checkpoint {checkpoint}",
        f"  batches            {t['batches']:,} (last: {last['batch_id']}, {age:,.0f} s ago)",
        f"  rows               {t['rows']:,} in {whole:,.1f} s: {t['rows'] / max(whole, 1e-9):,.0f} rows/s; "
        f"last {len(recent)} batches {sum(b['rows_in'] for b in recent) / max(span, 1e-9):,.0f} rows/s",
        f"  batch duration     median {median([b['duration_s'] for b in batches]):.2f} s, last {last['duration_s']:.2f} s",
    ]
    latencies = [b for b in batches if b["latency"]]
    if latencies:
        worst = {p: [max(lat.get(p, 0) for lat in b["latency"].values()) for b in latencies] for p in ("p50", "p95", "p99")}
        lines.append(
            f"  latency            median of batches p50 {median(worst['p50']):,.0f} ms  "
            f"p95 {median(worst['p95']):,.0f} ms  p99 {median(worst['p99']):,.0f} ms; "
            f"last batch p99 {worst['p99'][-1]:,.0f} ms"
        )
    for name, c in view.constraints().items():
        holds = c.get("holds")
        state = c.get("state") or ("" if holds is None else "met" if holds else "violated")
        value = f"mean {c['value_ms']:,.0f} ms" if c.get("value_ms") is not None else "not measured yet"
        bound = f"{c['bound_ms']:,.0f} ms" if c.get("bound_ms") is not None else "?"
        lines.append(f"  constraint {name:<8} {value} against a bound of {bound}: {state}")
    backlog = sum(last["backlog"].values())
    lines.append(f"  backlog            {backlog:,} rows at the sources after the last batch")
    state_sizes = last["state_bytes"]
    if state_sizes:
        lines.append(
            f"  state              {_bytes(sum(state_sizes.values()))}: "
            + ", ".join(f"{op} {_bytes(n)}" for op, n in state_sizes.items())
        )
    event = view.event_time()
    if event:
        wm = event.get("watermark_us")
        if event.get("ended"):
            text = "the input ended: the last batch closed every window"
        elif wm is not None:
            text = f"watermark {_clock(wm / 1e6)}, {event['lag_s']:,.1f} s behind (one watermark for every stateful operator)"
        else:
            text = "no watermark yet"
        per_source = "; ".join(
            f"{s} latest event {_clock(v['max_event_us'] / 1e6)} ({v['lag_s']:,.1f} s behind)"
            for s, v in event["sources"].items()
        )
        lines.append(f"  event time         {text}" + (f"; {per_source}" if per_source else ""))
    by_operator: dict[str, int] = {}
    for b in batches:
        for op, n in b["dead_letters_by_operator"].items():
            by_operator[op] = by_operator.get(op, 0) + n
    split = ", ".join(f"{op} {n:,}" for op, n in sorted(by_operator.items(), key=lambda kv: -kv[1]))
    lines.append(
        f"  dead letters       {t['dead_letters']:,}" + (f" ({split})" if split else "") + f"    late records {t['late']:,}"
    )
    if last.get("executors"):
        lines.append(
            f"  executors          {len(last['executors'])}: " + ", ".join(e.get("host", "?") for e in last["executors"])
        )
    plan = view.plan()
    if plan:
        stages = ", ".join(f"{op} {s['partitions']} partitions" for op, s in plan["keyed"].items())
        lines.append(f"  plan               version {plan['version']}" + (f": {stages}" if stages else ""))
    if view.decisions:
        lines.append(f"  decisions          {len(view.decisions)}; the last {min(decisions, len(view.decisions))}:")
        for d in view.decisions[-decisions:]:
            measured = f"; measured {d.measured}" if d.measured else ""
            lines.append(f"    batch {d.batch_id}: {d.policy} {d.action} - {d.reason}{measured}")
    else:
        lines.append("  decisions          none logged")
    return "\n".join(lines)


def main(args) -> int:
    if "://" not in args.checkpoint and not os.path.isdir(args.checkpoint):
        raise ConfigError(f"no checkpoint directory at {args.checkpoint}")
    print(status_text(args.checkpoint, args.decisions))
    return 0
