"""The checkpoint's lease (runtime.lease): one holder at a time, a standby takes it when the
holder releases it, dies or stops renewing, and a replaced holder is fenced. Pure: no Spark;
a fake clock and fake process table."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sluice.runtime.checkpoint import Checkpoint
from sluice.runtime.lease import FencedError, Lease, LeaseHeldError, LeaseRecord, is_free, pid_alive


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def lease(path, clock, pids=(1,), alive=frozenset({1, 2}), host="h1", ttl=10.0) -> Lease:
    return Lease(Checkpoint(str(path)), ttl=ttl, pids=pids, host=host, clock=clock, alive=lambda p: p in alive)


def test_one_holder_and_a_standby_that_takes_over_after_expiry_and_fences_the_old(tmp_path):
    clock = Clock()
    active = lease(tmp_path, clock, pids=(1,), host="h1")
    standby = lease(tmp_path, clock, pids=(2,), host="h2")  # another host: only the expiry tells
    assert active.acquire() == 1
    with pytest.raises(LeaseHeldError, match="in use by processes \\[1\\] on h1"):
        standby.acquire(wait=False)
    clock.now += 7.0
    assert active.renew()  # renewed in time: expires 10 s from now
    clock.now += 12.0  # expired, but within the standby's grace
    assert not standby.try_acquire()
    clock.now += 4.0  # past expiry + grace (ttl / 2)
    assert standby.try_acquire() and standby.epoch == 2
    with pytest.raises(FencedError, match="lapsed"):  # the old holder's own clock says so first
        active.check()
    assert not active.renew()
    standby.check()  # the new holder may write


def test_a_replaced_holder_is_fenced_even_when_its_clock_says_it_is_in_time(tmp_path):
    clock = Clock()
    active = lease(tmp_path, clock)
    active.acquire()
    standby = lease(tmp_path, clock, pids=(2,), host="h2")
    standby.checkpoint.write_bytes("lease.json", LeaseRecord(1, active.owner, "h1", (1,), 0.0).to_json())  # stale
    assert standby.try_acquire()
    with pytest.raises(FencedError, match="another driver took its lease"):
        active.check()


def test_a_dead_holder_on_this_host_is_replaced_at_once(tmp_path):
    clock = Clock()
    alive = {1, 2, 3}
    active = Lease(Checkpoint(str(tmp_path)), pids=(1,), host="h1", clock=clock, alive=lambda p: p in alive)
    active.acquire()
    active.add_pids([3])  # its JVM
    standby = Lease(Checkpoint(str(tmp_path)), pids=(2,), host="h1", clock=clock, alive=lambda p: p in alive)
    alive.discard(1)
    assert not standby.try_acquire()  # the driver died, its JVM still runs (tasks may write)
    alive.discard(3)
    assert standby.try_acquire()  # long before the expiry
    assert standby.read().epoch == 2 and standby.read().pids == (2,)


def test_released_lease_is_free_and_one_epoch_has_one_claimant(tmp_path):
    clock = Clock()
    first = lease(tmp_path, clock)
    first.acquire()
    first.release()
    assert first.read().released
    a, b = lease(tmp_path, clock, pids=(2,)), lease(tmp_path, clock, pids=(2,))
    assert a.try_acquire()
    # b read the lease before a wrote epoch 2: it claims epoch 2 too, and loses
    assert not b._claim(2)
    assert a.read().owner == a.owner


def test_is_free_and_pid_alive():
    record = LeaseRecord(3, "o", "h1", (11, 12), expires_at=100.0)
    assert is_free(None, 0, "h1", 1.0)
    assert not is_free(record, 100.5, "h2", 1.0, alive=lambda p: False)  # another host: wait for expiry
    assert is_free(record, 101.5, "h2", 1.0, alive=lambda p: True)
    assert is_free(record, 50, "h1", 1.0, alive=lambda p: False)
    assert not is_free(record, 50, "h1", 1.0, alive=lambda p: p == 12)
    assert pid_alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not pid_alive(child.pid)
    with pytest.raises(ValueError, match="ttl"):
        Lease(Checkpoint("/tmp/x"), ttl=0)


def test_a_lapse_with_nobody_taking_over_keeps_the_lease(tmp_path):
    clock = Clock()
    active = lease(tmp_path, clock)
    active.acquire()
    clock.now += 30.0  # the heartbeat stalled (a loaded machine), and no standby is waiting
    active.check()  # still its lease: renewed, not fenced
    assert active.renew()
    standby = lease(tmp_path, clock, pids=(2,), host="h2")
    assert not standby.try_acquire()  # renewed: not expired
