"""The pipeline of the timer crash test: per meter, an event-time timer that fires once the
meter has been silent for 2 s of event time (the ``silence`` operator of
tests/state/test_process_timers.py), and a processing-time timer each meter registers on its
first record, which fires once, in the next batch. Both write to file sinks, with the raw
records beside them so a test can compute the reference over the batches as they ran.
``SLUICE_TEST_OUT`` says where the sinks write."""

from __future__ import annotations

import os
import time

import numpy as np
import pyarrow as pa

import sluice
from sluice import sinks, sources
from sluice.runtime.kernels.process import to_micros

OUT = os.environ.get("SLUICE_TEST_OUT", "/tmp/sluice-timers-crash")
ROWS = int(os.environ.get("SLUICE_TEST_ROWS", "8000"))
PER_BATCH = int(os.environ.get("SLUICE_TEST_PER_BATCH", "1000"))
QUIET_US = 2_000_000
ALERTS = pa.schema([("k", pa.string()), ("silent_at", pa.int64())])


def silence(key, rows, state):
    """Keep one event-time timer per meter, ``QUIET_US`` after its latest reading (the rule
    ``silence_reference`` of tests/state/test_process_timers.py computes)."""
    latest = int(np.max(rows["ts"].cast(pa.int64()).to_numpy()))
    if state.value is not None:
        if latest + QUIET_US <= state.value:
            return None
        state.delete_event_timer(state.value)
    state.update(latest + QUIET_US)
    state.register_event_timer(latest + QUIET_US)
    return None


def alert(key, when, state):
    state.clear()
    return [{"k": key[0], "silent_at": to_micros(when)}]


def arm(key, rows, state):
    """On a meter's first record, a processing-time timer at the clock's time now: the next
    batch is processed later, so it fires there (and only there: it is then gone)."""
    if state.value is None:
        state.update("armed")
        state.register_processing_timer(int(time.time() * 1e6))


def ring(key, when, state):
    state.update("rung")  # kept, so the meter never arms again
    return [{"k": key[0], "rang": 1}]


def build(out: str = OUT, rows: int = ROWS, per_batch: int = PER_BATCH) -> sluice.Pipeline:
    p = sluice.Pipeline("timers_crash", partitions=2, max_parallelism=16)
    raw = p.source(
        sources.generator(
            fields={"k": sources.Keys(1_500, prefix="m"), "ts": sources.EventTime(step=0.001)},
            total_rows=rows,
            seed=4,
            start_time=1_700_000_000.0,
            max_rows_per_batch=per_batch,
        ),
        name="raw",
    )
    raw.sink(sinks.files(os.path.join(out, "raw")), name="raw_out")
    meters = raw.key_by("k")
    meters.process(silence, schema=ALERTS, on_timer=alert, name="silence").sink(
        sinks.files(os.path.join(out, "alerts")), name="alerts_out"
    )
    meters.process(arm, schema={"k": "string", "rang": "int"}, on_timer=ring, name="ring").sink(
        sinks.files(os.path.join(out, "rings")), name="rings_out"
    )
    return p


pipeline = build()
