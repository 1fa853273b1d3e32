"""Where a run's start-up goes: seconds from its process's launch to the end of each phase, and to the first training
step, so that the console, the summary and ``benchmarks/bench_train.py`` show what start-up costs and where.

Phases, in order: ``imports`` (the interpreter, daskrl's imports, the command line, until ``launch``; 0 for a run
started from Python, which counts from ``launch``), ``checks``
(the configuration and a probe of the env), ``cluster`` (the cluster started or connected to, while this process
imports torch and readies each policy's books: the two overlap), ``placement`` (the run's claim and where each
component goes) and ``components`` (every component created, configured and started). ``first_step_s`` is when the
learner that trained first says its first step ended (its wall clock; where it does not say, when the runner first
saw a policy version newer than the one the run started with: within a poll, at most a quarter of a second).
"""

from __future__ import annotations

import os
import time

from daskrl.runtime.cleanup import procfs

PHASES = ("imports", "checks", "cluster", "placement", "components")
_IMPORTED_AT = time.time()  # the fallback where /proc cannot say when this process started
#: set by the command line for its run (:func:`count_from_process_start`), taken by that run's clock; any other run
#: (from Python, a notebook, a test process that ran the command line before) counts from ``launch``
_counted_from: list[float] = []


def count_from_process_start() -> None:
    """The next run of this process counts its start-up from the process's launch (``daskrl train``: the interpreter
    and the imports are part of it); only that one."""
    _counted_from[:] = [process_started_at()]


def process_started_at() -> float:
    """The wall-clock time this process started (Linux: from /proc; elsewhere when this module was imported).

    /proc gives the start in clock ticks since boot; the boot's wall-clock time is now less the boot clock's
    reading. (/proc/stat's ``btime`` is that instant truncated to whole seconds: counting from it put every launch
    up to a second early, the same error for every run of a boot, 0.22 s on one machine. psutil's ``create_time()``
    counts from ``btime`` too, 0.08 s early on another, so the ticks come from ``procfs.start_time``.)"""
    ticks = procfs.start_time(os.getpid())
    if ticks is None or not hasattr(time, "CLOCK_BOOTTIME"):
        return _IMPORTED_AT
    booted = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
    return booted + ticks / os.sysconf("SC_CLK_TCK")


class StartupClock:
    """The end of each start-up phase, and the first training step (see the module docstring)."""

    def __init__(self) -> None:
        self.started = _counted_from.pop() if _counted_from else time.time()
        self.ends: dict[str, float] = {}
        self.start_version: int | None = None
        self.first_step_s: float | None = None

    def mark(self, phase: str) -> None:
        """``phase`` (one of :data:`PHASES`) ends now."""
        if phase not in PHASES:
            raise ValueError(f"unknown start-up phase {phase!r}")
        self.ends[phase] = time.time()

    def saw_version(self, version: int, trained_at: float | None = None) -> None:
        """The runner's newest policy version: the first one newer than the run started with is its first step,
        which ended at ``trained_at`` where the learner said (now otherwise)."""
        if self.start_version is None:
            self.start_version = version
        elif self.first_step_s is None and version > self.start_version:
            at = trained_at if trained_at is not None and self.started <= trained_at <= time.time() else time.time()
            self.first_step_s = round(at - self.started, 2)

    def phases(self) -> dict[str, float]:
        """Seconds of each phase that ended, in order."""
        out, previous = {}, self.started
        for phase in PHASES:
            if phase in self.ends:
                out[phase] = round(self.ends[phase] - previous, 2)
                previous = self.ends[phase]
        return out

    def ready_s(self) -> float | None:
        """Seconds from launch until every component started."""
        return round(self.ends["components"] - self.started, 2) if "components" in self.ends else None

    def line(self) -> str:
        """``started in 2.41 s (imports 0.93, checks 0.05, ...)`` for the console."""
        parts = ", ".join(f"{phase} {seconds:.2f}" for phase, seconds in self.phases().items())
        return f"started in {self.ready_s():.2f} s ({parts})"

    def summary(self) -> dict:
        return {"phases_s": self.phases(), "ready_s": self.ready_s(), "first_step_s": self.first_step_s}
