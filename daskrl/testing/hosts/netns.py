"""Hosts on one machine for tests and benchmarks: Linux network namespaces joined by a bridge (needs root).

Namespace ``names[i]`` gets the address ``f"{subnet}.{i + 1}"``; the first holds the bridge, each other one a veth
pair into it, and the calling process keeps a veth end with ``f"{subnet}.254"``, so it reaches every "host".
Comms between them cross a virtual link, not a wire. The tests (tests/helpers.py) and bench_scale.py each name their
own namespaces and subnet (10.77.x: private, only on links made here), so both may exist at once.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass, field

import psutil

#: the last octet of the calling process's address on the bridge
DRIVER_OCTET = 254


def ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """``ip ARGS`` (inside namespace ``ns`` when given); a failure raises with ip's own message unless not ``check``."""
    cmd = (["ip", "netns", "exec", ns] if ns else []) + ["ip", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    if check and out.returncode:
        raise RuntimeError(f"{' '.join(cmd)}: {out.stderr.strip()}")
    return out


def bridge_hosts(prefix: str, names: list[str], subnet: str) -> None:
    """Create namespaces ``names`` on one bridge (see the module docstring). Links are named ``<prefix>_...``: keep
    ``prefix`` within 11 characters (an interface name holds 15)."""
    for ns in names:
        ip("netns", "add", ns)
        ip("link", "set", "lo", "up", ns=ns)
    first = names[0]
    ip("link", "add", f"{prefix}_br", "type", "bridge", ns=first)
    ip("addr", "add", f"{subnet}.1/24", "dev", f"{prefix}_br", ns=first)
    ip("link", "set", f"{prefix}_br", "up", ns=first)
    for i, ns in enumerate(names[1:], start=2):
        ip("link", "add", f"{prefix}_a{i}", "netns", first, "type", "veth", "peer", "name", f"{prefix}_b{i}",
           "netns", ns)
        ip("link", "set", f"{prefix}_a{i}", "master", f"{prefix}_br", "up", ns=first)
        ip("addr", "add", f"{subnet}.{i}/24", "dev", f"{prefix}_b{i}", ns=ns)
        ip("link", "set", f"{prefix}_b{i}", "up", ns=ns)
    ip("link", "add", f"{prefix}_r0", "type", "veth", "peer", "name", f"{prefix}_r1", "netns", first)
    ip("link", "set", f"{prefix}_r1", "master", f"{prefix}_br", "up", ns=first)
    ip("addr", "add", f"{subnet}.{DRIVER_OCTET}/24", "dev", f"{prefix}_r0")
    ip("link", "set", f"{prefix}_r0", "up")


def remove_hosts(prefix: str, names: list[str]) -> None:
    """Delete namespaces ``names`` (their links go with them) and the caller's veth end; what is gone is skipped."""
    for ns in names:
        ip("netns", "del", ns, check=False)
    ip("link", "del", f"{prefix}_r0", check=False)  # goes with its peer's namespace; to be sure


def namespaces() -> list[str]:
    """The network namespaces that exist now (``ip netns list``)."""
    listed = ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in listed.splitlines() if line.strip()]


def pids_in(names: list[str]) -> list[int]:
    """The processes running in namespaces ``names`` (those that exist)."""
    out = []
    for ns in names:
        listed = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=20)
        out += [int(p) for p in listed.stdout.split() if p.isdigit()]
    return out


def netns_unavailable() -> str:
    """Why network namespaces with a bridge cannot be made here ('' when they can)."""
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    name = f"daskrl_probe{os.getpid()}"
    out = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True, timeout=20)
    if out.returncode:
        return f"`ip netns add` is not permitted here: {out.stderr.strip()}"
    try:
        probe = ip("link", "add", "probe_br", "type", "bridge", ns=name, check=False)
        if probe.returncode:
            return f"cannot create a bridge in a network namespace here: {probe.stderr.strip()}"
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=20)
    return ""


@dataclass(frozen=True)
class NamespaceHosts:
    """``count`` hosts of one kind (``"sl"`` for the SLURM kit, ``"ss"`` for SSH: two letters) owned by process
    ``owner``: namespaces ``<kind><owner>_h<i>`` on subnet ``10.<octet>.<owner % 250>``, so kits of two test
    processes never share names or addresses, and the next kit of the same kind removes the hosts of an owner that
    died without removing its own (:meth:`remove_abandoned`)."""

    kind: str
    count: int
    octet: int  # the subnet's second octet: one per kind (TwoHosts of the tests takes 77)
    owner: int = field(default_factory=os.getpid)

    @property
    def prefix(self) -> str:  # an interface name holds 15 characters: <kind><pid>_br fits
        return f"{self.kind}{self.owner}"

    @property
    def subnet(self) -> str:
        return f"10.{self.octet}.{self.owner % 250}"

    @property
    def names(self) -> list[str]:
        return [f"{self.prefix}_h{i}" for i in range(1, self.count + 1)]

    @property
    def addresses(self) -> list[str]:
        return [f"{self.subnet}.{i}" for i in range(1, self.count + 1)]

    @property
    def driver_address(self) -> str:
        """This machine's own address on the hosts' bridge (where a scheduler the hosts reach listens)."""
        return f"{self.subnet}.{DRIVER_OCTET}"

    def up(self) -> None:
        self.remove_abandoned()
        self.down()  # leftovers of an interrupted kit of this very owner
        bridge_hosts(self.prefix, self.names, self.subnet)

    def down(self) -> None:
        """End every process left in the hosts (SIGKILL: the kit stopped its daemons before), then delete them."""
        for pid in pids_in([ns for ns in self.names if ns in namespaces()]):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        remove_hosts(self.prefix, self.names)

    def exists(self) -> bool:
        return bool(set(self.names) & set(namespaces()))

    def remove_abandoned(self) -> None:
        """Remove the hosts of this kind whose owner process is gone."""
        pattern = re.compile(rf"{self.kind}(\d+)_h\d+$")
        owners = {int(m.group(1)) for ns in namespaces() if (m := pattern.match(ns))}
        for owner in owners - {self.owner}:
            if not psutil.pid_exists(owner):
                NamespaceHosts(self.kind, _host_count(self.kind, owner), self.octet, owner).down()


def _host_count(kind: str, owner: int) -> int:
    pattern = re.compile(rf"{kind}{owner}_h(\d+)$")
    return max((int(m.group(1)) for ns in namespaces() if (m := pattern.match(ns))), default=0)
