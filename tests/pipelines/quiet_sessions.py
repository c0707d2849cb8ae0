"""The pipeline of the quiet-stream tests: sessions and tumbling windows per meter over files
dropped in a directory, whose last file moves the watermark an hour ahead, after which no
more data comes. ``SLUICE_TEST_IN`` is the input directory (``write_inputs`` fills it),
``SLUICE_TEST_OUT`` where the file sinks write."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import sluice
from sluice import agg, sinks, sources
from sluice import windows as W

IN = os.environ.get("SLUICE_TEST_IN", "/tmp/sluice-quiet-in")
OUT = os.environ.get("SLUICE_TEST_OUT", "/tmp/sluice-quiet-out")
T0 = 1_750_000_000 * 1_000_000  # microseconds
S = 1_000_000
GAP_S, TUMBLING_S, DELAY_S = 5, 10, 1
PROCESSING_S = 2  # a processing-time tumbling window: closes by the clock alone
SCHEMA = pa.schema([("meter", pa.string()), ("ts", pa.timestamp("us", tz="UTC")), ("watts", pa.int64())])


def inputs() -> list[pa.Table]:
    """Three files, one batch each: two minutes of readings from 12 meters, in bursts so each
    meter has several sessions; then one reading of meter ``far`` an hour later."""
    rng = np.random.default_rng(7)
    files = []
    for part in range(2):
        n = 240
        meters = [f"m{i}" for i in rng.integers(0, 12, n)]
        # bursts: a reading every ~0.5 s inside bursts that start every ~12 s
        burst = rng.integers(0, 5, n) * 12 * S + rng.integers(0, 4 * S, n)
        ts = np.sort(T0 + part * 60 * S + burst)
        files.append(
            pa.table(
                {"meter": meters, "ts": pa.array(ts, pa.timestamp("us", tz="UTC")), "watts": rng.integers(0, 1000, n)},
                schema=SCHEMA,
            )
        )
    files.append(
        pa.table({"meter": ["far"], "ts": pa.array([T0 + 3600 * S], pa.timestamp("us", tz="UTC")), "watts": [1]}, schema=SCHEMA)
    )
    return files


def write_inputs(directory: str = IN) -> None:
    os.makedirs(directory, exist_ok=True)
    for i, table in enumerate(inputs()):
        pq.write_table(table, os.path.join(directory, f"part-{i}.parquet"))


def build(inbox: str = IN, out: str = OUT, idle_timeout=None) -> sluice.Pipeline:
    p = sluice.Pipeline("quiet_sessions", partitions=2, max_parallelism=16)
    readings = p.source(
        sources.directory(inbox, format="parquet", event_time="ts", watermark_delay=DELAY_S, max_rows_per_batch=1),
        name="readings",
        idle_timeout=idle_timeout,
    )
    meters = readings.key_by("meter")
    meters.window(W.session(GAP_S)).aggregate(n=agg.count(), total=agg.sum("watts"), name="sessions").sink(
        sinks.files(os.path.join(out, "sessions")), name="sessions_out"
    )
    meters.window(W.tumbling(TUMBLING_S)).aggregate(n=agg.count(), name="tumbling").sink(
        sinks.files(os.path.join(out, "tumbling")), name="tumbling_out"
    )
    meters.window(W.tumbling(PROCESSING_S), time="processing").aggregate(n=agg.count(), name="proc").sink(
        sinks.files(os.path.join(out, "proc")), name="proc_out"
    )
    return p


def expected() -> dict[str, set[tuple]]:
    """Every session and window the watermark of the last file closes (all but ``far``'s),
    computed from the records by brute force: (meter, start_us, end_us, n)."""
    table = pa.concat_tables(inputs())
    per_meter: dict[str, list[int]] = {}
    for meter, micros in zip(table["meter"].to_pylist(), table["ts"].cast(pa.int64()).to_pylist()):
        per_meter.setdefault(meter, []).append(micros)
    sessions, windows = set(), set()
    for meter, times in per_meter.items():
        if meter == "far":
            continue
        times.sort()
        first = last = times[0]
        n = 1
        for t in times[1:]:
            if t - last < GAP_S * S:
                last, n = t, n + 1
                continue
            sessions.add((meter, first, last + GAP_S * S, n))
            first = last = t
            n = 1
        sessions.add((meter, first, last + GAP_S * S, n))
        counts: dict[int, int] = {}
        for t in times:
            counts[t - t % (TUMBLING_S * S)] = counts.get(t - t % (TUMBLING_S * S), 0) + 1
        windows |= {(meter, start, start + TUMBLING_S * S, n) for start, n in counts.items()}
    return {"sessions": sessions, "tumbling": windows}


pipeline = build() if os.path.isdir(IN) else None  # built when run by `sluice run`
