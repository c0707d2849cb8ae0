"""What the terminal says while a job runs: an escalation as one line that agrees with the
progress line's figures, and nothing from Python's warning machinery."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap

from sluice.cli.progress import ProgressLine

STATE = {
    "constraints": {
        "latency_1": {
            "bound_ms": 2000.0,
            "mean_ms": 2310.4,
            "p95_ms": 2890.0,
            "batches": 12,
            "rows": 480_000,
            "state": "escalated",
        }
    },
    "escalations": {
        "latency_1": {
            "bottleneck": "per_meter",
            "max_rate": 31_000.0,
            "offered_rate": 40_000.0,
            "fixed_cost_ms": 180.0,
            "us_per_row": 20.0,
        }
    },
    "last_decision": None,
}


def test_an_escalation_is_one_line_with_the_window_it_judged():
    out = io.StringIO()
    progress = ProgressLine(stream=out)
    progress.control(STATE)
    progress.control(STATE)  # still escalated: said once
    lines = out.getvalue().splitlines()
    assert lines == [
        "sluice: latency bound 'latency_1' cannot be kept by sizing batches (bound 2,000 ms; mean 2,310 ms over its "
        "window of the last 12 batch(es), 480,000 rows; p95 2,890 ms): a batch's fixed cost 180 ms, offered 40,000 "
        "rows/s, holds up to about 31,000 rows/s, bottleneck per_meter; see `sluice status` and docs/control.md"
    ]
    progress.control({**STATE, "escalations": {}})  # it ended
    progress.control(STATE)  # and started again: said again
    assert len(out.getvalue().splitlines()) == 2


def test_run_shows_an_escalation_warning_as_one_line_without_source_lines():
    code = textwrap.dedent("""
        import logging, warnings
        from sluice.cli.run import _escalations_as_lines
        from sluice.control import EscalationWarning
        _escalations_as_lines(quiet=True)
        warnings.warn("latency constraint 'latency_1' cannot be met: at 40,000 rows/s the bound cannot hold",
                      EscalationWarning, stacklevel=1)
        logging.getLogger("sluice.control").warning("constraint %s cannot be met: %s", "latency_1", "why")
        warnings.warn("another warning", UserWarning)
    """)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60)
    lines = out.stderr.splitlines()
    assert lines[0] == "sluice: latency constraint 'latency_1' cannot be met: at 40,000 rows/s the bound cannot hold"
    assert not any("cannot be met" in line for line in lines[1:])  # the controller's log line is not repeated
    assert any("UserWarning: another warning" in line for line in lines)  # other warnings still show


def test_a_source_waiting_for_its_broker_is_said_every_few_seconds(tmp_path):
    """What a connector source reports while its broker is down (``runtime.connectors.reader``)
    becomes ``waiting for ... (12 s of 30)`` lines, and a line when it is back."""
    from sluice.cli.waiting import BrokerWaitLines
    from sluice.runtime.sources.control import BacklogReporter

    reporter = BacklogReporter(str(tmp_path), "orders")
    down = {
        "source": "orders",
        "kind": "NatsSource",
        "planned_rows": 0,
        "available_rows": None,
        "backlog": None,
        "batch_rows": 0,
        "max_rows": None,
        "total_rows": None,
        "exhausted": False,
        "error": "NATS JetStream at nats://127.0.0.1:4299 (stream 'orders') is unreachable: nats: no servers "
        "available for connection",
        "broker": "NATS JetStream at nats://127.0.0.1:4299 (stream 'orders')",
        "down_s": 12.2,
        "patience_s": 30.0,
    }
    out = io.StringIO()
    lines = BrokerWaitLines(str(tmp_path), ["orders"], stream=out, every_s=3.0)
    import time

    now = time.time()
    reporter.report({**down, "time": now}, planned_batch=False)
    assert lines.check(now) == [
        "sluice: waiting for NATS JetStream at nats://127.0.0.1:4299 (stream 'orders') (12 s of 30): nats: no servers "
        "available for connection"
    ]
    assert lines.check(now + 1) == []  # not more often than every 3 s
    assert len(lines.check(now + 3.5)) == 1
    reporter.report({**{k: v for k, v in down.items() if k not in ("error", "down_s")}, "time": now + 4}, planned_batch=True)
    assert lines.check(now + 4.5) == ["sluice: source 'orders' reached its broker again"]
    assert out.getvalue().count("\n") == 3
