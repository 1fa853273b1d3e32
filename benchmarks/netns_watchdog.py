"""Removes a benchmark's network-namespace hosts when the benchmark process dies without doing it itself.

Run by path:  python benchmarks/netns_watchdog.py PARENT_PID PREFIX HOSTS

``bench_scale.py --simulate`` starts it beside its namespace cluster (scale_simulation.py) and ends it after its
own cleanup. If the benchmark is gone first (SIGKILL, or a signal at a moment its handlers could not run), this ends
every process left in the namespaces ``PREFIX_h1..HOSTS`` (SIGTERM, SIGKILL after 15 s), deletes the namespaces and
the driver's veth end ``PREFIX_r0``, and removes the shared-memory segments of daskrl processes that died. It runs in
a session of its own and ignores Ctrl-C; SIGTERM ends it (the benchmark's own cleanup did the work).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil


def alive(pid: int) -> bool:
    """``pid`` runs (a zombie, dead but not yet reaped by its parent, does not)."""
    try:
        return psutil.Process(pid).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.Error:
        return False


def pids_in(namespaces: list[str]) -> list[int]:
    out = []
    for ns in namespaces:
        listed = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=20)
        out += [int(p) for p in listed.stdout.split() if p.isdigit()]
    return out


def clean(prefix: str, hosts: int) -> None:
    """End the processes in the namespaces, then delete the namespaces, the veth end and dead owners' segments."""
    namespaces = [f"{prefix}_h{i}" for i in range(1, hosts + 1)]
    for sig, wait in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        for pid in pids_in(namespaces):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while pids_in(namespaces) and time.monotonic() < deadline:
            time.sleep(0.5)
    for ns in namespaces:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)
    subprocess.run(["ip", "link", "del", f"{prefix}_r0"], capture_output=True, timeout=20)
    try:
        from daskrl.runtime.cleanup.segments import sweep

        sweep(dead_only=True)
    except ImportError:
        pass


def main() -> None:
    parent, prefix, hosts = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # the benchmark ends it after cleaning up itself
    while alive(parent):
        time.sleep(1.0)
    clean(prefix, hosts)


if __name__ == "__main__":
    main()
