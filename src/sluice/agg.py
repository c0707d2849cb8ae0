"""Aggregates for ``KeyedStream.aggregate`` and windows: ``count``, ``sum``, ``min``, ``max``,
``mean``, ``count_distinct``, ``approx_count_distinct`` (HyperLogLog), ``approx_percentile``
(DDSketch), ``first``, ``last``, ``arg_max``, ``arg_min`` and ``udaf(create, add, merge, result)``."""

from sluice.graph.aggregates import (
    Aggregate,
    approx_count_distinct,
    approx_percentile,
    arg_max,
    arg_min,
    count,
    count_distinct,
    first,
    last,
    max,
    mean,
    min,
    sum,
    udaf,
)

__all__ = [
    "Aggregate",
    "approx_count_distinct",
    "approx_percentile",
    "arg_max",
    "arg_min",
    "count",
    "count_distinct",
    "first",
    "last",
    "max",
    "mean",
    "min",
    "sum",
    "udaf",
]
