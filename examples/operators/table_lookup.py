"""Azure Table Query (Sec. 5.2) on this machine: look up one row by a random key in a PostgreSQL
table of 2,000,000 rows of 20 columns (about 200 bytes each), once per tuple.

:func:`ensure_table` creates and fills the table idempotently with ``generate_series`` (a few
seconds, once), starting the local PostgreSQL cluster first if it is down. :class:`TableLookup`
keeps one connection per worker thread (psycopg releases the GIL while it waits on the server,
so threads overlap their round trips).
"""

from __future__ import annotations

import os
import random
import subprocess
import threading

ROWS = 2_000_000
TABLE = "sluice_table_query"
DEFAULT_DSN = os.environ.get("SLUICE_PG_DSN", "host=127.0.0.1 port=5432 dbname=test")
_USERS = ("root", "postgres")


class PostgresUnavailable(RuntimeError):
    """PostgreSQL is not reachable and could not be started."""


def connect(dsn: str = DEFAULT_DSN):
    import psycopg

    last: Exception | None = None
    users = [None] if "user=" in dsn else _USERS
    for user in users:
        try:
            return psycopg.connect(dsn + (f" user={user}" if user else ""), autocommit=True)
        except psycopg.OperationalError as exc:
            last = exc
    raise PostgresUnavailable(f"cannot connect to PostgreSQL with {dsn!r}: {last}")


def _try_start_postgres() -> None:
    versions = sorted(os.listdir("/etc/postgresql")) if os.path.isdir("/etc/postgresql") else []
    if not versions:
        raise PostgresUnavailable("PostgreSQL is down and no cluster is installed under /etc/postgresql")
    cmd = ["pg_ctlcluster", "--skip-systemctl-redirect", versions[-1], "main", "start"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise PostgresUnavailable(f"PostgreSQL is down and {' '.join(cmd)} failed: {done.stderr.strip()}")


def ensure_table(dsn: str = DEFAULT_DSN, rows: int = ROWS) -> int:
    """Create and fill the lookup table if needed; returns its row count. Starts PostgreSQL if down."""
    try:
        conn = connect(dsn)
    except PostgresUnavailable:
        _try_start_postgres()
        conn = connect(dsn)
    with conn:
        count = conn.execute("SELECT CASE WHEN to_regclass(%s) IS NULL THEN -1 ELSE 0 END", (TABLE,)).fetchone()[0]
        if count == 0:
            count = conn.execute(f"SELECT count(*) FROM {TABLE}").fetchone()[0]
        if count != rows:
            columns = ", ".join(f"c{i} text" for i in range(1, 20))
            values = ", ".join(f"md5((g * {i})::text)::char(9)" for i in range(1, 20))
            conn.execute(f"DROP TABLE IF EXISTS {TABLE}")
            conn.execute(f"CREATE TABLE {TABLE} (id bigint PRIMARY KEY, {columns})")
            conn.execute(f"INSERT INTO {TABLE} SELECT g, {values} FROM generate_series(1, {rows}) g")
            conn.execute(f"ANALYZE {TABLE}")
            count = rows
    return count


class TableLookup:
    name = "table"

    def __init__(self, dsn: str = DEFAULT_DSN, rows: int = ROWS):
        self.dsn = dsn
        self.rows = rows
        self._local = threading.local()

    def setup(self) -> None:
        pass

    def process(self, key: int):
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = connect(self.dsn)
            self._local.rng = random.Random(threading.get_ident())
        row_id = self._local.rng.randint(1, self.rows)
        return conn.execute(f"SELECT * FROM {TABLE} WHERE id = %s", (row_id,)).fetchone()

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
