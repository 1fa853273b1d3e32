"""Daemons of a test cluster (munged, slurmctld, slurmd, sshd) run in the foreground as children of the kit, each
in the network namespace of its host and, where the daemon finds itself by hostname (slurmd, slurmctld), in a UTS
namespace of its own that carries that hostname. Stopped by pid: SIGTERM, then SIGKILL after a grace period.

Kept in the foreground (``-D``, ``-F``) rather than letting them fork away, so every pid is the kit's own child and
nothing outlives a kit that stops, even one whose test failed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from daskrl.runtime.cleanup import semaphores


class Daemons:
    """The daemons one kit started; their output goes to ``<log_dir>/<name>.log``."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, argv: list[str], netns: str | None = None, hostname: str | None = None,
              env: dict[str, str] | None = None) -> subprocess.Popen:
        """Run ``argv`` (a daemon in the foreground) inside namespace ``netns`` (None: this one), under
        ``hostname`` in a UTS namespace of its own when given."""
        command = list(argv)
        if hostname:  # the shell sets the name, then becomes the daemon (same pid)
            command = ["unshare", "--uts", "sh", "-c", f'hostname {hostname} && exec "$@"', "sh", *command]
        if netns:
            command = ["ip", "netns", "exec", netns, *command]
        log = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 (the child keeps it; closed in stop)
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **(env or {})}, start_new_session=True)
        proc.log_file = log  # type: ignore[attr-defined]
        self.procs[name] = proc
        return proc

    def alive(self, name: str) -> bool:
        return name in self.procs and self.procs[name].poll() is None

    def log(self, name: str) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM to every daemon (and its process group), SIGKILL to those still there after ``grace_s``; then the
        multiprocessing semaphores that the jobs and logins killed whole leave behind go too (``dask worker``'s
        nanny makes them, and a tree killed whole takes its resource tracker along)."""
        for proc in self.procs.values():
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait(timeout=10)
            proc.log_file.close()  # type: ignore[attr-defined]
        self.procs.clear()
        semaphores.remove_orphans(semaphores.of_this_user())


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def wait_until(ready, timeout: float, what: str, interval: float = 0.2) -> None:
    """Poll ``ready()`` until it is true; after ``timeout`` seconds raise naming ``what``."""
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {timeout:g} s")
        time.sleep(interval)
