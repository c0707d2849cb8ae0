"""Aggregates for ``KeyedStream.aggregate`` and windows: ``count``, ``sum``, ``min``, ``max``,
``mean`` and ``udaf(create, add, merge, result)``."""

from sluice.graph.aggregates import Aggregate, count, max, mean, min, sum, udaf

__all__ = ["Aggregate", "count", "max", "mean", "min", "sum", "udaf"]
