"""Helpers shared by the benchmarks: steady-state frame rates and the memory of a process tree."""

from __future__ import annotations

import compileall
import os
import signal
import sys
import time

import psutil

from daskrl import Observer


class RateProbe(Observer):
    """An observer of a run's reports that gives the rate after a warm-up that starts with the first report showing
    progress (so a slow start-up, such as building many Atari envs, is not counted as sampling time). With
    ``measure_s`` it ends the run once it has measured that long: the run's own time limit then only bounds a start-up
    that never ends, instead of every run waiting out the slowest start-up it allows."""

    def __init__(self, warmup_s: float, measure_s: float | None = None) -> None:
        self.warmup_s, self.measure_s = warmup_s, measure_s
        self.points: list[tuple[float, int]] = []
        self.t0 = time.monotonic()
        self.measured = False  # the stop was asked for: rows after it (the stopping run's last) are not counted

    def on_report(self, run, row: dict) -> None:
        if self.measured:
            return
        now = time.monotonic() - self.t0
        self.points.append((now, int(row["env_steps"])))
        started = self.started()
        if self.measure_s is not None and started is not None and now >= started + self.warmup_s + self.measure_s:
            self.measured = True
            run.request_stop(f"measured {self.measure_s:g} s after the warm-up")

    def started(self) -> float | None:
        """When the first report showing progress came (None: none yet)."""
        return next((t for t, s in self.points if s > 0), None)

    def rate(self) -> float:
        started = self.started()
        if started is None:
            return 0.0
        steady = [(t, s) for t, s in self.points if t >= started + self.warmup_s]
        if len(steady) < 2:
            steady = self.points[-2:]
        (t0, s0), (t1, s1) = steady[0], steady[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 else 0.0


def stop_if_signalled(summary: dict) -> None:
    """End the benchmark when the run it just made ended on Ctrl-C or SIGTERM. ``train()`` turns those into a clean
    stop and returns, so a benchmark of several runs would start the next one: a ``timeout`` or a closed terminal
    would not end it."""
    reason = str(summary.get("stop_reason", ""))
    for sig in (signal.SIGTERM, signal.SIGINT):
        if reason == f"{sig.name} received":
            print(f"benchmark stopped: {reason}", file=sys.stderr)
            raise SystemExit(128 + sig.value)


def tree_pss_mb(root_pid: int) -> float:
    """Summed PSS (proportional set size: shared pages split between their users) of a process and all
    its descendants, in MB."""
    try:
        root = psutil.Process(root_pid)
        procs = [root] + root.children(recursive=True)
    except psutil.NoSuchProcess:
        return 0.0
    total = 0
    for p in procs:
        try:
            total += p.memory_full_info().pss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total / 2**20


def compile_like_an_install(checkout: str) -> None:
    """Write the bytecode of ``checkout``'s daskrl package, as pip does when it installs a wheel, so a benchmark
    that times a launch measures what an installed daskrl costs. A source checkout run where PYTHONDONTWRITEBYTECODE
    is set (this project's machines set it) never caches its bytecode: every launch would compile daskrl's modules
    again, in the driver and in the worker server (about 0.09 s on the server's path to the first training step)."""
    compileall.compile_dir(os.path.join(checkout, "daskrl"), quiet=1)


def training_fps_bound(env_fps: float, learner_samples_per_s: float, cores: int) -> float:
    """The most frames/s a run could train at on ``cores`` cores if stepping and learning were all it did: each
    trained frame costs ``cores / env_fps`` core-seconds of stepping (``env_fps`` is every core's stepping) and
    ``1 / learner_samples_per_s`` of learning (one core's); acting, messages and the driver only add to that."""
    return cores / (cores / env_fps + 1.0 / learner_samples_per_s)
