"""Hosts on one machine for tests and benchmarks: Linux network namespaces joined by a bridge (needs root).

Namespace ``names[i]`` gets the address ``f"{subnet}.{i + 1}"``; the first holds the bridge, each other one a veth
pair into it, and the calling process keeps a veth end with ``f"{subnet}.254"``, so it reaches every "host".
Comms between them cross a virtual link, not a wire. The tests (tests/helpers.py) and bench_scale.py each name their
own namespaces and subnet (10.77.x: private, only on links made here), so both may exist at once.
"""

from __future__ import annotations

import subprocess

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
