"""The pipeline of the elastic-executors test: a running count per meter on a standalone
cluster, driven by a scripted policy that holds one executor, asks for a second, and once
that one has run tasks, releases one again.

Run as ``python elastic_executors.py MASTER CHECKPOINT OUT`` (a driver of its own: the test
process already has a local SparkSession)."""

from __future__ import annotations

import os
import sys

import sluice
from sluice import agg, sinks, sources
from sluice.control import Action, ControlView, Executors, Policy

ROWS_PER_S = 2000


def spec():
    return sources.generator(
        fields={"meter": sources.Keys(50, prefix="m"), "kwh": sources.Uniform(0.0, 2.0)}, seed=5, rate=ROWS_PER_S
    )


def build(out: str) -> sluice.Pipeline:
    p = sluice.Pipeline("elastic_executors", partitions=2, max_parallelism=16)
    readings = p.source(spec(), name="readings")
    readings.key_by("meter").aggregate(n=agg.count(), name="counts").sink(
        sinks.files(os.path.join(out, "counts")), name="counts_out"
    )
    return p


class GrowThenShrink(Policy):
    """1 executor -> 2; once the second has run tasks of a batch -> 1; then done."""

    name = "grow_then_shrink"

    def __init__(self):
        self.state = "start"
        self.first: set[str] = set()
        self.joined: str | None = None
        self.finished_batch: int | None = None

    def propose(self, view: ControlView) -> list[Action]:
        held = {e["id"]: e for e in view.latest.executors if e.get("id") not in (None, "driver")}
        if self.state == "start" and view.resources.executors == 1:
            self.first, self.state = set(held), "growing"
            return [Executors(count=2, reason="scripted: ask for a second executor")]
        if self.state == "growing":
            new = [i for i, e in held.items() if i not in self.first and e.get("tasks", 0) > 0]
            if new:
                self.joined, self.state = new[0], "shrinking"
                return [Executors(count=1, reason=f"scripted: executor {new[0]} ran tasks; release one")]
        if self.state == "shrinking" and view.resources.executors == 1:
            self.state, self.finished_batch = "done", view.batch_id
        return []


def main(master: str, checkpoint: str, out: str) -> None:
    policy = GrowThenShrink()

    def finished(executor) -> bool:  # two more batches after the release was seen
        return (
            policy.finished_batch is not None
            and executor.last_batch is not None
            and executor.last_batch.batch_id >= policy.finished_batch + 2
        )

    build(out).run(checkpoint, master=master, policies=[policy], executors=1, stop_when=finished, ship=__file__, duration=400)


if __name__ == "__main__":
    main(*sys.argv[1:4])
