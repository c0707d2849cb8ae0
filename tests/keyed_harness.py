"""What the keyed-state tests on Spark share (the ``memory`` fixture, memory sinks cleared
around a test, is in conftest.py): a controller that moves key groups at random every batch, and a run cut after a batch and
restarted on the same checkpoint."""

from __future__ import annotations

import random
from collections.abc import Callable


class RandomRebalancer:
    """A controller that gives ``operator`` a random routing over 1-3 partitions after every
    batch; ``moves`` counts the key groups each change moved."""

    def __init__(self, operator: str, seed: int):
        self.operator, self.rng, self.moves = operator, random.Random(seed), []

    def __call__(self, metrics, plan):
        partitions = self.rng.choice([1, 2, 3])
        routing = [self.rng.randrange(partitions) for _ in range(plan.max_parallelism)]
        self.moves.append(sum(a != b for a, b in zip(plan.keyed[self.operator].routing, routing)))
        return plan.with_routing(metrics.batch_id + 1, self.operator, routing, partitions)


def run_with_restart(build: Callable, checkpoint: str, spark, stop_after_batch: int, **options):
    """Run ``build()`` until batch ``stop_after_batch`` is done, then a fresh ``build()`` on the
    same checkpoint to the end; the second run's result."""
    build().run(
        checkpoint,
        spark=spark,
        stop_when=lambda ex: ex.last_batch is not None and ex.last_batch.batch_id >= stop_after_batch,
        **options,
    )
    return build().run(checkpoint, spark=spark, **options)
