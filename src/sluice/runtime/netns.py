"""Hosts of their own on this machine: Linux network namespaces joined by a bridge.

Each member of a ``NamespacedNetwork`` is a network namespace ``sluice-<id>-<name>`` with
loopback up and one end of a veth pair, addressed ``10.<x>.<y>.<n>/24``; the other end is a
port of a bridge in the root namespace, which holds ``10.<x>.<y>.1``. A process started with
``exec_prefix(name)`` sees only its member's interfaces, so a cluster's master and workers
talk to each other and to a driver in the root namespace over the bridge, as hosts on a
network would, and ``cut(name)`` takes one of them off that network (its bridge port down:
packets to and from it are dropped, its sockets stay open) until ``restore(name)``.

Creating namespaces, veths and bridges needs root (CAP_NET_ADMIN) and iproute2's ``ip``.
Every name carries a random id of this instance, so networks made at the same time do not
clash; ``close()`` removes every namespace, veth and the bridge it made, also after a
failure halfway through making them.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import random
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from typing import Self

from sluice.errors import EnvironmentProblem

MAX_MEMBERS = 250  # addresses .2 to .251 of the /24


@dataclass(frozen=True)
class Member:
    """One namespace of the network: its name, its address and the bridge port it hangs on."""

    name: str
    namespace: str
    address: str
    port: str  # the veth end on the bridge (root namespace)
    inner: str  # the veth end inside the namespace


def check_environment() -> str:
    """The path of ``ip``; EnvironmentProblem when this process cannot make namespaces."""
    ip = shutil.which("ip")
    if ip is None:
        raise EnvironmentProblem(
            "network namespaces need iproute2's 'ip' command, which is not on PATH (Debian/Ubuntu: apt-get install -y iproute2)"
        )
    if os.geteuid() != 0:
        raise EnvironmentProblem("network namespaces, veths and bridges need root (CAP_NET_ADMIN): run as root")
    return ip


class NamespacedNetwork:
    """A bridge in the root namespace and one namespace per member, each with its own address."""

    def __init__(self, subnet: str | None = None):
        """``subnet``: the first three octets (``"10.231.7"``); a free one is picked when
        None. Nothing is made before ``open()``."""
        self.ip = check_environment()
        self.id = secrets.token_hex(3)
        self.subnet = subnet or free_subnet(self.ip)
        self.gateway = f"{self.subnet}.1"
        self.bridge = f"slb{self.id}"
        self.members: dict[str, Member] = {}
        self._added = 0
        self._bridge_made = False

    # ---- life cycle --------------------------------------------------------------------------
    def open(self) -> Self:
        """Make the bridge and give it the gateway address (the root namespace's on this network)."""
        try:
            self._run("link", "add", self.bridge, "type", "bridge")
            self._bridge_made = True
            self._run("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            self._run("link", "set", self.bridge, "up")
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Remove every member's namespace and veth, then the bridge. Best effort per item, so
        one that is already gone does not keep the others; processes still running in a
        namespace keep only its (nameless) network alive until they exit."""
        for member in reversed(list(self.members.values())):
            self._remove(member)
        self.members = {}
        if self._bridge_made:
            self._try("link", "del", self.bridge)
            self._bridge_made = False

    def __enter__(self) -> Self:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- members -----------------------------------------------------------------------------
    def address(self, n: int) -> str:
        """The address the ``n``-th member added (from 0) gets."""
        if not 0 <= n < MAX_MEMBERS:
            raise ValueError(f"a network has at most {MAX_MEMBERS} members, not {n + 1}")
        return f"{self.subnet}.{2 + n}"

    def add(self, name: str) -> Member:
        """A new namespace ``sluice-<id>-<name>`` on the bridge, loopback up, with the next address."""
        if name in self.members:
            raise ValueError(f"the network already has a member {name!r}")
        n = self._added
        member = Member(
            name=name,
            namespace=f"sluice-{self.id}-{name}",
            address=self.address(n),
            port=f"sl{self.id}h{n}",
            inner=f"sl{self.id}p{n}",
        )
        self._added += 1
        self.members[name] = member  # registered first: close() removes a half-made member too
        self._run("netns", "add", member.namespace)
        self._run("link", "add", member.port, "type", "veth", "peer", "name", member.inner)
        self._run("link", "set", member.inner, "netns", member.namespace)
        self._run("link", "set", member.port, "master", self.bridge)
        self._run("link", "set", member.port, "up")
        inside = ("-n", member.namespace)
        self._run(*inside, "addr", "add", f"{member.address}/24", "dev", member.inner)
        self._run(*inside, "link", "set", member.inner, "up")
        self._run(*inside, "link", "set", "lo", "up")
        return member

    def remove(self, name: str) -> None:
        """Take a member off the network and delete its namespace."""
        self._remove(self.members.pop(name))

    def exec_prefix(self, name: str) -> list[str]:
        """The command prefix that runs a program inside member ``name``'s namespace
        (``ip netns exec`` execs it: the process keeps the pid it was started with)."""
        return [self.ip, "netns", "exec", self.members[name].namespace]

    def cut(self, name: str) -> None:
        """Take member ``name`` off the network: its bridge port goes down, so nothing reaches
        it or leaves it, yet inside it nothing changes (its connections stay open, as when a
        cable or a switch fails)."""
        self._run("link", "set", self.members[name].port, "down")

    def restore(self, name: str) -> None:
        """Put member ``name`` back on the network (its bridge port up again)."""
        self._run("link", "set", self.members[name].port, "up")

    # ---- helpers -----------------------------------------------------------------------------
    def _remove(self, member: Member) -> None:
        # deleting either end deletes the pair; the namespace goes with its name
        self._try("link", "del", member.port)
        self._try("netns", "del", member.namespace)

    def _run(self, *args: str) -> None:
        done = subprocess.run([self.ip, *args], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise EnvironmentProblem(f"'ip {' '.join(args)}' failed: {done.stderr.strip() or done.returncode}")

    def _try(self, *args: str) -> None:
        with contextlib.suppress(OSError):
            subprocess.run([self.ip, *args], capture_output=True, check=False)


def free_subnet(ip: str = "ip", tries: int = 64) -> str:
    """A ``10.<x>.<y>`` /24 that no address or route of this machine overlaps, picked at
    random so networks made at the same time rarely try the same one."""
    used = _used_networks(ip)
    for _ in range(tries):
        subnet = f"10.{random.randint(200, 254)}.{random.randint(0, 255)}"
        candidate = ipaddress.ip_network(f"{subnet}.0/24")
        if not any(candidate.overlaps(net) for net in used):
            return subnet
    raise EnvironmentProblem("found no free 10.x.y.0/24 for a namespaced network")


def _used_networks(ip: str) -> list[ipaddress.IPv4Network]:
    """The IPv4 networks of this machine's addresses and routes (a default route is not one)."""
    out = []
    for args in (("-4", "-o", "addr", "show"), ("-4", "route", "show", "table", "all")):
        text = subprocess.run([ip, *args], capture_output=True, text=True, check=False).stdout
        for word in text.split():
            if word[:1].isdigit() and ("/" in word or word.count(".") == 3):
                with contextlib.suppress(ValueError):
                    out.append(ipaddress.ip_network(word, strict=False))
    return [net for net in out if isinstance(net, ipaddress.IPv4Network) and net.prefixlen > 0]
