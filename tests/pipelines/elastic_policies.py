"""The pipeline of the elastic-policies test: a running count per meter with a wait a reading
(a model served elsewhere: in the keyed stage's two partitions, so its capacity grows with
the executors even on a 2-core machine), on a standalone cluster, under one of the thesis's schedulers (CE, GA or PLAStiCC)
and an input that rises above what one executor holds, then falls.

Run as ``python elastic_policies.py MASTER CHECKPOINT OUT POLICY`` (a driver of its own: the
test process may already hold a local SparkSession). It stops a few batches after the job
went back to one executor, or after ``DURATION_S``."""

from __future__ import annotations

import os
import sys
import time

import pyarrow as pa

import sluice
from sluice import sinks, sources

WAIT_S = 2e-3  # seconds a reading: about 500 readings/s a core
# 60/s while the query starts (one executor holds it), 600/s for 35 s (two needed), 60/s again
HIGH, LOW, RISE_S, FALL_S = 600.0, 60.0, 10.0, 45.0
DURATION_S = 90.0


def spec():
    return sources.generator(
        fields={"meter": sources.Keys(50, prefix="m"), "kwh": sources.Uniform(0.0, 2.0)},
        seed=5,
        rate=[(0, LOW), (RISE_S, HIGH), (FALL_S, LOW)],
    )


def count_served(key, rows: pa.Table, state):
    time.sleep(WAIT_S * rows.num_rows)
    state.update((state.value or 0) + rows.num_rows)
    return [{"meter": key[0], "n": state.value}]


def build(out: str) -> sluice.Pipeline:
    p = sluice.Pipeline("elastic_policies", partitions=2, max_parallelism=16)
    readings = p.source(spec(), name="readings")
    readings.key_by("meter").process(count_served, schema={"meter": "string", "n": "int64"}, name="counts").sink(
        sinks.files(os.path.join(out, "counts")), name="counts_out"
    )
    # billed by the second: an executor the rate no longer needs is worth releasing at once
    return p.economics(price_per_hour=1.0, billing="second")


def policy(name: str):
    from sluice.control.elastic import ce_policy, ga_policy, plasticc_policy

    # an executor registers within about 10 s here and its Python workers take about 5 s more
    # (the job stalls meanwhile); PLAStiCC looks past the start-up by three steps (as
    # benchmarks/elastic_live.py does), so an executor it starts has steps left to repay its stall
    options = {"price_per_hour": 1.0, "interval_s": 5.0, "startup_s": 15.0, "warmup_s": 5.0, "horizon": 6}
    factories = {"ce": ce_policy, "ga": ga_policy, "plasticc": plasticc_policy}
    return factories[name](**options)


def held(m) -> set[str]:
    return {e["id"] for e in m.executors if e.get("id") not in (None, "driver")}


def main(master: str, checkpoint: str, out: str, name: str) -> None:
    seen: dict[str, int | None] = {"grown_at": None, "shrunk_at": None}

    def finished(executor) -> bool:  # two more batches after the job went back to one executor
        m = executor.last_batch
        if m is None:
            return False
        if len(held(m)) >= 2:
            seen["grown_at"] = m.batch_id if seen["grown_at"] is None else seen["grown_at"]
        elif seen["grown_at"] is not None and seen["shrunk_at"] is None:
            seen["shrunk_at"] = m.batch_id
        return seen["shrunk_at"] is not None and m.batch_id >= seen["shrunk_at"] + 2

    build(out).run(
        checkpoint,
        master=master,
        policies=[policy(name)],
        executors=1,
        max_executors=2,
        stop_when=finished,
        ship=__file__,
        duration=DURATION_S,
    )


if __name__ == "__main__":
    main(*sys.argv[1:5])
