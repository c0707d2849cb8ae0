"""The brokers and databases the connector tests talk to, on loopback.

The machine's shared services (PostgreSQL, Redis, NATS with JetStream, Mosquitto, Kafka) are used
with names unique to each test run, so parallel runs do not collide; ``.ci/run`` starts any
that is not running. A test whose service is down FAILS, naming it and how to start it: a
connector untested because its broker was missing must not pass as green.

Tests that restart a broker start a private one of their own on a free port
(``PrivateNats``), never the shared one.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid

import pytest

PG_DSN = os.environ.get("SLUICE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("SLUICE_TEST_REDIS", "redis://127.0.0.1:6379/0")
NATS_URL = os.environ.get("SLUICE_TEST_NATS", "nats://127.0.0.1:4222")
MQTT_HOST, MQTT_PORT = "127.0.0.1", 1883
KAFKA = os.environ.get("SLUICE_TEST_KAFKA", "127.0.0.1:9092")

SERVICES = {
    "PostgreSQL": 5432,
    "Redis": 6379,
    "NATS": 4222,
    "Mosquitto": MQTT_PORT,
    "Kafka": int(KAFKA.rsplit(":", 1)[1]),
}


def reachable(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def require(service: str) -> None:
    port = SERVICES[service]
    if not reachable(port):
        pytest.fail(
            f"{service} is not running on 127.0.0.1:{port}: the connector tests need it "
            f"(.ci/run starts it with scripts/start_services.sh)",
            pytrace=False,
        )


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- NATS ----------------------------------------------------------------------------------------


def nats_run(work, url: str = NATS_URL):
    """``await work(js)`` with a fresh connection."""
    import nats

    async def main():
        nc = await nats.connect(url)
        try:
            return await work(nc.jetstream())
        finally:
            await nc.close()

    return asyncio.run(main())


def nats_stream(name: str, url: str = NATS_URL, **config) -> None:
    async def work(js):
        await js.add_stream(name=name, subjects=[f"{name}.>"], **config)

    nats_run(work, url)


def nats_publish(name: str, payloads: list[bytes], url: str = NATS_URL) -> None:
    async def work(js):
        for i in range(0, len(payloads), 500):
            await asyncio.gather(*(js.publish(f"{name}.in", p) for p in payloads[i : i + 500]))

    nats_run(work, url)


def nats_delete(name: str, url: str = NATS_URL) -> None:
    async def work(js):
        with contextlib.suppress(Exception):
            await js.delete_stream(name)

    with contextlib.suppress(Exception):
        nats_run(work, url)


def nats_messages(name: str, url: str = NATS_URL) -> list:
    """Every message of a stream, in order, with its headers."""

    async def work(js):
        info = await js.stream_info(name)
        return (
            [await js.get_msg(name, seq) for seq in range(info.state.first_seq, info.state.last_seq + 1)]
            if info.state.messages
            else []
        )

    return nats_run(work, url)


class PrivateNats:
    """A nats-server with JetStream of this test's own, on a free port, that it may stop and
    start again (its store directory survives, like a real broker's disk)."""

    def __init__(self, store: str):
        self.port = free_port()
        self.store = store
        self.url = f"nats://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        binary = shutil.which("nats-server") or "/usr/sbin/nats-server"
        self.proc = subprocess.Popen(
            [binary, "-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd", self.store],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.time() + 20
        while not reachable(self.port):
            if time.time() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"private nats-server on port {self.port} did not start")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=20)
        self.proc = None


# --- PostgreSQL ----------------------------------------------------------------------------------


def pg(sql: str, params=(), dsn: str = PG_DSN):
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(sql, params or None)
        return cur.fetchall() if cur.description else None


# --- Redis ------------------------------------------------------------------------------------------


def redis_client():
    import redis

    return redis.Redis.from_url(REDIS_URL)


# --- Kafka ------------------------------------------------------------------------------------------


_KAFKA_ADMIN: list = []


def kafka_admin():
    """One admin client for the process (a new one costs a connection: tests poll offsets)."""
    from confluent_kafka.admin import AdminClient

    if not _KAFKA_ADMIN:
        _KAFKA_ADMIN.append(AdminClient({"bootstrap.servers": KAFKA}))
    return _KAFKA_ADMIN[0]


def kafka_topic(name: str, partitions: int = 1) -> None:
    from confluent_kafka.admin import NewTopic

    admin = kafka_admin()  # kept alive until the future resolves
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def kafka_add_partitions(name: str, total: int) -> None:
    from confluent_kafka.admin import NewPartitions

    admin = kafka_admin()
    admin.create_partitions([NewPartitions(name, total)])[name].result(30)


def kafka_delete(*names: str) -> None:
    admin = kafka_admin()
    for future in admin.delete_topics(list(names)).values():
        with contextlib.suppress(Exception):  # never created
            future.result(30)


def kafka_produce(topic: str, payloads: list[bytes], partition: int | None = None) -> list[tuple[int, int]]:
    """Each payload as one record (to ``partition``, or spread by the client); returns the
    (partition, offset) of each, in order."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": KAFKA, "linger.ms": 5})
    where: list = [None] * len(payloads)

    def delivered(error, message, i):
        assert error is None, error
        where[i] = (message.partition(), message.offset())

    for i, payload in enumerate(payloads):
        kwargs = {} if partition is None else {"partition": partition}
        producer.produce(topic, payload, on_delivery=lambda e, m, i=i: delivered(e, m, i), **kwargs)
        if i % 10_000 == 9_999:
            producer.flush()
    producer.flush()
    return where


def kafka_offsets(topic: str, committed: bool = True) -> dict[int, int]:
    """partition -> last stable offset (``committed``) or high watermark."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    admin = kafka_admin()
    meta = admin.list_topics(topic, timeout=10).topics[topic]
    level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    futures = admin.list_offsets(
        {TopicPartition(topic, p): OffsetSpec.latest() for p in meta.partitions}, isolation_level=level, request_timeout=10
    )
    return {tp.partition: f.result().offset for tp, f in futures.items()}


def kafka_records(topic: str, committed: bool = True, timeout: float = 30) -> list:
    """Every record of ``topic`` a consumer sees (``read_committed`` or not), as
    (partition, offset, key, value, headers), in partition and offset order."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    deadline = time.time() + timeout
    ends = kafka_offsets(topic, committed)
    # A commit returns before Kafka has written its markers: until then the last stable offset
    # lags. Read once no transaction is pending (the stable offsets reach the high watermarks).
    while committed and ends != kafka_offsets(topic, committed=False) and time.time() < deadline:
        time.sleep(0.05)
        ends = kafka_offsets(topic, committed)
    consumer = Consumer(
        {
            "bootstrap.servers": KAFKA,
            "group.id": "sluice-tests",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    left = {p for p, end in ends.items() if end > 0}
    got = []
    while left and time.time() < deadline:
        for m in consumer.consume(1000, 0.5):
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF and m.offset() >= ends[m.partition()]:
                    left.discard(m.partition())
                continue
            if m.offset() < ends[m.partition()]:
                got.append((m.partition(), m.offset(), m.key(), m.value(), m.headers()))
            if m.offset() >= ends[m.partition()] - 1:
                left.discard(m.partition())
    consumer.close()
    assert not left, f"topic {topic}: partitions {left} not read to their end in {timeout} s"
    return sorted(got, key=lambda r: (r[0], r[1]))


# --- private Kafka and PostgreSQL, for tests that restart them -----------------------------------

KAFKA_LIBS = os.environ.get("SLUICE_KAFKA_LIBS", "/var/tmp/sluice-services/kafka-4.1.1/libs")
PG_BIN = os.environ.get("SLUICE_PG_BIN") or max(glob.glob("/usr/lib/postgresql/*/bin"), default="/usr/lib/postgresql/15/bin")


def _wait_listening(port: int, proc: subprocess.Popen | None, what: str, log: str, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while not reachable(port):
        if time.time() > deadline or (proc is not None and proc.poll() is not None):
            tail = open(log, errors="replace").read()[-2000:] if os.path.exists(log) else ""
            raise RuntimeError(f"{what} on port {port} did not start; its log ends:\n{tail}")
        time.sleep(0.1)


class PrivateKafka:
    """A single-node KRaft broker of this test's own, on free ports, from the Kafka jars that
    scripts/start_services.sh resolved (its log directory survives a stop, like a real disk)."""

    def __init__(self, work: str):
        self.work = work
        self.port, self.controller = free_port(), free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.conf = os.path.join(work, "server.properties")
        self.log = os.path.join(work, "kafka.log")
        self.proc: subprocess.Popen | None = None

    def _java(self, *args: str, **kwargs) -> subprocess.Popen:
        if not os.path.isdir(KAFKA_LIBS):
            pytest.fail(f"no Kafka jars at {KAFKA_LIBS}: scripts/start_services.sh resolves them", pytrace=False)
        log4j = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "kafka", "log4j2.yaml")
        return subprocess.Popen(
            ["java", "-Xms128m", "-Xmx512m", "-XX:TieredStopAtLevel=1", "-cp", f"{KAFKA_LIBS}/*"]
            + [f"-Dlog4j2.configurationFile={log4j}", *args],
            **kwargs,
        )

    def start(self) -> None:
        if not os.path.exists(self.conf):
            os.makedirs(self.work, exist_ok=True)
            settings = {
                "process.roles": "broker,controller",
                "node.id": "1",
                "controller.quorum.voters": f"1@127.0.0.1:{self.controller}",
                "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
                "controller.listener.names": "CONTROLLER",
                "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                "inter.broker.listener.name": "PLAINTEXT",
                "offsets.topic.replication.factor": "1",
                "offsets.topic.num.partitions": "1",
                "transaction.state.log.replication.factor": "1",
                "transaction.state.log.min.isr": "1",
                "transaction.state.log.num.partitions": "1",
                "group.initial.rebalance.delay.ms": "0",
                "log.dirs": os.path.join(self.work, "data"),
            }
            with open(self.conf, "w") as f:
                f.writelines(f"{k}={v}\n" for k, v in settings.items())
            cluster = "-"
            while cluster.startswith("-"):  # a leading '-' would read as an option
                cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
            with open(self.log, "ab") as log:
                fmt = self._java("kafka.tools.StorageTool", "format", "-t", cluster, "-c", self.conf, stdout=log, stderr=log)
            if fmt.wait(120) != 0:
                raise RuntimeError(f"formatting the private Kafka's log directory failed; see {self.log}")
        with open(self.log, "ab") as log:
            self.proc = self._java("kafka.Kafka", self.conf, stdout=log, stderr=log)
        _wait_listening(self.port, self.proc, "private Kafka", self.log)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


class PrivatePostgres:
    """A PostgreSQL server of this test's own (initdb into a fresh directory, run as the
    ``postgres`` user when the test runs as root, trust auth on 127.0.0.1) on a free port,
    that it may stop and start again with its data kept."""

    def __init__(self):
        self.port = free_port()
        # not pytest's tmp_path: the postgres user must be able to enter it
        self.dir = tempfile.mkdtemp(prefix="sluice-pg-")
        self.data = os.path.join(self.dir, "data")
        self.log = os.path.join(self.dir, "server.log")
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._as: list[str] = []
        if os.geteuid() == 0:  # initdb refuses root: the server runs as the postgres user
            shutil.chown(self.dir, "postgres", "postgres")
            self._as = ["runuser", "-u", "postgres", "--"]

    def _run(self, *args: str) -> None:
        proc = subprocess.run([*self._as, *args], capture_output=True, text=True, timeout=120, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:2])} failed ({proc.returncode}): {proc.stderr.strip()[-1500:]}")

    def start(self) -> None:
        if not os.path.exists(os.path.join(PG_BIN, "pg_ctl")):
            pytest.fail(f"no PostgreSQL server binaries in {PG_BIN} (Debian's postgresql package)", pytrace=False)
        if not os.path.exists(self.data):
            self._run(os.path.join(PG_BIN, "initdb"), "-D", self.data, "-U", "postgres", "--auth=trust", "--no-sync")
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.dir} -c fsync=off"
        self._run(os.path.join(PG_BIN, "pg_ctl"), "-D", self.data, "-l", self.log, "-o", options, "-w", "start")
        _wait_listening(self.port, None, "private PostgreSQL", self.log)

    def stop(self, mode: str = "fast") -> None:
        if os.path.exists(os.path.join(self.data, "postmaster.pid")):
            self._run(os.path.join(PG_BIN, "pg_ctl"), "-D", self.data, "-m", mode, "-w", "stop")

    def remove(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)
