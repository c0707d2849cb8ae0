"""Lakehouse tables as sinks and sources: Delta Lake and Apache Iceberg (pure descriptions).

Sinks, each exactly once per batch id:

- ``DeltaSink``: a Delta table written by delta-rs (no JVM). Each batch is one Delta commit
  carrying an *application transaction* ``txn(appId=<job>, version=<batch id>)``; a batch
  whose id is at or below the table's recorded version for the job is skipped, so a batch
  replayed after a crash adds nothing. Appends (``mode="append"``) or MERGEs by ``key``
  (``mode="upsert"``); a column the stream adds is added to the table (nullable).
- ``IcebergSink``: an Iceberg table in a catalog (a SQL catalog on SQLite or PostgreSQL by
  default), written by pyiceberg. Each batch is one snapshot whose summary records the job
  and the batch id; a batch already recorded by the job's latest snapshot is skipped.

A value that cannot be stored as the table's column type (text in a numeric column, a
number out of range, a null key) is not written: it goes to the dead letters with the reason.

Source:

- ``DeltaSource``: the rows each new version of a Delta table adds, read from the files its
  commit adds (not the whole table per batch). Offsets are (version, file) positions in
  Spark's offset log, so a replayed batch reads the same files.

Nothing here touches a table; ``sluice.runtime.connectors.delta`` and ``.iceberg`` do.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from sluice.errors import PipelineError, SourceError
from sluice.graph.connectors import DEFAULT_PATIENCE_S, ConnectorSource, _key_columns, _text
from sluice.graph.sinks import SinkSpec

DELTA_MODES = ("append", "upsert")


def _columns(where: str, name: str, value) -> tuple[str, ...]:
    columns = (value,) if isinstance(value, str) else tuple(value or ())
    for c in columns:
        if not isinstance(c, str) or not c:
            raise PipelineError(f"{where}: {name} must be column names, got {value!r}")
    return columns


@dataclass(frozen=True)
class DeltaSink(SinkSpec):
    """Rows into the Delta table at ``uri`` (created by the first batch that has rows).

    ``mode="append"`` adds every row; ``mode="upsert"`` MERGEs on ``key`` (the last row of
    a key in a batch wins; the table then holds the latest value per key). ``partition_by``
    partitions a table the sink creates. ``storage_options`` go to delta-rs (object stores).
    """

    uri: str = ""
    mode: str = "append"
    key: tuple = ()
    partition_by: tuple = ()
    storage_options: tuple = ()  # (name, value) pairs, kept hashable
    patience_s: float = DEFAULT_PATIENCE_S
    kind: str = "delta"

    def __post_init__(self) -> None:
        where = f"delta sink {self.uri!r}"
        if not isinstance(self.uri, str) or not self.uri:
            raise PipelineError("delta sink: a table uri (a path or object-store URI) is required")
        if self.mode not in DELTA_MODES:
            raise PipelineError(f"{where}: mode must be one of {DELTA_MODES}, not {self.mode!r}")
        object.__setattr__(self, "key", _key_columns(where, self.key))
        if self.mode == "upsert" and not self.key:
            raise PipelineError(f"{where}: mode='upsert' needs key= (the column(s) rows are matched on)")
        if self.mode == "append" and self.key:
            raise PipelineError(f"{where}: key= is for mode='upsert' (an append matches nothing)")
        object.__setattr__(self, "partition_by", _columns(where, "partition_by", self.partition_by))
        options = self.storage_options
        if isinstance(options, dict):
            options = tuple(sorted(options.items()))
        object.__setattr__(self, "storage_options", tuple(options))

    @property
    def target(self) -> str:
        return f"Delta table {self.uri!r}" + (f" (upsert by {list(self.key)})" if self.key else "")


@dataclass(frozen=True)
class IcebergSink(SinkSpec):
    """Rows into the Iceberg ``table`` ("namespace.name") of ``catalog``: a SQLAlchemy URL
    of a SQL catalog (``sqlite:////path/catalog.db``, ``postgresql://user@host/db``), with
    ``warehouse`` the location new tables' files go to; or a mapping of pyiceberg catalog
    properties (``{"type": "rest", "uri": ...}``). The table and its namespace are created
    from the first batch's columns; with ``key`` rows are upserted on those columns.
    """

    catalog: str | tuple = ""
    table: str = ""
    warehouse: str | None = None
    key: tuple = ()
    catalog_name: str = "sluice"
    patience_s: float = DEFAULT_PATIENCE_S
    kind: str = "iceberg"

    def __post_init__(self) -> None:
        where = f"iceberg sink {self.table!r}"
        if not isinstance(self.table, str) or "." not in self.table.strip("."):
            raise PipelineError(f"iceberg sink: table must be 'namespace.name', got {self.table!r}")
        catalog = self.catalog
        if isinstance(catalog, dict):
            catalog = tuple(sorted((str(k), str(v)) for k, v in catalog.items()))
        if not catalog:
            raise PipelineError(f"{where}: catalog= is required (a SQL catalog URL or catalog properties)")
        if isinstance(catalog, str) and self.warehouse is None:
            raise PipelineError(f"{where}: a SQL catalog needs warehouse= (where table files go, e.g. 'file:///data/warehouse')")
        object.__setattr__(self, "catalog", catalog)
        object.__setattr__(self, "key", _key_columns(where, self.key))

    @property
    def target(self) -> str:
        where = self.catalog if isinstance(self.catalog, str) else dict(self.catalog).get("uri", self.catalog_name)
        return f"Iceberg table {self.table!r} (catalog {_redacted(str(where))})"


def _redacted(url: str) -> str:
    """A URL without its password, for messages."""
    import re

    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


LAKEHOUSE_SINKS = (DeltaSink, IcebergSink)


@dataclass(frozen=True, kw_only=True)
class DeltaSource(ConnectorSource):
    """The rows added by each new version of the Delta table at ``uri``, in version order.

    ``starting_version``: the first version read (0, the default, reads the table's whole
    history; ``"latest"`` only versions committed after the job first starts).
    A version that deletes or rewrites rows (DELETE, UPDATE, MERGE) cannot be a stream of
    appends: it stops the job with an error naming it, unless ``skip_change_commits`` (then
    such versions are skipped whole, as Spark's ``skipChangeCommits`` does). Versions that
    only reorganize files (OPTIMIZE, data_change false) are always skipped.

    >>> import pyarrow as pa
    >>> from sluice import sources as S
    >>> S.delta("/data/bronze", schema=pa.schema([("id", pa.int64())])).uri
    '/data/bronze'
    """

    uri: str
    starting_version: int | str = 0
    skip_change_commits: bool = False

    def __init__(
        self,
        uri: str,
        schema: pa.Schema,
        *,
        starting_version: int | str = 0,
        skip_change_commits: bool = False,
        event_time: str | None = None,
        watermark_delay: float = 0.0,
        max_rows_per_batch: int | None = None,
        patience_s: float = DEFAULT_PATIENCE_S,
    ):
        where = f"DeltaSource({uri!r})"
        _text(where, "uri", uri)
        if not (
            starting_version == "latest"
            or (isinstance(starting_version, int) and not isinstance(starting_version, bool) and starting_version >= 0)
        ):
            raise SourceError(f"{where}: starting_version must be a version (int >= 0) or 'latest', got {starting_version!r}")
        self._init(
            where,
            schema,
            uri=uri,
            starting_version=starting_version,
            skip_change_commits=bool(skip_change_commits),
            event_time=event_time,
            watermark_delay=watermark_delay,
            max_rows_per_batch=max_rows_per_batch,
            patience_s=patience_s,
        )

    @property
    def broker(self) -> str:
        return f"Delta table at {self.uri!r}"
