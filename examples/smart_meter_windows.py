"""Per-meter 15-minute sliding averages every minute over the smart-meter stream, with late
readings reported.

    .venv/bin/python examples/smart_meter_windows.py [--rows 200000] [--out /tmp/meter-windows]
    sluice run examples/smart_meter_windows.py --checkpoint /tmp/meter-windows/checkpoint

The stream is the demo's smart-meter readings (Kumbhare's smart-grid scenario): 500 meters
each report about once a minute of event time, up to 3 minutes out of order; about 1 % of
the readings were buffered by a meter that lost its connection and arrive 30 minutes late.
The source's watermark waits 1 minute; a window stays open 1 more minute (allowed lateness).
Readings later than that are not dropped silently: they go to the window operator's
``late`` side output (``<checkpoint>/side/avg_15m/late/``), are counted in the batch
metrics (``side_late``), and this script prints them.

Each 15-minute window every minute is the union of 15 one-minute panes: a reading updates
one pane, and a window combines its 15 panes (C-MR's sub-window combine), instead of being
copied into the 15 windows that contain it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice import Pipeline, agg, sinks, sources
from sluice import windows as W

METERS = 500
START = 1_767_225_600.0  # 2026-01-01 00:00 UTC
OUT = os.environ.get("SLUICE_EXAMPLE_OUT", "/tmp/sluice-meter-windows")


BUFFERED_DELAY_US = 30 * 60 * 1_000_000


def buffered_uploads(batch: pa.RecordBatch) -> pa.RecordBatch:
    """About 1 % of readings (chosen by their timestamp, so a replay chooses the same) were
    buffered during an outage: they carry a reading time 30 minutes before they arrive."""
    micros = batch.column("ts").cast(pa.int64()).to_numpy()
    buffered = micros % 61 == 1
    ts = pa.array(np.where(buffered, micros - BUFFERED_DELAY_US, micros)).cast(batch.schema.field("ts").type)
    return pa.RecordBatch.from_arrays(
        [ts if name == "ts" else batch.column(name) for name in batch.schema.names], schema=batch.schema
    )


def build(out: str = OUT, rows: int = 200_000, per_batch: int = 20_000) -> Pipeline:
    p = Pipeline("smart_meter_windows", partitions=2)
    readings = p.source(
        sources.generator(
            fields={
                "meter": sources.Keys(METERS, distribution="zipf", skew=0.6, prefix="meter-"),
                "kwh": sources.Normal(0.4, 0.15),
                "voltage": sources.Normal(230.0, 6.0),
                # one reading per meter per minute on average; up to 3 minutes late
                "ts": sources.EventTime(jitter=180.0, step=60.0 / METERS),
            },
            total_rows=rows,
            seed=7,
            start_time=START,
            max_rows_per_batch=per_batch,
            watermark_delay=60.0,
        ),
        name="readings",
    )
    arriving = readings.map_batches(buffered_uploads, name="buffered_uploads")
    valid = arriving.filter("voltage BETWEEN 210 AND 250 AND kwh >= 0", name="valid")
    averages = (
        valid.key_by("meter")
        .window(W.sliding("15m", "1m"), allowed_lateness="1m")
        .aggregate(
            readings=agg.count(),
            avg_kwh=agg.mean("kwh"),
            peak_kwh=agg.max("kwh"),
            name="avg_15m",
        )
    )
    averages.sink(sinks.files(os.path.join(out, "averages")), name="averages_out")
    return p


pipeline = build()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000, help="readings to generate (500 per minute of event time)")
    parser.add_argument("--out", default=OUT)
    args = parser.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    checkpoint = os.path.join(args.out, "checkpoint")
    result = build(args.out, args.rows).run(checkpoint)

    from sluice.runtime.side_outputs import read_side_output
    from sluice.sinks import read_files

    averages = read_files(os.path.join(args.out, "averages"))
    late = read_side_output(checkpoint, "side/avg_15m/late")
    print(f"{result.rows_in:,} readings in {result.batches} batches ({result.elapsed_s:.0f} s with Spark's start-up)")
    print(f"{averages.num_rows:,} window results (15-minute averages every minute) in {args.out}/averages")
    if averages.num_rows:
        busiest = averages.filter(pc.equal(averages["meter"], "meter-0")).sort_by("window_start")
        print("meter-0, last windows:")
        for row in busiest.slice(max(busiest.num_rows - 5, 0)).to_pylist():
            print(
                f"  {row['window_start']:%H:%M}-{row['window_end']:%H:%M}  {row['readings']:3d} readings  "
                f"avg {row['avg_kwh']:.3f} kWh  peak {row['peak_kwh']:.3f} kWh"
            )
    print(f"{len(late):,} late readings (after their windows closed) reported in {checkpoint}/side/avg_15m/late")
    for record in late[:3]:
        print("  e.g.", json.loads(record["record"]))
    print("(the input ended with a final watermark at the end of time: the windows still open were emitted then)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
