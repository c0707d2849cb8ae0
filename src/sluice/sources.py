"""Sources for ``Pipeline.source(...)``.

- ``generator(fields={...}, rate=..., seed=..., total_rows=...)``: synthetic rows, with field
  generators ``Keys`` (uniform or Zipf), ``Sequence``, ``Uniform``, ``Normal``, ``Choice``,
  ``EventTime`` and ``Text``; deterministic by seed.
- ``directory(path, format=...)``: JSON lines, CSV or Parquet files; new files are picked up.
- ``replay(path, format=..., rate=...)``: a file replayed at a given rate.
- ``spark(factory)``: any Spark streaming DataFrame, ``factory(spark) -> DataFrame``.
"""

from sluice.graph.sources import (
    Choice,
    DirectorySource,
    EventTime,
    GeneratorSource,
    Keys,
    Normal,
    ReplaySource,
    Sequence,
    SourceSpec,
    SparkSource,
    Text,
    Uniform,
)

generator = GeneratorSource
directory = DirectorySource
replay = ReplaySource
spark = SparkSource

__all__ = [
    "Choice", "DirectorySource", "EventTime", "GeneratorSource", "Keys", "Normal", "ReplaySource", "Sequence",
    "SourceSpec", "SparkSource", "Text", "Uniform", "directory", "generator", "replay", "spark",
]
