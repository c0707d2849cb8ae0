"""The SparkSession Sluice runs on: local embedded Spark by default, any master URL works."""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import subprocess
import sys
import uuid

from sluice.errors import EnvironmentProblem
from sluice.runtime.lease import pid_alive

_INSTALL_JAVA = (
    "Install Java 17+ (Debian/Ubuntu: apt-get install -y openjdk-17-jre-headless; "
    "macOS: brew install openjdk@17) or point JAVA_HOME at one."
)


@functools.cache
def java_major_version() -> int:
    """The major version of the ``java`` Spark will use; raises EnvironmentProblem if none."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        raise EnvironmentProblem("Spark needs Java 17+ but no 'java' was found. " + _INSTALL_JAVA)
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False).stderr
    try:
        version = out.split('"')[1]
    except IndexError:
        raise EnvironmentProblem(f"cannot read the Java version from {out!r}. " + _INSTALL_JAVA) from None
    parts = version.split(".")
    return int(parts[1]) if parts[0] == "1" else int(parts[0])


def check_java() -> None:
    major = java_major_version()
    if major < 17:
        raise EnvironmentProblem(f"Spark needs Java 17+, found Java {major}. " + _INSTALL_JAVA)


def worker_site() -> list[str]:
    """The directory whose ``sitecustomize`` has Spark's Python processes import the installed
    PySpark rather than Spark's zip copies of it (``runtime.worker_site``), unless
    ``SLUICE_WORKER_SITE=0``."""
    if os.environ.get("SLUICE_WORKER_SITE", "1") in ("0", "false", "no"):
        return []
    from sluice.runtime import worker_site as site

    return [site.DIRECTORY]


def ui_enabled(ui: bool | None = None) -> bool:
    """Whether a new session serves the Spark UI: ``ui`` if given, else on unless the
    environment says ``SLUICE_SPARK_UI=0`` (the test suite does: parallel runs would fight
    over its port)."""
    return ui if ui is not None else os.environ.get("SLUICE_SPARK_UI", "1") not in ("0", "false", "no")


LOOPBACK = "127.0.0.1"
REDACTED_OPTIONS = "(?i)url|spec|password|secret|token"
"""Data source options whose values Spark's plans show as redacted (Spark's default: url)."""


def is_local_master(master: str) -> bool:
    """A master whose driver, executors and UI all run on this machine: ``local``,
    ``local[N]``, ``local-cluster[...]``, or a standalone master on a loopback address (the
    cluster ``sluice cluster up`` starts)."""
    if master.startswith("local"):
        return True
    host = master.removeprefix("spark://").split(":", 1)[0]
    return master.startswith("spark://") and (host == "localhost" or host.startswith("127."))


def network_conf(master: str) -> dict[str, str]:
    """Spark settings that keep a session's listening sockets where its peers are.

    Spark's defaults listen on every interface: the driver's RPC and block manager on the
    machine's external address and the UI on ``*:4040``, with no authentication and with
    links that kill jobs. On a local master nobody else needs to reach them, so they bind
    the loopback address; the UI's kill links are off everywhere (a read-only UI still
    shows everything). Spark's UI takes its address only from ``SPARK_LOCAL_IP``, which
    ``spark_session`` sets for local masters. A user's own ``conf`` wins over these."""
    out = {
        "spark.ui.killEnabled": "false",
        # a source's options carry its encoded spec (``sources.datasource``), connection
        # strings and all: the plans Spark shows (UI, explain) print it redacted
        "spark.sql.redaction.options.regex": REDACTED_OPTIONS,
    }
    if is_local_master(master):
        out |= {"spark.driver.host": LOOPBACK, "spark.driver.bindAddress": LOOPBACK}
    return out


def auth_conf(secret: str | None = None) -> dict[str, str]:
    """``spark.authenticate`` with a shared secret (a new random one unless given): every
    RPC between driver, executors, master and workers must then carry it. Turn it on with
    ``SLUICE_SPARK_AUTH=1`` (the secret from ``SLUICE_SPARK_AUTH_SECRET`` when set); the
    cluster of ``sluice cluster up`` is started with it and records its secret for runs."""
    import secrets

    return {"spark.authenticate": "true", "spark.authenticate.secret": secret or secrets.token_hex(32)}


def cluster_auth_conf(master: str, state: str = os.path.join(".sluice", "cluster.json")) -> dict[str, str]:
    """The authentication settings of the cluster ``sluice cluster up`` started from this
    directory, when ``master`` is its master (else none): ``sluice run --master`` then
    joins it with no more ado."""
    if not master.startswith("spark://") or not os.path.exists(state):
        return {}
    from sluice.runtime.cluster import read_secret

    return read_secret(state, master)


def announce_ui(spark) -> None:
    """Print where the session's Spark UI serves (nothing when it has none)."""
    url = spark.sparkContext.uiWebUrl
    if url:
        print(f"Spark UI at {url}", flush=True)


REQUIRED_SQL_CONF = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
    # Adaptive execution re-plans a batch's jobs as they run: it coalesces the partitions of
    # Spark's hash exchange that Sluice's salt steers (a key group's rows must reach the
    # partition its routing table names), and an observation of the source's rows inside
    # ``foreachBatch`` then fails to be read back (``java.lang.AssertionError`` in
    # ``toPyRow``, seen on Spark 4.1 with Spark's default of adaptive execution on).
    "spark.sql.adaptive.enabled": "false",
}
"""Runtime SQL settings Sluice's batches rely on: set on Sluice's own sessions, and for the
length of a run on a session a user made (``session_settings``)."""

FAST_SQL_CONF = {
    # Spark bounds the Arrow batches it hands a Python worker by records (10,000) and by
    # bytes, and checks the bytes after every row, walking every column's buffers: in
    # keyed_throughput that check was some 40 % of the executors' JVM time (Java Flight
    # Recorder, docs/runtime.md section 5). Spark skips the check only at Int.MaxValue,
    # so batches here are bounded by records alone; a pipeline of very wide rows can set
    # its own limit (``conf``), which wins.
    "spark.sql.execution.arrow.maxBytesPerBatch": str(2**31 - 1),
    # Spark's default manager of its offset and commit logs writes each file through
    # Hadoop's FileContext, which on a local disk without Hadoop's native library forks
    # three processes a file (chmod, and readlink twice for the rename): some 120 ms a
    # batch for the two logs (Java Flight Recorder, docs/runtime.md section 5). The
    # FileSystem-based manager forks once a file. Its rename checks that the target is
    # absent before renaming, where FileContext's is one atomic call: two drivers racing
    # on one checkpoint could both pass the check, which Sluice's driver lease prevents
    # (runtime.lease).
    "spark.sql.streaming.checkpointFileManagerClass": (
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
    ),
}
"""Runtime SQL settings that make Sluice's batches faster: on a user's session, applied for
a run only where the user has not set them."""


@contextlib.contextmanager
def session_settings(spark):
    """Run with Sluice's runtime SQL settings on a session a user made (``run(spark=...)``):
    the required ones always, the fast ones where the session has no value of its own; each
    goes back to what it was when the run ends. ``None`` (Sluice makes the session): nothing."""
    if spark is None:
        yield
        return
    before = {key: spark.conf.get(key, None) for key in (*REQUIRED_SQL_CONF, *FAST_SQL_CONF)}
    wanted = {**{k: v for k, v in FAST_SQL_CONF.items() if before[k] is None}, **REQUIRED_SQL_CONF}
    changed = {key: value for key, value in wanted.items() if before[key] != value}
    for key, value in changed.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key in changed:
            if before[key] is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, before[key])


DRIVER_JAVA_OPTIONS = "-XX:MetaspaceSize=256m"
"""The driver JVM's own options. Its first batch loads thousands of classes (Spark's
operators, generated code, Arrow, Parquet): each time their metadata passed the default
threshold (some 20 MB, raised a little each time), G1 ran a collection of the whole heap
for it. Java Flight Recorder counted 0.5 s of collections in a restarted driver's first
batch, 0.15 s of them for metadata (docs/results/startup.md)."""


def submitted_master() -> str | None:
    """The master ``spark-submit`` (or the ``pyspark`` shell) was given, when this driver runs
    under it: its JVM is already up (``PYSPARK_GATEWAY_PORT``), and a pipeline that names no
    master must run where the submit said (``--master yarn``, ``k8s://...``), not locally."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return None
    from pyspark import SparkConf, SparkContext

    # connects to spark-submit's JVM (no new one); a SparkConf reads its settings only then
    SparkContext._ensure_initialized()
    return SparkConf().get("spark.master", None)


def spark_session(master: str | None = None, app_name: str = "sluice", conf: dict | None = None, ui: bool | None = None):
    """Get (or create) the SparkSession, quiet and with workers on this interpreter.

    Python workers must run the same interpreter as the driver (the virtualenv's), or
    Python data sources die with "Python worker failed to connect back". The Spark UI is on
    (port 4040, or the next free one) unless ``ui`` is False or ``SLUICE_SPARK_UI=0``.
    """
    check_java()
    # Workers must import what the driver imports (user modules next to a pipeline file,
    # test modules): hand them the driver's path. Set before the JVM starts the workers.
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    current = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(worker_site() + ([current] if current else []) + paths))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    master = master or os.environ.get("SLUICE_MASTER") or submitted_master() or "local[*]"
    if is_local_master(master):
        # the UI binds this address (and only through the environment); set before the JVM starts
        os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", str(ui_enabled(ui)).lower())
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.memory", os.environ.get("SLUICE_DRIVER_MEMORY", "2g"))
        .config("spark.sql.session.timeZone", "UTC")
    )
    defaults = network_conf(master)
    if os.environ.get("SLUICE_SPARK_AUTH", "0") in ("1", "true", "yes"):
        defaults |= auth_conf(os.environ.get("SLUICE_SPARK_AUTH_SECRET") or None)
    defaults |= cluster_auth_conf(master)
    conf = {**defaults, **(conf or {})}
    archive = class_archive() if not SparkSession.getActiveSession() else None
    # a user's own driver options come first, then Sluice's and the archive's
    conf["spark.driver.extraJavaOptions"] = " ".join(
        o
        for o in (
            conf.get("spark.driver.extraJavaOptions", ""),
            DRIVER_JAVA_OPTIONS,
            archive.java_options() if archive is not None else "",
        )
        if o
    )
    for key, value in {**REQUIRED_SQL_CONF, **FAST_SQL_CONF, **conf}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if archive is not None and archive.records:
        archive.save_at_exit(spark)
    spark.sparkContext.setLogLevel(os.environ.get("SLUICE_SPARK_LOG_LEVEL", "ERROR"))
    # A query that dies is reported by run_pipeline as the SluiceError it was raised as (or
    # with Spark's message): Spark's own log of it, Java and Python stack traces of some 80
    # lines for each logger that sees the failure, would bury that one clear message.
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # a driver's context always has its JVM
    log4j = jvm.org.apache.logging.log4j
    for logger in FAILURE_LOGGERS:
        log4j.core.config.Configurator.setLevel(logger, log4j.Level.OFF)
    return spark


QUERY_LOGGER = "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution"
# a task that raised (on a local executor: e.g. a state file the disk refused) is logged by
# each of these, with its traces, before the query fails with the same error
FAILURE_LOGGERS = (
    QUERY_LOGGER,
    "org.apache.spark.executor.Executor",
    "org.apache.spark.util.Utils",
    "org.apache.spark.scheduler.TaskSetManager",
    "org.apache.spark.sql.execution.datasources.FileFormatWriter",
)


class ClassArchive:
    """A class-data-sharing archive of the classes Spark's driver JVM loads as it starts.

    A JVM starting Spark loads and verifies some twenty thousand classes, a good part of the
    JVM-and-SparkSession phase of a job's start (``benchmarks/startup.py``). Java's AppCDS
    maps them from an archive instead: a session started with the archive took some 40 %
    less CPU to start and a third less for its first job. The first session on a machine
    records the archive as its JVM exits (``-XX:ArchiveClassesAtExit``, into a file of its
    own, renamed into place once whole, so sessions running at the same time never read
    a half-written one); later sessions use it. An archive that does not fit the JVM or the
    classpath is ignored by the JVM (``-Xshare:auto``): a start is never worse than without.
    ``SLUICE_CLASS_ARCHIVE=0`` turns this off; the archives live under
    ``SLUICE_CACHE_DIR`` (default ``~/.cache/sluice``), one per Spark and Java version.

    Recording is not free: a JVM recording an archive started in 12.8 s on an idle machine
    against 7.4 s plain and 4.8 s from the archive. So one process records at a time (it
    holds ``PATH.recording``, a lock file naming its pid); others start plain meanwhile. A
    test suite or a cluster of ``sluice run`` children would otherwise each pay the
    recording and, killed, never save it. ``sluice warm`` records one deliberately (``make``
    runs it once after installing).
    """

    def __init__(self, path: str):
        self.path = path
        self.recording = f"{path}.{os.getpid()}.{uuid.uuid4().hex[:8]}.part"
        self.lock = f"{path}.recording"
        self.records = False  # java_options chose to record (and took the lock)

    def exists(self) -> bool:
        return os.path.isfile(self.path)

    def java_options(self) -> str:
        # the JVM's own notes on an archive it cannot use stay out of the job's output
        quiet = "-Xlog:cds=off -Xlog:cds+dynamic=off"
        if self.exists():
            return f"-XX:SharedArchiveFile={self.path} {quiet}"
        if self.take_recording_lock():
            self.records = True
            return f"-XX:ArchiveClassesAtExit={self.recording} {quiet}"
        return ""

    def take_recording_lock(self) -> bool:
        """True when this process may record the archive: nobody else alive is recording it."""
        for _ in range(2):  # a second try after clearing a dead recorder's lock
            try:
                fd = os.open(self.lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                if _alive(_lock_owner(self.lock)):
                    return False
                with contextlib.suppress(FileNotFoundError):
                    os.remove(self.lock)
                continue
            except OSError:
                return False
            with os.fdopen(fd, "w") as f:
                f.write(str(os.getpid()))
            return True
        return False

    def release_recording_lock(self) -> None:
        if _lock_owner(self.lock) == os.getpid():
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.lock)

    def save_at_exit(self, spark) -> None:
        """When this process exits: stop the session, let the JVM exit and write the archive,
        then move it into place (only a JVM that exited normally wrote a whole one)."""
        proc = getattr(spark.sparkContext._gateway, "proc", None)
        if proc is None or proc.stdin is None:  # not a JVM this process launched
            return

        def save() -> None:
            try:
                print("sluice: saving Spark's class archive for faster starts (once per machine)", file=sys.stderr, flush=True)
                spark.stop()
                proc.stdin.close()  # the gateway exits on EOF, writing the archive first
                if proc.wait(timeout=120) == 0 and os.path.getsize(self.recording) > 0:
                    os.replace(self.recording, self.path)
            except Exception as exc:  # best effort: the next session records it again
                print(f"sluice: no class archive saved ({exc})", file=sys.stderr, flush=True)
            finally:
                if os.path.exists(self.recording):
                    os.remove(self.recording)
                self.release_recording_lock()

        atexit.register(save)


def _lock_owner(lock: str) -> int | None:
    try:
        with open(lock) as f:
            return int(f.read().strip() or 0) or None
    except (OSError, ValueError):
        return None


def _alive(pid: int | None) -> bool:
    # a lock being written this instant reads empty: treated as stale once
    return pid is not None and pid_alive(pid)


def class_archive() -> ClassArchive | None:
    """The class archive for this Spark and Java, or None when turned off (or no cache
    directory can be made)."""
    if os.environ.get("SLUICE_CLASS_ARCHIVE", "1") in ("0", "false", "no"):
        return None
    import pyspark

    root = os.environ.get("SLUICE_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "sluice")
    directory = os.path.join(root, "class-archives")
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError:
        return None
    name = f"spark-{pyspark.__version__}-java-{java_major_version()}.jsa"
    return ClassArchive(os.path.join(directory, name))


def jvm_pid(spark) -> int:
    """The process id of the session's JVM (the driver's other process)."""
    return int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
