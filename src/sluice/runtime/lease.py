"""Who may run a job: a lease in its checkpoint, so that two drivers never commit to one
checkpoint at once, and a hot standby can take over within a second of the active's death.

The lease is ``lease.json`` in the checkpoint: an ``epoch``, its owner (host, the process ids
of the driver and its JVM) and the wall-clock time it ``expires_at``. The driver that holds
it renews it every ``ttl / 4`` seconds from a heartbeat thread. Another driver may take the
lease when it is free:

- released (the owner stopped cleanly), or
- expired: ``now > expires_at + grace`` (an owner on any host that stopped renewing), or
- dead: the owner runs on this host and none of its processes is alive any more (a SIGKILL:
  no need to wait for the expiry; the JVM is among the processes, so no task of the dead
  driver still writes).

Taking it means claiming the next epoch: ``lease/<epoch>.claim`` is created exclusively (only
one of two standbys racing for one epoch gets it), then ``lease.json`` is written with it.

**Fencing.** The holder checks ``Lease.check()`` before a batch writes its sinks and before it
commits its state and its done record (``runtime.batch.executor``): it fails with ``FencedError``
once ``lease.json`` names another holder, or once its own renewals have lapsed
(``now > expires_at - margin``: a driver paused longer than its lease may already be
replaced) and another driver has claimed the next epoch; a lapse nobody acted on is
renewed, so a stalled heartbeat on a loaded machine never stops a job that has no
standby. A standby waits ``grace`` beyond the expiry, the holder stops ``margin`` before
it, so a pause between a check and the write it guards must exceed ``margin + grace`` (and the
hosts' clocks must agree that well) before two drivers could write one batch; even then the
batch's writes are idempotent replays (docs/runtime.md) and Spark's offset log refuses a
second writer of one batch.

Pure logic over a checkpoint's files (``pyarrow.fs``): no Spark here.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field

import pyarrow.fs as pafs

from sluice.errors import CheckpointError, SluiceError
from sluice.runtime.checkpoint import Checkpoint

LEASE = "lease.json"
CLAIMS = "lease"
DEFAULT_TTL_S = 10.0  # long enough that a loaded machine's stalls don't fence a live driver;
# a SIGKILLed driver on this host is replaced without waiting for it (its processes are gone)


class LeaseHeldError(SluiceError):
    """Another live driver holds the checkpoint's lease."""


class FencedError(SluiceError):
    """This driver lost the checkpoint's lease: another took over; it must not write."""


@dataclass(frozen=True)
class LeaseRecord:
    """What ``lease.json`` says."""

    epoch: int
    owner: str  # unique per holder: host, pid and a random tag
    host: str
    pids: tuple[int, ...]  # the driver's processes on ``host`` (the Python driver, its JVM)
    expires_at: float  # time.time() seconds
    released: bool = False

    @classmethod
    def from_json(cls, data: bytes | None, where: str = LEASE) -> LeaseRecord | None:
        if not data:
            return None
        try:
            raw = json.loads(data)
            return cls(
                int(raw["epoch"]),
                str(raw["owner"]),
                str(raw["host"]),
                tuple(int(p) for p in raw["pids"]),
                float(raw["expires_at"]),
                bool(raw.get("released", False)),
            )
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
            raise CheckpointError(
                f"{where} is damaged ({type(e).__name__}: {e}); it says which driver runs this checkpoint. "
                f"Make sure no driver runs on it (no `sluice run` of this pipeline on any machine), then "
                f"delete {where} and start again."
            ) from None

    def to_json(self) -> bytes:
        return json.dumps({**asdict(self), "pids": list(self.pids)}).encode()


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this host (a zombie, killed but not yet reaped by its
    parent, counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_free(record: LeaseRecord | None, now: float, host: str, grace: float, alive: Callable[[int], bool] = pid_alive) -> bool:
    """Whether a driver on ``host`` may take a lease that says ``record`` at time ``now``."""
    if record is None or record.released:
        return True
    if now > record.expires_at + grace:
        return True
    return record.host == host and bool(record.pids) and not any(alive(pid) for pid in record.pids)


@dataclass
class Lease:
    """This driver's side of a checkpoint's lease: take it (``acquire``), keep it
    (``start_heartbeat``), check it before writing (``check``), give it back (``release``)."""

    checkpoint: Checkpoint
    ttl: float = DEFAULT_TTL_S
    pids: tuple[int, ...] = field(default_factory=lambda: (os.getpid(),))
    host: str = field(default_factory=socket.gethostname)
    clock: Callable[[], float] = time.time
    alive: Callable[[int], bool] = pid_alive
    epoch: int | None = None  # the epoch held, once acquired
    expires_at: float = 0.0

    def __post_init__(self) -> None:
        if self.ttl <= 0:
            raise ValueError(f"a lease's ttl must be positive seconds, got {self.ttl}")
        self.owner = f"{self.host}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.fenced: str | None = None  # why this driver lost the lease

    @property
    def grace(self) -> float:
        return self.ttl / 2

    @property
    def margin(self) -> float:
        return self.ttl / 4

    def read(self) -> LeaseRecord | None:
        return LeaseRecord.from_json(self.checkpoint.read_bytes(LEASE), self.checkpoint.location(LEASE))

    # ---- taking it -------------------------------------------------------------------------
    def try_acquire(self) -> bool:
        """Take the lease if it is free now; True if this driver holds it."""
        current = self.read()
        if not is_free(current, self.clock(), self.host, self.grace, self.alive):
            return False
        epoch = (current.epoch if current else 0) + 1
        if not self._claim(epoch):
            return False  # another driver claimed this epoch first
        with self._lock:
            self.epoch = epoch
            self.fenced = None
            self._write()
        return True

    def acquire(
        self,
        wait: bool = False,
        poll_s: float = 0.05,
        timeout_s: float | None = None,
        on_wait: Callable[[LeaseRecord], None] | None = None,
    ) -> int:
        """Take the lease; returns its epoch. ``wait``: until it is free (a standby), else
        LeaseHeldError at once when another live driver holds it."""
        deadline = None if timeout_s is None else self.clock() + timeout_s
        told = False
        while not self.try_acquire():
            current = self.read()
            if not wait:
                raise LeaseHeldError(self._describe(current) + ": run it with --standby to take over when it stops")
            if on_wait is not None and current is not None and not told:
                on_wait(current)
                told = True
            if deadline is not None and self.clock() > deadline:
                raise LeaseHeldError(
                    self._describe(current) + f": still held after {timeout_s} s; run it with "
                    "--standby to take over when it stops"
                )
            time.sleep(poll_s)
        assert self.epoch is not None
        return self.epoch

    def _claim(self, epoch: int) -> bool:
        """Create ``lease/<epoch>.claim`` if nobody did: exclusively on a local disk; on
        other file systems (no exclusive create through pyarrow.fs) write it and read it back."""
        rel = f"{CLAIMS}/{epoch:09d}.claim"
        fs = self.checkpoint.fs
        path = self.checkpoint.path(rel)
        if isinstance(fs, pafs.LocalFileSystem):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return False
            with os.fdopen(fd, "w") as f:
                f.write(self.owner)
            return True
        if self.checkpoint.read_bytes(rel) is not None:
            return False
        self.checkpoint.write_bytes(rel, self.owner.encode())
        return self.checkpoint.read_bytes(rel) == self.owner.encode()

    def _write(self, released: bool = False) -> None:
        assert self.epoch is not None
        self.expires_at = self.clock() + self.ttl
        self.checkpoint.write_bytes(
            LEASE, LeaseRecord(self.epoch, self.owner, self.host, self.pids, self.expires_at, released).to_json()
        )

    def _describe(self, record: LeaseRecord | None) -> str:
        if record is None:
            return f"the checkpoint {self.checkpoint}"
        left = record.expires_at - self.clock()
        expiry = f"expires in {left:.1f} s" if left > 0 else "expired"
        return (
            f"the checkpoint {self.checkpoint} is in use by processes {list(record.pids)} on {record.host} "
            f"(lease epoch {record.epoch}, {expiry})"
        )

    # ---- keeping it ------------------------------------------------------------------------
    def add_pids(self, pids: Iterable[int]) -> None:
        """Name more processes of this driver (its JVM) in the lease."""
        self.pids = tuple(dict.fromkeys([*self.pids, *pids]))
        self.renew()  # at once: a standby must not take the driver for dead while its JVM lives

    def renew(self) -> bool:
        """Extend the lease by ``ttl``; False (and fenced) if it is no longer this driver's."""
        with self._lock:
            if self.epoch is None or self.fenced:
                return False
            if self.clock() > self.expires_at - self.margin:
                return self._recover_lapsed()
            current = self.read()
            if current is None or current.epoch != self.epoch or current.owner != self.owner:
                self.fenced = (
                    f"another driver took its lease (epoch {current.epoch if current else '?'}, "
                    f"{current.owner if current else 'no lease file'})"
                )
                return False
            self._write()
            return True

    def _recover_lapsed(self) -> bool:
        """Renewals lapsed (a stalled process, a loaded machine): keep the lease if nobody has
        claimed the next epoch, which a standby must do before it takes over; else fenced.
        A lapse with no standby waiting must not stop a healthy job. Called holding the lock."""
        assert self.epoch is not None
        current = self.read()
        nobody_else = (
            current is not None
            and current.epoch == self.epoch
            and current.owner == self.owner
            and self.checkpoint.read_bytes(f"{CLAIMS}/{self.epoch + 1:09d}.claim") is None
        )
        if nobody_else:
            self._write()
            return True
        self.fenced = (
            f"its lease (epoch {self.epoch}) lapsed (not renewed for {self.ttl} s) and another driver "
            f"claimed epoch {self.epoch + 1}"
        )
        return False

    def start_heartbeat(self) -> None:
        """Renew every ``ttl / 4`` seconds on a daemon thread until released or fenced."""

        def beat() -> None:
            while not self._stop.wait(self.ttl / 4):
                try:
                    if not self.renew():
                        return
                except (OSError, CheckpointError):
                    # a full or read-only disk: the job's own writes fail and say so; try again
                    # at the next beat (a lapse is recovered if nobody claimed the lease meanwhile)
                    continue

        self._thread = threading.Thread(target=beat, name="sluice-lease", daemon=True)
        self._thread.start()

    def check(self) -> None:
        """Raise FencedError unless this driver still holds the lease (call before writing)."""
        with self._lock:
            if self.fenced is None and self.epoch is not None:
                if self.clock() > self.expires_at - self.margin:
                    self._recover_lapsed()
                else:
                    current = self.read()
                    if current is None or current.epoch != self.epoch or current.owner != self.owner:
                        self.fenced = f"another driver took its lease (epoch {current.epoch if current else '?'})"
            if self.epoch is None:
                self.fenced = self.fenced or "it never held the lease"
            if self.fenced:
                raise FencedError(f"this driver must not write to {self.checkpoint}: {self.fenced}")

    def release(self) -> None:
        """Stop renewing and mark the lease free (if still this driver's)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.ttl)
        with self._lock:
            try:
                current = self.read()
                if self.epoch is not None and current is not None and current.epoch == self.epoch and current.owner == self.owner:
                    self._write(released=True)
            except (OSError, CheckpointError):
                # a full or read-only disk: the job's own error says so; the record cannot be
                # marked free, but a restart on this host sees its processes gone and takes it
                # (elsewhere it is free once it expires)
                pass
            finally:
                self.epoch = None
