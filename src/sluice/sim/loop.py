"""The controlled run every simulator shares: batch after batch, the controller choosing the
next Plan after each, as on Spark (from the next batch on).

An engine is anything with ``step(plan, cap) -> BatchMetrics | None``: one batch under
``plan`` admitting at most ``cap`` rows (None: no cap; an engine without admission ignores
it), or None once its input or horizon has ended. The batches it yields are the runtime's
own metrics record (``sluice.core.metrics.BatchMetrics``), so the controller and the
policies read a simulated batch exactly as a live one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from sluice.core.metrics import BatchMetrics


class Engine(Protocol):
    def step(self, plan, cap: int | None = None) -> BatchMetrics | None: ...


def admission_cap(controller) -> int | None:
    """The rows the controller's admission lets into the next batch (None: no cap, or no
    controller)."""
    if controller is None:
        return None
    limits = controller.admission.current()
    return None if any(v is None for v in limits.values()) else sum(limits.values())


def run_controlled(
    engine: Engine,
    controller,
    plan,
    batches: int | None = None,
    on_batch: Callable[[BatchMetrics, object, float], None] | None = None,
) -> tuple[list[BatchMetrics], object]:
    """Run ``batches`` batches (None: until the engine ends), each admitting what the
    controller's admission allows, the controller (None: a static job) deciding after each;
    ``on_batch(batch, plan, controller_seconds)`` sees each batch with the Plan it ran with.
    Returns the batches and the last Plan."""
    out: list[BatchMetrics] = []
    while batches is None or len(out) < batches:
        batch = engine.step(plan, admission_cap(controller))
        if batch is None:
            break
        out.append(batch)
        started = time.perf_counter()
        new = controller(batch, plan) if controller is not None else None
        if on_batch is not None:
            on_batch(batch, plan, time.perf_counter() - started)
        if new is not None:
            plan = new
    return out, plan
