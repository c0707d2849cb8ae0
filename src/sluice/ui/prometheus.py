"""The Prometheus exposition of a job: its per-batch figures as gauges and counters.

A custom collector reads the :class:`JobView` on every scrape, so the endpoint shows exactly
what the checkpoint holds (the same figures as the dashboard) and needs no hook into the
running job. Counters are totals over the job's batches; gauges are the latest batch's.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from sluice.ui.job_view import PERCENTILES, JobView


def family(kind: str, name: str, doc: str, job: str, value=None, by: tuple[str, dict] | None = None):
    """A counter or gauge family with a ``job`` label: one value, or one per label value
    (``by=("source", {"readings": 350})``)."""
    cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
    labels = ["job"] + ([by[0]] if by else [])
    out = cls(name, doc, labels=labels)
    if by:
        for label, v in by[1].items():
            out.add_metric([job, label], v)
    elif value is not None:
        out.add_metric([job], value)
    return out


class JobCollector(Collector):
    def __init__(self, view: JobView, job: str):
        self.view, self.job = view, job

    def collect(self) -> Iterator:
        self.view.refresh()
        batches = [b for b in self.view.batches if not b["skipped"]]
        job = self.job
        policies: dict[str, int] = {}
        for d in self.view.decisions:
            if d.type != "decision":
                continue
            policy = d.policy
            policies[policy] = policies.get(policy, 0) + 1

        yield family("counter", "sluice_batches", "Micro-batches completed", job, len(batches))
        yield family(
            "counter", "sluice_source_rows", "Rows admitted from a source", job, by=("source", _sum_by(batches, "rows_by_source"))
        )
        yield family("counter", "sluice_sink_rows", "Rows written to a sink", job, by=("sink", _sum_by(batches, "sink_rows")))
        yield family(
            "counter",
            "sluice_operator_rows_out",
            "Rows an operator emitted",
            job,
            by=("operator", _sum_by(batches, "operator_rows")),
        )
        yield family(
            "counter",
            "sluice_operator_seconds",
            "Task time spent in an operator",
            job,
            by=("operator", _sum_by(batches, "operators")),
        )
        yield family(
            "counter", "sluice_dead_letters", "Records sent to the dead-letter sink", job, sum(b["dead_letters"] for b in batches)
        )
        yield family(
            "counter",
            "sluice_operator_dead_letters",
            'Records an operator sent to the dead-letter sink (operator "sources": records a source could not parse)',
            job,
            by=("operator", _sum_by(batches, "dead_letters_by_operator")),
        )
        yield family(
            "counter", "sluice_late_records", "Records that arrived behind the watermark", job, sum(b["late"] for b in batches)
        )
        yield family("counter", "sluice_controller_decisions", "Decisions the controller logged", job, by=("policy", policies))
        if not batches:
            return
        last = batches[-1]
        yield family("gauge", "sluice_last_batch_id", "Id of the latest completed micro-batch", job, last["batch_id"])
        yield family("gauge", "sluice_batch_duration_seconds", "Wall time of the latest micro-batch", job, last["duration_s"])
        yield family("gauge", "sluice_batch_rows", "Rows admitted by the latest micro-batch", job, last["rows_in"])
        yield family(
            "gauge", "sluice_throughput_rows_per_second", "Rows per second over the latest micro-batch", job, last["rows_per_s"]
        )
        yield family(
            "gauge",
            "sluice_source_backlog_rows",
            "Rows a source holds that no batch admitted yet",
            job,
            by=("source", last["backlog"]),
        )
        if isinstance(last["executors"], list):
            yield family(
                "gauge", "sluice_executors", "Executors of the session (the driver among them)", job, len(last["executors"])
            )
        yield family(
            "gauge",
            "sluice_plan_version",
            "Version (first batch) of the plan the latest batch ran with",
            job,
            last["plan_version"],
        )
        latency = GaugeMetricFamily(
            "sluice_sink_latency_seconds", "End-to-end latency at a sink in the latest batch", labels=["job", "sink", "quantile"]
        )
        for sink, lat in last["latency"].items():
            for p in PERCENTILES:
                if p in lat:
                    latency.add_metric([job, sink, f"0.{p[1:]}"], lat[p] / 1000.0)
        yield latency
        yield family(
            "gauge",
            "sluice_state_bytes",
            "Size of a stateful operator's state after the latest batch",
            job,
            by=("operator", last["state_bytes"]),
        )
        yield from self._event_time(job)
        constraints = self.view.constraints()
        for what, field in (("bound", "bound_ms"), ("value", "value_ms")):
            yield family(
                "gauge",
                f"sluice_constraint_{what}_seconds",
                f"{what.capitalize()} of a QoS constraint",
                job,
                by=("constraint", {n: c[field] / 1000.0 for n, c in constraints.items() if c[field] is not None}),
            )

    def _event_time(self, job: str) -> Iterator:
        """The watermark and event-time lags (nothing for a job without event time)."""
        event = self.view.event_time()
        if not event:
            return
        if event.get("watermark_us") is not None:
            yield family(
                "gauge",
                "sluice_watermark_seconds",
                "The job's event-time watermark (epoch seconds)",
                job,
                event["watermark_us"] / 1e6,
            )
        if event.get("lag_s") is not None:
            yield family(
                "gauge",
                "sluice_operator_watermark_lag_seconds",
                "How far a stateful operator's watermark is behind processing time (the job's one watermark)",
                job,
                by=("operator", dict.fromkeys(self.view.stateful_operators(), event["lag_s"])),
            )
        yield family(
            "gauge",
            "sluice_source_event_time_lag_seconds",
            "How far a source's latest event time is behind processing time",
            job,
            by=("source", {s: v["lag_s"] for s, v in event["sources"].items()}),
        )


def _sum_by(batches: list[dict], field: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for b in batches:
        for name, value in b[field].items():
            out[name] = out.get(name, 0) + value
    return out


def registry_for(view: JobView, job: str) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(JobCollector(view, job))
    return registry
