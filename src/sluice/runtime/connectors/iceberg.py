"""Apache Iceberg on pyiceberg: a sink idempotent by the job and batch id each snapshot records.

One batch is one Iceberg commit (one transaction: a schema update when the batch adds
columns, then the append, or the upsert's delete and append) whose snapshot summary holds
``sluice.job`` and ``sluice.batch``. Before writing, the snapshots from the table's current
one back along its parents are read until the newest one this job wrote: if it recorded
this batch id or a later one, the batch was committed before a crash (after its Iceberg
commit, before Spark's) and is skipped. The catalog's commit is a compare-and-swap of the
table's metadata location, so a writer that raced us fails instead of committing twice.

The table (and its namespace) is created from the first batch's columns. With ``key`` the
last row of each key in the batch is upserted (pyiceberg's ``upsert``: matched rows are
replaced, others inserted).
"""

from __future__ import annotations

import contextlib
from typing import Any

import pyarrow as pa

from sluice.errors import SinkError
from sluice.graph.lakehouse import IcebergSink
from sluice.runtime.connectors.fit import fit
from sluice.runtime.connectors.reader import BrokerDown

JOB, BATCH = "sluice.job", "sluice.batch"


def sqlalchemy_url(url: str) -> str:
    """``postgresql://`` URLs through psycopg 3 (the driver Sluice installs)."""
    for plain in ("postgresql://", "postgres://"):
        if url.startswith(plain):
            return "postgresql+psycopg://" + url[len(plain) :]
    return url


def open_catalog(spec: IcebergSink):
    from pyiceberg.catalog import load_catalog
    from pyiceberg.catalog.sql import SqlCatalog

    if isinstance(spec.catalog, str):
        assert spec.warehouse is not None  # IcebergSink requires it with a SQL catalog
        return SqlCatalog(spec.catalog_name, uri=sqlalchemy_url(spec.catalog), warehouse=spec.warehouse)
    properties = dict(spec.catalog)
    if spec.warehouse is not None:
        properties.setdefault("warehouse", spec.warehouse)
    return load_catalog(spec.catalog_name, **properties)


def last_batch(table, job: str) -> int:
    """The batch id of the newest snapshot ``job`` committed to ``table`` (-1: none)."""
    snapshot = table.current_snapshot()
    while snapshot is not None:
        summary = snapshot.summary
        if summary is not None and summary.get(JOB) == job:
            return int(summary.get(BATCH))
        parent = snapshot.parent_snapshot_id
        snapshot = table.snapshot_by_id(parent) if parent is not None else None
    return -1


class IcebergWriter:
    def __init__(self, spec: IcebergSink):
        self.spec = spec
        self.catalog: Any = None
        self.table: Any = None

    def write(self, table: pa.Table, batch_id: int, job: str) -> list[tuple[int, str]]:
        """Write the batch once for (job, batch_id); returns the rows that could not be
        written (row, reason) for the dead letters (the same on a replay)."""
        from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException
        from sqlalchemy.exc import OperationalError

        try:
            return self._write(table, batch_id, job)
        except OperationalError as e:  # the catalog's database is away: retried
            self.catalog = self.table = None
            raise BrokerDown(str(e).strip().splitlines()[0]) from None
        except (CommitFailedException, CommitStateUnknownException) as e:
            self.table = None
            raise SinkError(
                f"sink {self.spec.target}: the commit of batch {batch_id} failed (another writer committed first?): {e}"
            ) from None
        except SinkError:
            raise
        except Exception as e:  # pyiceberg raises many kinds: name the table
            raise SinkError(f"sink {self.spec.target}: {type(e).__name__}: {e}") from e

    def _load(self):
        from pyiceberg.exceptions import NoSuchTableError

        if self.catalog is None:
            self.catalog = open_catalog(self.spec)
        if self.table is not None:
            self.table = self.table.refresh()
            return self.table
        try:
            self.table = self.catalog.load_table(self.spec.table)
        except NoSuchTableError:
            return None
        return self.table

    def _create(self, schema: pa.Schema):
        from pyiceberg.exceptions import NamespaceAlreadyExistsError, TableAlreadyExistsError

        namespace = self.spec.table.rsplit(".", 1)[0]
        with contextlib.suppress(NamespaceAlreadyExistsError):
            self.catalog.create_namespace(namespace)
        try:
            self.table = self.catalog.create_table(self.spec.table, schema=schema)
        except TableAlreadyExistsError:  # another writer created it meanwhile
            self.table = self.catalog.load_table(self.spec.table)
        return self.table

    def _write(self, table: pa.Table, batch_id: int, job: str) -> list[tuple[int, str]]:
        iceberg = self._load()
        target = iceberg.schema().as_arrow() if iceberg is not None else None
        fitted = fit(table, target, self.spec.key, f"sink {self.spec.target}")
        rows = fitted.table
        if rows.num_rows == 0:
            return fitted.rejects
        if iceberg is None:
            iceberg = self._create(rows.schema)
        elif last_batch(iceberg, job) >= batch_id:
            return fitted.rejects  # committed before a crash: the replay adds nothing
        properties = {JOB: job, BATCH: str(batch_id)}
        with iceberg.transaction() as tx:
            if fitted.added:
                with tx.update_schema() as update:
                    update.union_by_name(rows.schema)
            if self.spec.key:
                from sluice.runtime.connectors.postgres import _last_per_key

                tx.upsert(_last_per_key(rows, self.spec.key), join_cols=list(self.spec.key), snapshot_properties=properties)
            else:
                tx.append(rows, snapshot_properties=properties)
        return fitted.rejects
