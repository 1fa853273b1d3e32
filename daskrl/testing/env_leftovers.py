"""A drill for envs that own processes: run ``daskrl train`` on such an env, end it in one of five ways, and count
what of its envs is left afterwards (engine processes, ``/dev/shm`` entries).

The ends are the ones ``docs/faults.md`` names: a rollout worker's process SIGKILLed during a run that then
finishes (``worker-kill``), a SIGKILL of the driver alone (``driver-kill``: its workers exit with it), a SIGKILL of
the run's whole process group (``group-kill``: a closed terminal, an out-of-memory kill, a job scheduler), Ctrl-C
(``ctrl-c``: SIGINT to the process group) and a normal end (``normal-end``). ``tests/drills/test_env_processes.py`` runs
them on :mod:`daskrl.testing.environments.process_envs`, ``benchmarks/env_leftovers.py`` on ``doom/basic``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from daskrl.runtime.cleanup.procfs import SHM_DIR, start_time

CASES = ("worker-kill", "driver-kill", "group-kill", "ctrl-c", "normal-end")
CHECK_SECONDS = 15.0  # nothing may be left this long after the run ends


@dataclass(frozen=True)
class EnvTraces:
    """How to recognize an env's processes (a piece of their command line) and its ``/dev/shm`` entries (a name
    prefix); only those that did not exist when the drill began count."""

    process_marker: str
    entry_prefix: str
    known_processes: frozenset[int] = frozenset()
    known_entries: frozenset[str] = frozenset()

    def baseline(self) -> EnvTraces:
        return EnvTraces(self.process_marker, self.entry_prefix, frozenset(self.processes()),
                         frozenset(self.entries()))

    def processes(self) -> dict[int, int]:
        """Live (not zombie) matching processes: pid -> parent pid."""
        found = {}
        for proc in psutil.process_iter(["cmdline", "ppid", "status"]):  # a process gone meanwhile: its fields None
            info = proc.info
            if proc.pid in self.known_processes or info["status"] in (None, psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                continue
            if info["ppid"] is not None and self.process_marker in " ".join(info["cmdline"] or ()):
                found[proc.pid] = info["ppid"]
        return found

    def entries(self) -> list[str]:
        return sorted(n for n in os.listdir(SHM_DIR) if n.startswith(self.entry_prefix) and n not in self.known_entries)


@dataclass
class CaseResult:
    case: str
    returncode: int | None
    peak_processes: int = 0  # the most env processes seen while the run trained
    peak_entries: int = 0
    killed_worker_cleared_s: float | None = None  # worker-kill: until that worker's env processes were all gone
    left_processes: list[int] = field(default_factory=list)  # when clean, or CHECK_SECONDS after the run ended
    left_entries: list[str] = field(default_factory=list)
    clean_after_s: float | None = None  # from the run's end until nothing was left
    log_tail: str = ""

    @property
    def clean(self) -> bool:
        return not self.left_processes and not self.left_entries

    def as_dict(self) -> dict:
        out = asdict(self)
        out.pop("log_tail")
        return out


def _launch(train_args: Sequence[str], log: Path) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen([sys.executable, "-m", "daskrl", "train", *train_args], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


def _wait(condition, timeout: float, proc: subprocess.Popen) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.1)
    return False


def _training(log: Path) -> bool:
    """Whether the run printed a progress line (it trains: every component started, Ctrl-C is the runner's)."""
    return any("env steps" in line and "| fps" in line for line in log.read_text().splitlines())


def run_case(case: str, train_args: Sequence[str], traces: EnvTraces, expected_envs: int, log: Path,
             start_timeout: float = 180.0) -> CaseResult:
    """Run one case; ``train_args`` must let the run end by itself within a few minutes (``--train-for-seconds``)
    for ``worker-kill`` and ``normal-end``; ``expected_envs`` is how many env processes the run has when it trains."""
    if case not in CASES:
        raise ValueError(f"unknown case {case!r}; one of {', '.join(CASES)}")
    traces = traces.baseline()
    proc = _launch(train_args, log)
    result = CaseResult(case, None)
    try:
        if not _wait(lambda: len(traces.processes()) >= expected_envs and _training(log), start_timeout, proc):
            result.returncode = proc.poll()
            result.log_tail = log.read_text()[-3000:]
            raise RuntimeError(f"{case}: the run never trained with {expected_envs} env processes: {result.log_tail}")
        result.peak_processes, result.peak_entries = len(traces.processes()), len(traces.entries())
        if case == "worker-kill":
            _kill_one_worker(traces, result)
        elif case == "driver-kill":
            proc.send_signal(signal.SIGKILL)
        elif case == "group-kill":
            os.killpg(proc.pid, signal.SIGKILL)
        elif case == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)
        result.returncode = proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    ended = time.monotonic()
    while time.monotonic() - ended < CHECK_SECONDS:  # once clean, clean for good: the run's processes are gone
        if not traces.processes() and not traces.entries():
            result.clean_after_s = round(time.monotonic() - ended, 2)
            break
        time.sleep(0.2)
    result.left_processes, result.left_entries = sorted(traces.processes()), traces.entries()
    result.log_tail = log.read_text()[-3000:]
    return result


def _kill_one_worker(traces: EnvTraces, result: CaseResult) -> None:
    """SIGKILL the process that owns the first env process found (a rollout worker), and time until its env
    processes are gone (the run recovers the worker meanwhile)."""
    owned = traces.processes()
    owner = min(owned.values())
    mine = [pid for pid, parent in owned.items() if parent == owner]
    os.kill(owner, signal.SIGKILL)
    killed = time.monotonic()
    while any(start_time(pid) is not None for pid in mine) and time.monotonic() - killed < 60:
        time.sleep(0.05)
    result.killed_worker_cleared_s = round(time.monotonic() - killed, 2)
