"""A Spark standalone cluster on this machine: one master and N workers, started from the
installed ``pyspark`` wheel (no Spark download, no sbin scripts).

For trying Sluice on a real cluster manager (``sluice cluster up``), for the cluster tests and
for benchmarks::

    with LocalCluster(workers=2, cores=1, memory="1g") as cluster:
        pipeline.run("file:///tmp/ckpt", master=cluster.master_url)

With ``network_namespaces=True`` the master and each worker run in a network namespace of
their own with their own address (``runtime.netns``), reached from the driver through a
bridge: a cluster of separate hosts on one machine, whose links can be cut
(``cut_worker``) and whose workers can be killed and replaced (``kill_worker``,
``add_worker``). It needs root.

Each worker has its own work directory (its executors' scratch space and logs) under
``root``; the processes' own logs go to ``root/logs``. Executors run the driver's Python
(``PYSPARK_PYTHON``) but not its ``PYTHONPATH``: the pipeline's code reaches them only as
shipped files (``runtime.shipping``), as on a real cluster.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from typing import Self

from sluice.errors import EnvironmentProblem
from sluice.runtime.netns import NamespacedNetwork

HOST = "127.0.0.1"


def spark_home() -> str:
    """The installed pyspark package directory: a complete Spark (jars and bin/spark-class)."""
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


@dataclass
class ClusterInfo:
    """What ``sluice cluster up`` leaves behind for ``sluice cluster down`` and for users."""

    master_url: str
    master_ui: str
    root: str
    pids: list[int]
    secret_file: str | None = None  # the cluster's spark.authenticate secret (None: no authentication)

    def save(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.__dict__, f, indent=1)

    @classmethod
    def load(cls, path: str) -> ClusterInfo:
        with open(path) as f:
            return cls(**json.load(f))


class LocalCluster:
    """A standalone master and ``workers`` workers of ``cores`` cores and ``memory`` each."""

    def __init__(
        self,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        root: str | None = None,
        timeout_s: float = 120.0,
        distinct_hosts: bool = False,
        authenticate: bool = False,
        network_namespaces: bool = False,
    ):
        """``distinct_hosts``: each worker (and its executors) binds its own loopback address,
        127.0.0.2, 127.0.0.3, ..., so Spark takes them for different hosts, as on a real
        cluster: it reads another executor's shuffle blocks over the network rather than from
        the host's disk, and its locality preferences (which name hosts) tell the workers
        apart. Linux routes all of 127.0.0.0/8 to the loopback interface.

        ``authenticate``: master, workers and executors require ``spark.authenticate`` with
        a secret made for this cluster (in ``root/spark-auth.conf``, readable by this user
        only, handed to the daemons as their properties file); a driver joins with
        ``spark_conf()``. ``sluice cluster up`` starts its cluster so.

        ``network_namespaces``: the master and every worker (and so its executors) run in a
        network namespace of their own on a bridge (``runtime.netns``), each binding its own
        address; a driver in the root namespace joins with ``spark_conf()``, which binds it
        to the bridge's address so executors can reach it. Needs root and ``ip``."""
        self.workers, self.cores, self.memory = workers, cores, memory
        self.distinct_hosts = distinct_hosts
        self.network = NamespacedNetwork() if network_namespaces else None
        self.master_host = self.network.address(0) if self.network is not None else HOST
        self._own_root = root is None
        self.root = os.path.abspath(root or tempfile.mkdtemp(prefix="sluice-cluster-"))
        self.timeout_s = timeout_s
        self.master_port, self.master_ui_port = free_port(), free_port()
        self.master_url = f"spark://{self.master_host}:{self.master_port}"
        self.master_ui = f"http://{self.master_host}:{self.master_ui_port}"
        self.processes: list[subprocess.Popen] = []
        self.by_name: dict[str, subprocess.Popen] = {}  # "master", "worker-0", ...: the live ones
        self._daemon_args: tuple[str, ...] = ()
        self._next_worker = 0
        self.authenticate = authenticate
        self.secret: str | None = None
        self.secret_file: str | None = None

    # ---- life cycle --------------------------------------------------------------------------
    def start(self) -> LocalCluster:
        """Start the master, then the workers; return once every worker has registered."""
        os.makedirs(os.path.join(self.root, "logs"), exist_ok=True)
        try:
            if self.authenticate:
                self._write_secret()
                assert self.secret_file is not None
                self._daemon_args = ("--properties-file", self.secret_file)
            if self.network is not None:
                self.network.open()
                self.network.add("master")  # the first member: the address master_url names
            self._launch(
                "master",
                "org.apache.spark.deploy.master.Master",
                "--host",
                self.master_host,
                "--port",
                str(self.master_port),
                "--webui-port",
                str(self.master_ui_port),
                *self._daemon_args,
                host=self.master_host,
            )
            self._wait_for(lambda: self._alive_workers() is not None, "the master to answer")
            for _ in range(self.workers):
                self._launch_worker()
            self._wait_for(lambda: (self._alive_workers() or 0) >= self.workers, f"{self.workers} workers to register")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop workers (and with them their executors), then the master; remove a root this
        object made."""
        try:
            for proc in reversed(self.processes):
                _stop_process(proc)
        finally:
            self.processes, self.by_name = [], {}
            if self.network is not None:
                self.network.close()  # after the processes: none still uses a namespace
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def info(self) -> ClusterInfo:
        return ClusterInfo(self.master_url, self.master_ui, self.root, [p.pid for p in self.processes], self.secret_file)

    def spark_conf(self) -> dict[str, str]:
        """What a driver's session needs to join this cluster: its secret, if it has one, and
        on namespaced hosts the driver's address on their bridge (a driver binds nothing
        they could reach otherwise: Sluice binds loopback for local masters)."""
        from sluice.runtime.session import auth_conf

        conf = auth_conf(self.secret) if self.secret else {}
        if self.network is not None:
            conf |= {"spark.driver.host": self.network.gateway, "spark.driver.bindAddress": self.network.gateway}
        return conf

    def _write_secret(self) -> None:
        from sluice.runtime.session import auth_conf

        conf = auth_conf()
        self.secret = conf["spark.authenticate.secret"]
        self.secret_file = os.path.join(self.root, "spark-auth.conf")
        fd = os.open(self.secret_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.writelines(f"{k} {v}\n" for k, v in conf.items())
        os.chmod(self.secret_file, 0o600)  # an existing file keeps its mode through O_CREAT

    # ---- what runs on it ---------------------------------------------------------------------
    def executor_pids(self) -> list[int]:
        """Process ids of the executors (CoarseGrainedExecutorBackend) the workers run now."""
        workers = {p.pid for name, p in self.by_name.items() if name != "master"}
        return [pid for pid, ppid, cmd in _processes() if ppid in workers and "CoarseGrainedExecutorBackend" in cmd]

    def worker_executor_pids(self, index: int) -> list[int]:
        """The executors worker ``index`` runs now."""
        worker = self.by_name.get(f"worker-{index}")
        if worker is None:
            return []
        return [pid for pid, ppid, cmd in _processes() if ppid == worker.pid and "CoarseGrainedExecutorBackend" in cmd]

    def add_worker(self) -> int:
        """Start one more worker (on namespaced hosts, in a namespace of its own); its index,
        once the master has it."""
        index = self._launch_worker()
        if self.network is not None or self.distinct_hosts:
            host = self.worker_host(index)
            self._wait_for(lambda: (self._alive_workers(host) or 0) >= 1, f"worker {index} to register")
        else:  # all on one address: the count of live workers tells
            alive = len(self.by_name) - 1
            self._wait_for(lambda: (self._alive_workers() or 0) >= alive, f"worker {index} to register")
        return index

    def kill_worker(self, index: int) -> None:
        """SIGKILL worker ``index`` with everything it runs (its executors and their Python
        workers share its process group): a host lost at once, with no goodbyes."""
        proc = self.by_name.pop(f"worker-{index}")
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
        self.processes.remove(proc)
        if self.network is not None:
            self.network.remove(f"worker-{index}")

    def cut_worker(self, index: int) -> None:
        """Take worker ``index``'s host off the network (namespaced hosts only)."""
        self._namespaced().cut(f"worker-{index}")

    def restore_worker(self, index: int) -> None:
        """Put worker ``index``'s host back on the network."""
        self._namespaced().restore(f"worker-{index}")

    # ---- helpers -----------------------------------------------------------------------------
    def worker_host(self, index: int) -> str:
        """The address worker ``index`` and its executors bind."""
        if self.network is not None:
            return self.network.members[f"worker-{index}"].address
        return f"127.0.0.{2 + index}" if self.distinct_hosts else HOST

    def _namespaced(self) -> NamespacedNetwork:
        if self.network is None:
            raise EnvironmentProblem("this cluster runs without network namespaces: start it with network_namespaces=True")
        return self.network

    def _launch_worker(self) -> int:
        """Start worker number ``_next_worker`` (a new namespace for it first, if namespaced)."""
        index, self._next_worker = self._next_worker, self._next_worker + 1
        name = f"worker-{index}"
        if self.network is not None:
            self.network.add(name)
        work_dir = os.path.join(self.root, name)
        os.makedirs(work_dir, exist_ok=True)
        host = self.worker_host(index)
        self._launch(
            name,
            "org.apache.spark.deploy.worker.Worker",
            "--host",
            host,
            "--cores",
            str(self.cores),
            "--memory",
            self.memory,
            "--work-dir",
            work_dir,
            "--webui-port",
            str(free_port()),
            *self._daemon_args,
            self.master_url,
            host=host,
        )
        return index

    def _launch(self, name: str, main_class: str, *args: str, host: str = HOST) -> None:
        env = dict(
            os.environ,
            SPARK_HOME=spark_home(),
            SPARK_LOCAL_IP=host,
            PYSPARK_PYTHON=os.environ.get("PYSPARK_PYTHON", sys.executable),
        )
        env.pop("PYTHONPATH", None)  # executors get the pipeline's code as shipped files only
        inside = self.network.exec_prefix(name) if self.network is not None else []
        with open(os.path.join(self.root, "logs", f"{name}.log"), "ab") as log:
            proc = subprocess.Popen(
                [*inside, os.path.join(spark_home(), "bin", "spark-class"), main_class, *args],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: stop() takes its children too
            )
        self.processes.append(proc)
        self.by_name[name] = proc

    def _alive_workers(self, host: str | None = None) -> int | None:
        """Workers (on ``host``, if given) the master reports ALIVE, or None while it doesn't answer."""
        try:
            with urllib.request.urlopen(f"{self.master_ui}/json/", timeout=2) as response:
                state = json.load(response)
        except (OSError, ValueError):
            return None
        workers = [w for w in state.get("workers", []) if host is None or w.get("host") == host]
        return sum(1 for w in workers if w.get("state") == "ALIVE")

    def _wait_for(self, condition, what: str) -> None:
        deadline = time.time() + self.timeout_s
        while not condition():
            dead = [p for p in self.processes if p.poll() is not None]
            if dead:
                raise EnvironmentProblem(
                    f"a Spark cluster process exited ({dead[0].returncode}) while waiting for "
                    f"{what}; see the logs in {os.path.join(self.root, 'logs')}"
                )
            if time.time() > deadline:
                raise EnvironmentProblem(
                    f"timed out after {self.timeout_s:.0f} s waiting for {what}; "
                    f"see the logs in {os.path.join(self.root, 'logs')}"
                )
            time.sleep(0.25)


def read_secret(state: str, master: str) -> dict[str, str]:
    """The driver settings to join the cluster recorded in ``state`` (``sluice cluster up``'s
    file) if ``master`` is its master: its ``spark.authenticate`` secret, read from its
    properties file; {} for another master or a cluster without authentication."""
    try:
        info = ClusterInfo.load(state)
    except (OSError, ValueError, TypeError):
        return {}
    if info.master_url != master or not info.secret_file:
        return {}
    conf = {}
    with open(info.secret_file) as f:
        for line in f:
            key, _, value = line.strip().partition(" ")
            if key.startswith("spark.authenticate"):
                conf[key] = value.strip()
    return conf


def stop_pids(pids: list[int], patience_s: float = 15.0) -> None:
    """Stop the process groups of ``pids`` (a cluster started by another command)."""
    for pid in reversed(pids):
        _signal_group(pid, signal.SIGTERM)
    deadline = time.time() + patience_s
    while time.time() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.2)
    for pid in pids:
        _signal_group(pid, signal.SIGKILL)


def _stop_process(proc: subprocess.Popen, patience_s: float = 15.0) -> None:
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=patience_s)
    except subprocess.TimeoutExpired:
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _processes() -> list[tuple[int, int, str]]:
    """(pid, parent pid, command line) of every process (Linux /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        out.append((int(entry), ppid, cmd))
    return out
