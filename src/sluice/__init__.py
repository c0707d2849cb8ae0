"""Sluice: QoS-driven, self-adapting stream processing on Apache Spark.

import sluice
from sluice import agg, sinks, sources

p = sluice.Pipeline("meters")
readings = p.source(sources.generator(fields={...}, rate=10_000))
readings.key_by("meter").aggregate(n=agg.count()).sink(sinks.console())
p.run("/tmp/ckpt", duration=60)
"""

from sluice import agg, sinks, sources, state, windows
from sluice.api import KeyedStream, Pipeline, Stream
from sluice.errors import SluiceError
from sluice.graph.alternates import Alt
from sluice.runtime.reporting import report

__version__ = "0.1.0"

__all__ = [
    "Alt",
    "KeyedStream",
    "Pipeline",
    "SluiceError",
    "Stream",
    "__version__",
    "agg",
    "report",
    "sinks",
    "sources",
    "state",
    "windows",
]
