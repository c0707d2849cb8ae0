"""MQTT: a source for a protocol that cannot replay, made replayable by a journal.

The guarantee, plainly:

- The source holds a *persistent session* at the broker (MQTT 5, ``clean_start=False``, a
  session that never expires, the spec's ``client_id``) and subscribes with QoS 1, so the
  broker keeps the messages published while the pipeline is down and delivers them when it
  comes back (Mosquitto keeps at most ``max_queued_messages`` per session, 1000 by default:
  raise it for long outages).
- Every message received is appended to the *journal*, files under the checkpoint
  (``<checkpoint>/sources/<name>.journal/``), and only once it is there is it acknowledged to
  the broker (PUBACK) and offered to a batch. Offsets are journal positions, so a batch
  replayed after a crash reads the same messages from the journal: from the journal on,
  every message is processed exactly once.
- Between the broker and the journal the guarantee is *at least once*: if the process dies
  after a message is journaled but before its PUBACK reaches the broker, the broker sends it
  again and it is journaled twice. MQTT gives no message id to tell the copy apart; a
  pipeline that must not see such a copy deduplicates by a key of its own.
- Journal files of batches Spark has committed are deleted.
- A journal that cannot be written (disk full, a read-only or vanished directory) is not
  silent: the messages stay unacknowledged (the broker keeps them, and sends no more than
  ``RECEIVE_MAXIMUM`` unacknowledged ones, which bounds what waits in memory), the write is
  retried, planning admits nothing and the backlog file names the error, and after the
  source's ``patience_s`` the job fails with a SourceError naming the journal.

The client lives in the Python worker that Spark keeps for the query (where the offsets are
planned); the batch's rows are read from the journal wherever the task runs (the checkpoint
must be on a shared file system on a cluster, as for state).
"""

from __future__ import annotations

import itertools
import threading
import time

import numpy as np
import pyarrow as pa

from sluice.credentials import resolve
from sluice.errors import SourceError
from sluice.graph.connectors import MqttAuth, MqttSource
from sluice.runtime.connectors.payloads import parse_json
from sluice.runtime.connectors.reader import BrokerDown, ConnectorStreamReader, Plan, Span
from sluice.runtime.files import filesystem, list_files, read_bytes, write_atomic

FLUSH_S = 0.01  # a received message waits at most about this long for its journal write
JOURNAL_RETRY_S = 0.5  # between tries of a journal write that failed
RECEIVE_MAXIMUM = 65535  # unacknowledged messages the broker may send at once (MQTT 5)
NEVER_EXPIRES = 0xFFFFFFFF
JOURNAL_SCHEMA = pa.schema([("payload", pa.binary()), ("received_us", pa.int64()), ("topic", pa.string())])


def journal_dir(control_dir: str, name: str) -> str:
    return f"{control_dir.rstrip('/')}/{name}.journal"


class Journal:
    """Numbered messages in segment files ``<first index>.arrow`` (Arrow IPC), each written
    whole and atomically."""

    def __init__(self, directory: str):
        self.fs, self.base = filesystem(directory)

    def segments(self) -> list[tuple[int, str]]:
        return sorted((int(p.rsplit("/", 1)[1].split(".")[0]), p) for p in list_files(self.fs, self.base) if p.endswith(".arrow"))

    def _read(self, path: str) -> pa.Table:
        return pa.ipc.open_file(pa.BufferReader(read_bytes(self.fs, path))).read_all()

    def end(self) -> int:
        """Messages journaled so far (one past the last index)."""
        found = self.segments()
        if not found:
            return 0
        first, path = found[-1]
        return first + self._read(path).num_rows

    def append(self, first: int, table: pa.Table) -> None:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, JOURNAL_SCHEMA) as writer:
            writer.write_table(table)
        write_atomic(self.fs, f"{self.base}/{first:012d}.arrow", sink.getvalue().to_pybytes())

    def read(self, start: int, stop: int) -> pa.Table:
        """Messages with indices in [start, stop)."""
        parts = []
        for first, path in self.segments():
            if first >= stop:
                break
            table = self._read(path)
            if first + table.num_rows <= start:
                continue
            lo = max(start - first, 0)
            parts.append(table.slice(lo, min(stop - first, table.num_rows) - lo))
        return pa.concat_tables(parts) if parts else JOURNAL_SCHEMA.empty_table()

    def forget_before(self, index: int) -> None:
        """Delete the segments whose messages all lie before ``index``."""
        found = self.segments()
        for (_, path), (following, _) in itertools.pairwise(found):
            if following <= index:
                self.fs.delete_file(path)


class Session:
    """The persistent MQTT session of one source: receives, journals, then acknowledges."""

    def __init__(self, spec: MqttSource, journal: Journal):
        import paho.mqtt.client as mqtt
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties

        self.spec, self.journal = spec, journal
        self.next_index = journal.end()
        self.received: list = []
        self.wake = threading.Condition()
        self.connected = False
        self.last_error: str | None = "not connected yet"
        self.journal_error: str | None = None  # why the last journal write failed (None: it did not)
        self.payload_bytes = self.journaled_here = 0  # bytes and messages this session journaled (mean size)
        self.journal_failing_since: float | None = None
        self.client = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2, client_id=spec.client_id, protocol=mqtt.MQTTv5, manual_ack=True
        )
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_message = self._on_message
        self.client.on_connect_fail = lambda client, userdata: self._failed("connection refused or timed out")
        self.client.reconnect_delay_set(1, 2)
        _log_in(self.client, spec.auth)
        properties = Properties(PacketTypes.CONNECT)
        properties.SessionExpiryInterval = NEVER_EXPIRES
        properties.ReceiveMaximum = RECEIVE_MAXIMUM
        self.client.connect_async(spec.host, spec.port, keepalive=30, clean_start=False, properties=properties)
        self.client.loop_start()
        threading.Thread(target=self._flush_forever, name=f"sluice-mqtt-{spec.client_id}", daemon=True).start()

    def _failed(self, why: str) -> None:
        self.connected, self.last_error = False, why

    def _on_connect(self, client, userdata, flags, reason_code, properties) -> None:
        if reason_code.is_failure:
            self._failed(f"the broker refused the connection: {reason_code}")
            return
        self.connected, self.last_error = True, None
        client.subscribe([(topic, 1) for topic in self.spec.topics])

    def _on_disconnect(self, client, userdata, flags, reason_code, properties) -> None:
        self._failed(f"disconnected: {reason_code}")

    def _on_message(self, client, userdata, message) -> None:
        with self.wake:
            self.received.append((message.payload, time.time_ns() // 1000, message.topic, message.mid, message.qos))
            self.wake.notify()

    def _flush_forever(self) -> None:
        while True:
            with self.wake:
                while not self.received:
                    self.wake.wait()
            time.sleep(FLUSH_S)  # let a burst gather into one segment
            with self.wake:
                taken, self.received = self.received, []
            payloads, times, topics, mids, qoss = zip(*taken)
            table = pa.table(
                [pa.array(payloads, pa.binary()), pa.array(times, pa.int64()), pa.array(topics, pa.string())],
                schema=JOURNAL_SCHEMA,
            )
            try:
                self.journal.append(self.next_index, table)
            except Exception as e:  # disk full, read-only: keep the messages (unacknowledged), retry
                with self.wake:
                    self.received[:0] = taken
                if self.journal_failing_since is None:
                    self.journal_failing_since = time.monotonic()
                self.journal_error = f"cannot write its journal {self.journal.base}: {type(e).__name__}: {e}"
                time.sleep(JOURNAL_RETRY_S)
                continue
            self.journal_error = self.journal_failing_since = None
            self.payload_bytes += sum(len(p) for p in payloads)
            self.next_index += len(taken)
            self.journaled_here += len(taken)
            for mid, qos in zip(mids, qoss):  # journaled: now the broker may forget them
                if qos > 0:
                    self.client.ack(mid, qos)


def _log_in(client, auth: MqttAuth | None) -> None:
    """The source's user name, password and TLS settings, set on the client before it connects."""
    if auth is None:
        return
    if auth.username is not None:
        password = resolve(auth.password, "MQTT password") if auth.password is not None else None
        client.username_pw_set(auth.username, password)
    if auth.tls or auth.ca_file or auth.cert_file:
        client.tls_set(ca_certs=auth.ca_file, certfile=auth.cert_file, keyfile=auth.key_file)


_SESSIONS: dict[tuple, Session] = {}
_SESSIONS_LOCK = threading.Lock()


def session_for(spec: MqttSource, directory: str) -> Session:
    """One session per client id and journal in a process (two clients with one id would
    take the session from each other)."""
    key = (spec.host, spec.port, spec.client_id, directory)
    with _SESSIONS_LOCK:
        if key not in _SESSIONS:
            _SESSIONS[key] = Session(spec, Journal(directory))
        return _SESSIONS[key]


class MqttStreamReader(ConnectorStreamReader):
    spec: MqttSource
    splittable = True

    def _journal_dir(self) -> str:
        return journal_dir(self.control_dir, self.name)

    def first_position(self) -> int:
        return 0

    def message_bytes(self) -> float | None:
        session = session_for(self.spec, self._journal_dir())
        return session.payload_bytes / session.journaled_here if session.journaled_here else None

    def plan(self, start: dict, cap: int | None) -> Plan:
        session = session_for(self.spec, self._journal_dir())
        failing = session.journal_failing_since
        if failing is not None:
            if time.monotonic() - failing > self.spec.patience_s:
                raise SourceError(
                    f"source {self.name!r}: {session.journal_error} (for more than "
                    f"{self.spec.patience_s:g} s); free space or make the checkpoint writable, "
                    "then start the job again: the broker kept the messages not journaled"
                )
            raise BrokerDown(session.journal_error or "the journal cannot be written")
        journaled = session.next_index
        end = journaled if cap is None else min(journaled, start["position"] + cap)
        if end <= start["position"] and not session.connected:
            raise BrokerDown(session.last_error or "not connected")
        return Plan(end, end - start["position"], journaled - end)

    def fetch(self, span: Span):
        table = Journal(self._journal_dir()).read(span.start, span.end)
        payloads = table.column("payload").to_pylist()
        parsed = parse_json(payloads, self.spec.schema())
        received = table.column("received_us").to_numpy()
        topics = table.column("topic").to_pylist()
        positions = [f"journal {span.start + i} (topic {t})" for i, t in enumerate(topics)]
        return parsed, np.asarray(received, np.int64)[parsed.kept], positions, payloads

    def commit(self, end: dict) -> None:
        Journal(self._journal_dir()).forget_before(end["position"])
