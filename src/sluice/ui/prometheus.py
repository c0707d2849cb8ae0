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


class JobCollector(Collector):
    def __init__(self, view: JobView, job: str):
        self.view, self.job = view, job

    def collect(self) -> Iterator:
        self.view.refresh()
        batches = [b for b in self.view.batches if not b["skipped"]]
        job = self.job

        def counter(name, doc, labels=()):
            return CounterMetricFamily(name, doc, labels=["job", *labels])

        def gauge(name, doc, labels=()):
            return GaugeMetricFamily(name, doc, labels=["job", *labels])

        total_batches = counter("sluice_batches", "Micro-batches completed")
        total_batches.add_metric([job], len(batches))
        yield total_batches

        rows = counter("sluice_source_rows", "Rows admitted from a source", ["source"])
        for source, n in _sum_by(batches, "rows_by_source").items():
            rows.add_metric([job, source], n)
        yield rows

        sink_rows = counter("sluice_sink_rows", "Rows written to a sink", ["sink"])
        for sink, n in _sum_by(batches, "sink_rows").items():
            sink_rows.add_metric([job, sink], n)
        yield sink_rows

        op_rows = counter("sluice_operator_rows_out", "Rows an operator emitted", ["operator"])
        for op, n in _sum_by(batches, "operator_rows").items():
            op_rows.add_metric([job, op], n)
        yield op_rows

        dead = counter("sluice_dead_letters", "Records sent to the dead-letter sink")
        dead.add_metric([job], sum(b["dead_letters"] for b in batches))
        yield dead
        late = counter("sluice_late_records", "Records that arrived behind the watermark")
        late.add_metric([job], sum(b["late"] for b in batches))
        yield late

        op_time = counter("sluice_operator_seconds", "Task time spent in an operator", ["operator"])
        for op, seconds in _sum_by(batches, "operators").items():
            op_time.add_metric([job, op], seconds)
        yield op_time

        decisions = counter("sluice_controller_decisions", "Decisions the controller logged", ["policy"])
        by_policy: dict[str, int] = {}
        for d in self.view.decisions:
            policy = str(d.get("policy", "unknown"))
            by_policy[policy] = by_policy.get(policy, 0) + 1
        for policy, n in by_policy.items():
            decisions.add_metric([job, policy], n)
        yield decisions

        if not batches:
            return
        last = batches[-1]
        last_id = gauge("sluice_last_batch_id", "Id of the latest completed micro-batch")
        last_id.add_metric([job], last["batch_id"])
        yield last_id
        duration = gauge("sluice_batch_duration_seconds", "Wall time of the latest micro-batch")
        duration.add_metric([job], last["duration_s"])
        yield duration
        batch_rows = gauge("sluice_batch_rows", "Rows admitted by the latest micro-batch")
        batch_rows.add_metric([job], last["rows_in"])
        yield batch_rows
        throughput = gauge("sluice_throughput_rows_per_second", "Rows per second over the latest micro-batch")
        throughput.add_metric([job], last["rows_per_s"])
        yield throughput
        backlog = gauge("sluice_source_backlog_rows", "Rows a source holds that no batch admitted yet", ["source"])
        for source, n in last["backlog"].items():
            backlog.add_metric([job, source], n)
        yield backlog
        latency = gauge("sluice_sink_latency_seconds", "End-to-end latency at a sink in the latest batch",
                        ["sink", "quantile"])
        for sink, lat in last["latency"].items():
            for p in PERCENTILES:
                if p in lat:
                    latency.add_metric([job, sink, f"0.{p[1:]}"], lat[p] / 1000.0)
        yield latency
        plan = gauge("sluice_plan_version", "Version (first batch) of the plan the latest batch ran with")
        if last["plan_version"] is not None:
            plan.add_metric([job], last["plan_version"])
        yield plan
        bounds = gauge("sluice_constraint_bound_seconds", "Bound of a QoS constraint", ["constraint"])
        values = gauge("sluice_constraint_value_seconds", "Measured value of a QoS constraint", ["constraint"])
        for name, c in self.view.constraints().items():
            if c["bound_ms"] is not None:
                bounds.add_metric([job, name], c["bound_ms"] / 1000.0)
            if c["value_ms"] is not None:
                values.add_metric([job, name], c["value_ms"] / 1000.0)
        yield bounds
        yield values


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
