"""Sluice's sources on Spark: PySpark Python data sources with admission control.

- ``open_stream(spark, spec, control_dir, name)``: a streaming DataFrame of the spec's columns
  plus the hidden ``__ingest_ts``.
- ``set_max_rows(control_dir, name, n)``: change a running source's admission limit.
- ``read_backlog(control_dir, name)`` / ``backlog_from_progress(progress)``: its backlog.
- ``is_exhausted(control_dir, name)``: a finite source has admitted its last row.
"""

from sluice.graph.sources import INGEST_TS
from sluice.runtime.sources.backlog import backlog_from_progress
from sluice.runtime.sources.control import (
    get_max_rows,
    is_exhausted,
    read_backlog,
    set_max_rows,
)
from sluice.runtime.sources.datasource import SluiceDataSource, open_stream

__all__ = [
    "INGEST_TS",
    "SluiceDataSource",
    "backlog_from_progress",
    "get_max_rows",
    "is_exhausted",
    "open_stream",
    "read_backlog",
    "set_max_rows",
]
