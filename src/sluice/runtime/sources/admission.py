"""Admission control: how many rows the next micro-batch may take from a source.

Nephele sizes output buffers to meet latency constraints (its Eq. 2, 3); on Spark the buffer
is the micro-batch, so its size is the number of rows a source admits per batch
(docs/architecture.md, section 3). Spark asks a source for its default ``ReadLimit`` once, when the
query starts, and passes it back at every ``latestOffset``; to let the limit change while
the query runs, Sluice's sources always declare a ``ReadMaxRows`` (a huge one when no limit
is set) and re-read the live limit from the control file each time they plan a batch.
"""

from __future__ import annotations

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from sluice.runtime.sources.control import get_max_rows

NO_LIMIT = 1 << 62
"""The ReadMaxRows declared when no limit is set: big enough to never bind."""

DEFAULT_MAX_ROWS_PER_BATCH = 100_000
"""Rows per batch of every source when no limit is set. Without a cap a batch takes all that
has arrived: a source that could produce any number at once (a generator without rate)
would run the JVM out of memory (SPARK-NOTES), and a source that falls behind (or restarts
after downtime) admits ever bigger batches, each slower than the last, while reporting no
backlog. With it, rows wait at the source, where they show as backlog. The control plane
sizes batches through the same admission file (``set_max_rows``)."""


def default_read_limit() -> ReadLimit:
    return ReadMaxRows(NO_LIMIT)


def admission_cap(limit: ReadLimit, control_dir: str, name: str, spec_default: int | None) -> int | None:
    """Rows the batch being planned may admit (None: no cap).

    ``ReadAllAvailable`` from Spark (e.g. Trigger.Once) overrides every configured limit, as
    Spark's contract asks; otherwise the live limit (``set_max_rows``) wins over the spec's
    ``max_rows_per_batch``, which wins over ``DEFAULT_MAX_ROWS_PER_BATCH``.
    """
    if isinstance(limit, ReadAllAvailable):
        return None
    cap = get_max_rows(control_dir, name) or spec_default or DEFAULT_MAX_ROWS_PER_BATCH
    if isinstance(limit, ReadMaxRows) and limit.max_rows < NO_LIMIT:
        cap = min(cap, limit.max_rows) if cap else limit.max_rows
    return cap
