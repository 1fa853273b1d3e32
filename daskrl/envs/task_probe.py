"""Measuring a task's profile (:class:`daskrl.config.task_profile.TaskProfile`) before a run: uniformly random actions
on one env for :data:`PROBE_STEPS` steps, in the driver. Remembered per spec and kwargs, as the env's spaces are.

Only what the env families' rules read is measured, and only for the envs whose family has rules (the driver asks
for it then): a few thousand steps of a MuJoCo or classic-control env take well under a second.
"""

from __future__ import annotations

import json
from typing import Any

from daskrl.config.task_profile import TaskProfile
from daskrl.envs.registry import make_env

#: random steps a profile plays (a task whose random episodes outlast them is profiled from one unfinished episode)
PROBE_STEPS = 3000
_PROFILES: dict[tuple, TaskProfile] = {}


def profile_task(spec: str, env_kwargs: dict[str, Any] | None = None, seed: int = 0) -> TaskProfile:
    """The task's profile (see the module docstring); the same for the same spec, kwargs and seed."""
    key = (spec, json.dumps(env_kwargs or {}, sort_keys=True, default=repr), seed)
    if key not in _PROFILES:
        _PROFILES[key] = _measure(spec, env_kwargs, seed)
    return _PROFILES[key]


def _measure(spec: str, env_kwargs: dict[str, Any] | None, seed: int) -> TaskProfile:
    env = make_env(spec, seed=seed, env_kwargs=env_kwargs)
    try:
        horizon = getattr(getattr(env, "spec", None), "max_episode_steps", None)
        lengths: list[int] = []
        terminated = 0
        length = 0
        for _ in range(PROBE_STEPS):
            _, _, term, trunc, _ = env.step(env.action_space.sample())
            length += 1
            if term or trunc:
                lengths.append(length)
                terminated += int(bool(term))
                length = 0
                env.reset()
        if not lengths:  # no episode ended within the probe: it is at least this long
            lengths, terminated = [length], 0
    finally:
        env.close()
    return TaskProfile(horizon=horizon, random_length=sum(lengths) / len(lengths),
                       terminated_share=terminated / len(lengths))
