"""Redis: a stream source whose offsets are entry IDs, and a sink of stream entries or hashes
that records each batch id in the same MULTI/EXEC transaction as its rows.

Source: a batch is the entries with IDs in (start, end]. Planning finds the end with one
server-side ``XRANGE (start + COUNT cap`` that returns only the count and the last ID (no
entry travels twice). The backlog is estimated from ``XINFO STREAM`` (entries added minus
entries admitted, at most ``XLEN``; exact unless entries were trimmed or deleted). Ingest
time = the millisecond part of the entry ID (when Redis added it).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from sluice.credentials import resolve
from sluice.graph.connectors import RedisSink, RedisStreamSource
from sluice.runtime.connectors.payloads import parse_text_columns, rows_as_text
from sluice.runtime.connectors.reader import BrokerDown, ConnectorStreamReader, Plan, Span, set_aside

UNCAPPED_BATCH = 100_000
"""Entries a batch admits when no limit is set (one server-side XRANGE must stay short)."""
FETCH_COUNT = 10_000
UPSERT_CHUNK = 10_000
"""Hashes a sink's transaction upserts at most (``RedisWriter``)."""
SOCKET_TIMEOUT_S = 10

_END_OF_RANGE = """
local r = redis.call('XRANGE', KEYS[1], '(' .. ARGV[1], '+', 'COUNT', ARGV[2])
if #r == 0 then return {0, ARGV[1]} end
return {#r, r[#r][1]}
"""


def client(url: str):
    import redis

    return redis.Redis.from_url(
        resolve(url, "Redis URL"), socket_timeout=SOCKET_TIMEOUT_S, socket_connect_timeout=SOCKET_TIMEOUT_S
    )


def _down(url: str, error: Exception) -> BrokerDown:
    return BrokerDown(f"{url}: {type(error).__name__}: {error}")


class RedisStreamReader(ConnectorStreamReader):
    spec: RedisStreamSource

    def _client(self):
        if getattr(self, "_conn", None) is None:
            self._conn = client(self.spec.url)
            self._conn_end_of_range = self._conn.register_script(_END_OF_RANGE)
        return self._conn

    def _call(self, work):
        import redis

        try:
            return work(self._client())
        except (redis.ConnectionError, redis.TimeoutError) as e:
            self._conn = None
            raise _down(self.spec.url, e) from None

    def first_position(self) -> str:
        return "0-0"

    def message_bytes(self) -> float | None:
        def work(r):
            length = r.xlen(self.spec.key)
            return r.memory_usage(self.spec.key, samples=100) / length if length else None

        return self._call(work)

    def plan(self, start: dict, cap: int | None) -> Plan:
        def work(r):
            count, last = self._conn_end_of_range(keys=[self.spec.key], args=[start["position"], cap or UNCAPPED_BATCH])
            info = r.xinfo_stream(self.spec.key) if r.exists(self.spec.key) else {}
            return int(count), last.decode() if isinstance(last, bytes) else last, info

        count, last, info = self._call(work)
        admitted_through = start["rows"] + count
        waiting = max(0, min(int(info.get("length", 0)), int(info.get("entries-added", 0)) - admitted_through))
        return Plan(last, count, waiting)

    def fetch(self, span: Span):
        def work(r):
            entries, after = [], span.start
            while after != span.end:
                chunk = r.xrange(self.spec.key, min="(" + after, max=span.end, count=FETCH_COUNT)
                if not chunk:
                    break  # the rest was deleted
                entries.extend(chunk)
                after = chunk[-1][0].decode()
            return entries

        entries = self._call(work) if span.rows else []
        names = self.spec.schema().names
        columns: dict[str, list] = {n: [] for n in names}
        keys = [n.encode() for n in names]
        not_text: dict[int, str] = {}  # entry -> why: a field that is not UTF-8 is never guessed at
        for i, (_, fields) in enumerate(entries):
            for name, key in zip(names, keys):
                value = fields.get(key)
                if value is not None:
                    try:
                        value = value.decode("utf-8")
                    except UnicodeDecodeError:
                        not_text.setdefault(i, f"field {name!r} is not UTF-8 text")
                        value = None
                columns[name].append(value)
        parsed = set_aside(parse_text_columns(columns, len(entries), self.spec.schema()), not_text)
        ids = [entry_id.decode() for entry_id, _ in entries]
        added_us = np.array([int(i.split("-", 1)[0]) * 1000 for i in ids], np.int64)
        # an entry's payload is made only if it becomes a dead letter (here or in ``screen``)
        payloads = _Payloads(entries)
        return parsed, added_us[parsed.kept], [f"id {i}" for i in ids], payloads


def _entry_json(fields: dict) -> bytes:
    """An entry as JSON, losslessly: a list of its ``[field, value]`` pairs in order, where a
    field or value that is not UTF-8 is ``{"base64": ...}`` (a dead letter can be replayed
    byte for byte)."""

    def text(raw: bytes) -> object:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(raw).decode("ascii")}

    return json.dumps([[text(k), text(v)] for k, v in fields.items()]).encode()


class _Payloads(Sequence[bytes]):
    """The entries' payloads (``_entry_json``), each made when it is asked for."""

    def __init__(self, entries: list):
        self.entries = entries

    def __len__(self) -> int:
        return len(self.entries)

    def __getitem__(self, i):  # a reader asks by index only
        return _entry_json(self.entries[i][1])


class RedisWriter:
    """Writes a batch with the batch id in hash ``sluice:batches:<name>`` (field = job): a
    batch at or below the recorded id is skipped.

    Stream entries go in one MULTI/EXEC with the id (an entry added twice would be a
    duplicate). Hashes upserted by key go in transactions of ``UPSERT_CHUNK`` rows, the id
    with the last: a batch is never one huge transaction that blocks the server, and a
    replay after a crash between chunks writes the same values again."""

    def __init__(self, spec: RedisSink):
        self.spec = spec
        self.r = client(spec.url)
        self.marker = f"sluice:batches:{spec.name}"

    def _upsert(self, table: pa.Table, batch_id: int, job: str) -> None:
        for first in range(0, max(table.num_rows, 1), UPSERT_CHUNK):
            pipe = self.r.pipeline(transaction=True)
            for row in rows_as_text(table.slice(first, UPSERT_CHUNK)):
                name = ":".join([self.spec.name] + [row.get(k, "") for k in self.spec.key])
                pipe.delete(name)
                pipe.hset(name, mapping=row)
            if first + UPSERT_CHUNK >= table.num_rows:
                pipe.hset(self.marker, job, batch_id)
            pipe.execute()

    def write(self, table: pa.Table, batch_id: int, job: str) -> None:
        import redis

        try:
            done = self.r.hget(self.marker, job)
            if done is not None and int(done) >= batch_id:
                return  # a replay of a batch already written
            if self.spec.key:
                self._upsert(table, batch_id, job)
                return
            # stream entries: one transaction with the id, so a replay cannot add them twice
            pipe = self.r.pipeline(transaction=True)
            for row in rows_as_text(table):
                pipe.xadd(self.spec.name, row or {"": ""})
            pipe.hset(self.marker, job, batch_id)
            pipe.execute()
        except (redis.ConnectionError, redis.TimeoutError) as e:
            raise _down(self.spec.url, e) from None
