"""NATS JetStream: a source whose offsets are stream sequence numbers, and a sink that
publishes with ``Nats-Msg-Id`` so JetStream drops what a replayed batch publishes again.

Source: a batch is the messages of the stream with sequence numbers in (start, end]; the end
is the stream's last sequence, or start + the admission limit. The backlog is the stream's
last sequence minus the end (deleted messages count as waiting). The batch's messages are
fetched with an ephemeral pull consumer that starts at start + 1 (no acks: the offsets in
Spark's log, not the broker, say what was read). Ingest time = the time JetStream stored
the message.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import numpy as np
import pyarrow as pa

from sluice.credentials import redact, resolve
from sluice.errors import ConfigError, SinkError, SourceError
from sluice.graph.connectors import NatsAuth, NatsSink, NatsSource
from sluice.runtime.connectors.aio import shared_loop
from sluice.runtime.connectors.payloads import parse_json, rows_as_json
from sluice.runtime.connectors.reader import BrokerDown, ConnectorStreamReader, Plan, Span

CONNECT_TIMEOUT_S = 2
FETCH_BATCH = 1000
CALL_TIMEOUT_S = 30
PUBLISH_WINDOW = 2000  # publishes awaiting their acknowledgement at once


async def connect(url: str, auth: NatsAuth | None = None):
    """A connection to ``url``, or BrokerDown. nats-py retries a refused first connection
    for ever (and logs each try), so the server is probed first and the connect is bounded."""
    import nats

    async def quiet(error):  # the failure is raised below, with the address
        pass

    try:
        host, port = _host_port(url)
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), CONNECT_TIMEOUT_S)
        writer.close()
        return await asyncio.wait_for(
            nats.connect(
                resolve(url, "NATS URL"),
                connect_timeout=CONNECT_TIMEOUT_S,
                allow_reconnect=False,
                max_reconnect_attempts=0,
                error_cb=quiet,
                **(auth.connect_options() if auth else {}),
            ),
            2 * CONNECT_TIMEOUT_S,
        )
    except ConfigError:
        raise
    except Exception as e:
        raise BrokerDown(f"cannot connect to {url}: {type(e).__name__}: {e}") from None


def _host_port(url: str) -> tuple[str, int]:
    from urllib.parse import urlsplit

    parts = urlsplit(url if "://" in url else f"nats://{url}")
    return parts.hostname or "127.0.0.1", parts.port or 4222


class Connection:
    """One connection to a NATS server, made again after the server went away."""

    def __init__(self, url: str, auth: NatsAuth | None = None):
        self.url, self.auth = url, auth
        self.nc: Any = None  # the nats client, connected on first use

    async def jetstream(self):
        if self.nc is None or self.nc.is_closed or not self.nc.is_connected:
            if self.nc is not None:
                with contextlib.suppress(Exception):
                    await self.nc.close()
            self.nc = await connect(self.url, self.auth)
        return self.nc.jetstream()

    async def call(self, work):
        """``await work(js)``; a lost connection becomes BrokerDown (and is dropped)."""
        import nats.errors
        import nats.js.errors

        js = await self.jetstream()
        try:
            return await work(js)
        except nats.js.errors.NotFoundError:
            raise
        except (
            TimeoutError,
            nats.errors.ConnectionClosedError,
            nats.errors.NoRespondersError,
            nats.errors.TimeoutError,
            nats.errors.UnexpectedEOF,
            nats.errors.StaleConnectionError,
            ConnectionError,
            OSError,
        ) as e:
            await self._drop()
            raise BrokerDown(f"{self.url}: {type(e).__name__}: {e}") from None

    async def _drop(self):
        nc, self.nc = self.nc, None
        if nc is not None:
            with contextlib.suppress(Exception):
                await nc.close()


class NatsStreamReader(ConnectorStreamReader):
    spec: NatsSource
    splittable = True

    def _connection(self) -> Connection:
        if getattr(self, "_conn", None) is None:
            self._conn = Connection(self.spec.url, self.spec.auth)
        return self._conn

    def _run(self, work):
        import nats.js.errors

        try:
            return shared_loop().run(self._connection().call(work), CALL_TIMEOUT_S)
        except nats.js.errors.NotFoundError:
            raise SourceError(f"source {self.name!r}: no stream {self.spec.stream!r} at {redact(self.spec.url)}") from None

    def first_position(self) -> int:
        return 0

    def message_bytes(self) -> float | None:
        async def state(js):
            return (await js.stream_info(self.spec.stream)).state

        found = self._run(state)
        return found.bytes / found.messages if found.messages else None

    def plan(self, start: dict, cap: int | None) -> Plan:
        after = start["position"]

        async def last_seq(js):
            return (await js.stream_info(self.spec.stream)).state.last_seq

        last = self._run(last_seq)
        end = last if cap is None else min(last, after + cap)
        end = max(end, after)  # a stream purged below ``after`` has nothing new
        return Plan(end, end - after, max(last - end, 0))

    def fetch(self, span: Span):
        async def messages(js):
            from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

            config = ConsumerConfig(
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                opt_start_seq=span.start + 1,
                ack_policy=AckPolicy.NONE,
                inactive_threshold=60.0,
            )
            sub = await js.pull_subscribe("", stream=self.spec.stream, config=config)
            got: list = []
            try:
                while not got or got[-1].metadata.sequence.stream < span.end:
                    want = min(FETCH_BATCH, span.end - (got[-1].metadata.sequence.stream if got else span.start))
                    batch = await sub.fetch(max(want, 1), timeout=5)
                    got.extend(m for m in batch if m.metadata.sequence.stream <= span.end)
                    if batch and batch[-1].metadata.num_pending == 0:
                        break  # messages up to the end were deleted: nothing more will come
                    if batch and batch[-1].metadata.sequence.stream >= span.end:
                        break  # past the slice's end (its last messages were deleted)
            finally:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()
            return got

        got = self._run(messages) if span.end > span.start else []
        payloads = [m.data for m in got]
        parsed = parse_json(payloads, self.spec.schema())
        stored_us = np.array([int(m.metadata.timestamp.timestamp() * 1_000_000) for m in got], np.int64)
        positions = [f"seq {m.metadata.sequence.stream}" for m in got]
        return parsed, stored_us[parsed.kept], positions, payloads


class NatsWriter:
    """Publishes a batch's rows; each message id is ``<job>:<batch>:<row>``."""

    def __init__(self, spec: NatsSink):
        self.spec = spec
        self.connection = Connection(spec.url, spec.auth)

    def write(self, table: pa.Table, batch_id: int, job: str) -> None:
        messages = rows_as_json(table)

        async def publish(js):
            pending = []
            for row, payload in enumerate(messages):
                headers = {"Nats-Msg-Id": f"{job}:{batch_id}:{row}"}
                pending.append(asyncio.ensure_future(js.publish(self.spec.subject, payload, headers=headers)))
                if len(pending) >= PUBLISH_WINDOW:
                    await asyncio.gather(*pending)
                    pending = []
            await asyncio.gather(*pending)

        import nats.js.errors

        try:
            shared_loop().run(self.connection.call(publish), None)
        except nats.js.errors.NoStreamResponseError:
            raise SinkError(f"sink {self.spec.target}: no JetStream stream takes subject {self.spec.subject!r}") from None
