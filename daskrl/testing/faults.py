"""Real gymnasium envs that misbehave on a schedule, for the fault-tolerance tests and drills.

Each is a CartPole underneath (so a policy can learn and episodes end) and is built from a spec string that
travels to the workers as plain config, e.g. ``--env daskrl.testing.faults:flaky --env-kwargs '{"every": 300}'``:

- ``flaky``: one env instance per process raises in ``step`` on every ``every``-th of its steps; the instance
  built to replace it (the rollout worker rebuilds a failing env) takes over the schedule;
- ``always_failing``: every ``step`` raises (``reset`` works), so the rollout worker gives up after
  ``--env-failure-limit`` failures in a row;
- ``nan_reward``: rewards turn NaN, persistently once the file ``flag`` exists (so a test decides when, e.g.
  after a checkpoint), or once at each of the process-wide step counts in ``at_steps`` (a transient NaN);
- ``hanging``: the first env of the process to take its ``after``-th step sleeps ``seconds`` in it, once (a
  stuck loop, as a deadlocked simulator would look);
- ``broken_on_workers``: builds in the driver (so the run starts) and raises in a Dask worker, as an env that needs
  a file, a licence or a display only the user's machine has.
- ``kills_its_worker_once``: builds in the driver; the first one built in a Dask worker SIGKILLs that worker's
  process (the file ``marker`` records that it did), as a worker lost while the fleet starts (its nanny restarts it).

Counters are per process (a rollout worker's envs share one), never per run: a recreated worker starts anew.
"""

from __future__ import annotations

import itertools
import math
import os
import threading
import time
from typing import Any

import gymnasium as gym
from gymnasium.envs.classic_control import CartPoleEnv

_lock = threading.Lock()
_process_steps = itertools.count(1)  # steps taken by every env of this module in this process
_flaky_owner: list[int | None] = [None]  # id() of the env instance that carries the flaky schedule
_hung = [False]


class FaultInjected(RuntimeError):
    """What the misbehaving envs raise (a distinct type, so a test can tell it from a real bug)."""


class _Base(CartPoleEnv):
    """CartPole with a 500-step time limit of its own (no wrapper: ``close`` must reach this class)."""

    max_steps = 500

    def __init__(self, render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        self._episode_steps = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        self._episode_steps = 0
        return super().reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = super().step(action)
        self._episode_steps += 1
        return obs, float(reward), terminated, truncated or self._episode_steps >= self.max_steps, info


class FlakyEnv(_Base):
    def __init__(self, every: int = 300, render_mode: str | None = None) -> None:
        super().__init__(render_mode)
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        self.every = int(every)
        self.steps = 0
        with _lock:
            if _flaky_owner[0] is None:
                _flaky_owner[0] = id(self)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.steps += 1
        if self.steps % self.every == 0 and _flaky_owner[0] == id(self):
            raise FaultInjected(f"injected failure at step {self.steps} of this env")
        return super().step(action)

    def close(self) -> None:
        with _lock:
            if _flaky_owner[0] == id(self):
                _flaky_owner[0] = None  # the env rebuilt in its place carries the schedule on
        super().close()


class AlwaysFailingEnv(_Base):
    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        raise FaultInjected("this env always fails in step")


class NanRewardEnv(_Base):
    def __init__(self, flag: str = "", at_steps: list | None = None, render_mode: str | None = None) -> None:
        super().__init__(render_mode)
        self.flag = flag
        self.at_steps = {int(s) for s in (at_steps or [])}
        self._flag_seen = False
        self._next_check = 0.0

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = super().step(action)
        step = next(_process_steps)
        if step in self.at_steps or self._flagged():
            reward = math.nan
        return obs, reward, terminated, truncated, info

    def _flagged(self) -> bool:
        if self._flag_seen or not self.flag:
            return self._flag_seen
        now = time.monotonic()
        if now >= self._next_check:  # a stat per 20 ms, not per step
            self._next_check = now + 0.02
            self._flag_seen = os.path.exists(self.flag)
        return self._flag_seen


class HangingEnv(_Base):
    def __init__(self, after: int = 1000, seconds: float = 15.0, render_mode: str | None = None) -> None:
        super().__init__(render_mode)
        self.after, self.seconds = int(after), float(seconds)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        if next(_process_steps) >= self.after and not _hung[0]:
            _hung[0] = True
            _sleep_in_env_step(self.seconds)
        return super().step(action)


def _sleep_in_env_step(seconds: float) -> None:
    """A named frame, so the stack the runner prints for a silent component shows where it hangs."""
    time.sleep(seconds)


def flaky(every: int = 300, render_mode: str | None = None) -> gym.Env:
    return FlakyEnv(every, render_mode)


def always_failing(render_mode: str | None = None) -> gym.Env:
    return AlwaysFailingEnv(render_mode)


def nan_reward(flag: str = "", at_steps: list | None = None, render_mode: str | None = None) -> gym.Env:
    return NanRewardEnv(flag, at_steps, render_mode)


def hanging(after: int = 1000, seconds: float = 15.0, render_mode: str | None = None) -> gym.Env:
    return HangingEnv(after, seconds, render_mode)


class MissingResourceError(RuntimeError):
    """What ``broken_on_workers`` raises in a worker."""


def broken_on_workers(render_mode: str | None = None) -> gym.Env:
    from distributed import get_worker

    try:
        worker = get_worker()
    except ValueError:  # not in a Dask worker: the driver probing the env's spaces
        return _Base(render_mode)
    raise MissingResourceError(f"the simulator's data files are not installed on the worker at {worker.address}")


def kills_its_worker_once(marker: str, render_mode: str | None = None) -> gym.Env:
    import signal

    from distributed import get_worker

    try:
        get_worker()
    except ValueError:  # the driver probing the env's spaces
        return _Base(render_mode)
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)  # one process wins, once
    except FileExistsError:
        return _Base(render_mode)
    os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable: the process was killed")

