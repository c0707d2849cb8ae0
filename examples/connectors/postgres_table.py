"""New rows of a PostgreSQL table, read as they are inserted, appended to another table.

    psql -h 127.0.0.1 -U postgres test -c \
      "CREATE TABLE events (id bigserial PRIMARY KEY, kind text, payload text)"
    psql -h 127.0.0.1 -U postgres test -c "INSERT INTO events (kind, payload) VALUES ('click', 'a')"
    sluice run examples/connectors/postgres_table.py --checkpoint /tmp/ckpt-events

Rows are read in the order of ``id``, which only grows (a ``bigserial``); a batch is the rows
with id in (last admitted, end], so a replay reads the same rows. Each batch is appended to
``clicks`` in one transaction that also records the batch id in ``sluice_batches``: a batch
replayed after a crash writes nothing twice.
"""

import pyarrow as pa

import sluice
from sluice import sinks, sources

DSN = "postgresql://postgres@127.0.0.1:5432/test"
EVENT = pa.schema([("id", pa.int64()), ("kind", pa.string()), ("payload", pa.string())])

pipeline = sluice.Pipeline("postgres_events")
events = pipeline.source(sources.postgres(DSN, "events", "id", schema=EVENT), name="events")
events.filter("kind = 'click'").sink(sinks.postgres(DSN, "clicks"))
