"""The built-in demo: smart-meter readings of a city's demand-response programme (the
smart-grid scenario of Kumbhare's thesis), parsed, filtered, keyed by meter, with running
statistics per meter and alerts on consumption spikes.

    readings -> parse (Python, vectorized) -> valid voltage (Spark SQL)
             -> key_by(meter) -> running statistics          -> files: stats/
             -> key_by(meter) -> spike detection (per-key state) -> files: alerts/ (JSON)
    corrupt readings -> dead letters (with the reason)
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice import Pipeline, agg, sinks, sources

SPIKE_FACTOR = 2.5  # a reading above 2.5x the meter's running mean is an alert
WARMUP_READINGS = 10  # no alerts before a meter has this many readings


def parse_readings(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Validate raw readings and derive watt-hours; a corrupt reading raises (and is
    isolated to the dead-letter sink by the runtime, the rest of the batch goes on)."""
    corrupt = pc.equal(batch.column("status"), "corrupt")
    if pc.any(corrupt).as_py():
        raise ValueError("corrupt reading: meter sent status 'corrupt'")
    wh = pc.multiply(batch.column("kwh"), 1000.0)
    return pa.RecordBatch.from_arrays(
        [batch.column("meter"), batch.column("ts"), batch.column("kwh"), wh, batch.column("voltage")],
        names=["meter", "ts", "kwh", "wh", "voltage"],
    )


ALERT_SCHEMA = pa.schema(
    [("meter", pa.string()), ("ts", pa.timestamp("us", tz="UTC")), ("kwh", pa.float64()), ("running_mean", pa.float64())]
)


def detect_spikes(key, rows: pa.Table, state) -> pa.Table | None:
    """Flag readings far above the meter's running mean (state: count and mean so far)."""
    count, mean = state.value or (0, 0.0)
    kwh = rows.column("kwh").to_numpy()
    # running mean before each reading, vectorized over the batch
    prior_counts = count + np.arange(len(kwh))
    sums = count * mean + np.concatenate([[0.0], np.cumsum(kwh)[:-1]])
    prior_means = np.divide(sums, prior_counts, out=np.zeros_like(sums), where=prior_counts > 0)
    spikes = (prior_counts >= WARMUP_READINGS) & (kwh > SPIKE_FACTOR * prior_means)
    new_count = count + len(kwh)
    state.update((new_count, (count * mean + kwh.sum()) / new_count))
    if not spikes.any():
        return None
    idx = np.flatnonzero(spikes)
    return pa.table(
        {
            "meter": pa.array([key[0]] * len(idx), pa.string()),
            "ts": rows.column("ts").take(pa.array(idx)),
            "kwh": pa.array(kwh[idx]),
            "running_mean": pa.array(prior_means[idx]),
        },
        schema=ALERT_SCHEMA,
    )


def build_pipeline(
    output_dir: str, rate: float | None = 20_000, meters: int = 1000, seed: int = 42, total_rows: int | None = None
) -> Pipeline:
    p = Pipeline("smart_meter_demo", partitions=2)
    readings = p.source(
        sources.generator(
            fields={
                "meter": sources.Keys(meters, distribution="zipf", skew=1.1, prefix="meter-"),
                "kwh": sources.Normal(0.4, 0.15),
                "voltage": sources.Normal(230.0, 6.0),
                "status": sources.Choice(("ok", "corrupt"), weights=(0.9999, 0.0001)),
                "ts": sources.EventTime(),
            },
            rate=rate,
            seed=seed,
            total_rows=total_rows,
            max_rows_per_batch=100_000,
        ),
        name="readings",
    )
    valid = readings.map_batches(
        parse_readings,
        schema={
            "meter": "string",
            "ts": "timestamp",
            "kwh": "double",
            "wh": "double",
            "voltage": "double",
        },
        name="parse",
    ).filter("voltage BETWEEN 210 AND 250 AND kwh >= 0", name="valid_voltage")
    stats = valid.key_by("meter").aggregate(
        readings=agg.count(),
        mean_kwh=agg.mean("kwh"),
        max_kwh=agg.max("kwh"),
        total_kwh=agg.sum("kwh"),
        name="meter_stats",
    )
    stats.sink(sinks.files(os.path.join(output_dir, "stats")), name="stats_files")
    alerts = valid.key_by("meter").process(detect_spikes, schema=ALERT_SCHEMA, name="spike_alerts")
    alerts.sink(sinks.files(os.path.join(output_dir, "alerts"), format="json"), name="alert_files")
    return p
