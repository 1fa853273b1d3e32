"""A real gymnasium env that, like a VizDoom game, runs a process of its own and shares memory with it through
``/dev/shm``: for the tests of :mod:`daskrl.envs.owned_processes` (spec
``daskrl.testing.environments.process_envs:with_process``).

Each env starts one child Python process that creates ``/dev/shm/envproc-<tag>-<random>``, maps it and sleeps until
it is killed, ignoring SIGTERM as a VizDoom engine does once its controller is gone; the child inherits the
builder's stdout and stderr, as the engines do. The episode is CartPole's. ``close`` kills the child and removes
the entry, as VizDoom's does, unless ``leaky_close`` (an env package whose close forgets them). With
``fail_on_reset`` every ``reset`` raises (a game whose engine starts but whose scenario does not load);
``build_seconds`` keeps the build going that long after the child is up (a slow game start, to kill a builder in).
``tag`` lets a test find its own children (their command lines hold the entry's name) and entries.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from typing import Any

import gymnasium as gym
from gymnasium.envs.classic_control import CartPoleEnv

ENTRY_PREFIX = "envproc-"
_CHILD = """
import mmap, os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGINT, signal.SIG_IGN)
fd = os.open("/dev/shm/" + sys.argv[1], os.O_CREAT | os.O_RDWR, 0o600)
os.ftruncate(fd, 4096)
view = mmap.mmap(fd, 4096)
view[0] = 1  # mapped: the env may go on
while True:
    time.sleep(3600)
"""


def entry_prefix(tag: str) -> str:
    return f"{ENTRY_PREFIX}{tag}-"


class ProcessOwningEnv(CartPoleEnv):
    def __init__(self, tag: str = "test", leaky_close: bool = False, fail_on_reset: bool = False,
                 build_seconds: float = 0.0, render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        self.fail_on_reset = fail_on_reset
        self.entry = entry_prefix(tag) + uuid.uuid4().hex[:8]
        self.leaky_close = leaky_close
        self.child: subprocess.Popen | None = subprocess.Popen([sys.executable, "-c", _CHILD, self.entry])
        deadline = time.monotonic() + 30
        while not self._child_ready():
            if self.child.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"the child process of {self.entry} did not create its shared memory")
            time.sleep(0.005)
        time.sleep(build_seconds)

    def _child_ready(self) -> bool:
        try:
            with open("/dev/shm/" + self.entry, "rb") as f:
                return f.read(1) == b"\x01"
        except FileNotFoundError:
            return False

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        if self.fail_on_reset:
            raise RuntimeError(f"{self.entry}: the scenario did not load (fail_on_reset)")
        return super().reset(seed=seed, options=options)

    def close(self) -> None:
        if self.child is not None and not self.leaky_close:
            self.child.send_signal(signal.SIGKILL)
            self.child.wait()
            try:
                os.unlink("/dev/shm/" + self.entry)
            except FileNotFoundError:
                pass
        self.child = None
        super().close()


def with_process(tag: str = "test", leaky_close: bool = False, fail_on_reset: bool = False, build_seconds: float = 0.0,
                 render_mode: str | None = None) -> gym.Env:
    env: Any = ProcessOwningEnv(tag, leaky_close, fail_on_reset, build_seconds, render_mode)
    return gym.wrappers.TimeLimit(env, max_episode_steps=500)
