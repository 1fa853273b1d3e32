"""A curriculum's env: one gymnasium env that plays the task its curriculum has reached, switching between episodes.

A curriculum's tasks are of one of two kinds: env ids of one family (``--curriculum``: MiniGrid-DoorKey-5x5, then
8x8, then 16x16), each task's env built the first time it is played and kept; or values handed to the env's own
``set_task(task)`` (``--curriculum-tasks``, as RLlib's ``TaskSettableEnv``). The run's curriculum (the driver's
:mod:`daskrl.curriculum`) raises every env's level; an env takes the new level at its next reset, so no episode is
cut short and no trajectory mixes two tasks' dynamics within an episode. With ``--curriculum-replay p``, a share p of
the episodes plays an earlier task, drawn uniformly, so that what was learned is kept.

Every episode reports its task and its return in ``info["episode_extra_stats"]`` (:data:`TASK_KEY`,
:data:`RETURN_KEY`): that is how the driver reads each task's success, and how the report's ``info/curriculum_task``
column shows which tasks were played.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from daskrl.config import EnvConfig
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.envs.registry import make_env, probe_env
from daskrl.envs.vector import EnvGroup, build_seeded
from daskrl.errors import EnvError

#: the episode numbers a curriculum env reports at every episode's end
TASK_KEY, RETURN_KEY = "curriculum_task", "curriculum_return"
#: seeds of one env's task envs are this far apart (prime): task k's env never shares task 0's seed
_TASK_SEED_STRIDE = 104_729


def task_value(text: str) -> Any:
    """A ``--curriculum-tasks`` item: its JSON value where it parses (``3``, ``{"size": 8}``), the text otherwise."""
    try:
        return json.loads(text)
    except ValueError:
        return text


@dataclass(frozen=True)
class Curriculum:
    """A run's tasks, in order, and how every env of the run plays them (see the module docstring)."""

    env_kwargs: dict
    ids: tuple[str, ...]  # the env id of each task (the same id for every task of a set_task curriculum)
    tasks: tuple[Any, ...] | None  # set_task's value for each task; None: the tasks are the env ids
    replay: float  # the share of episodes that replay an earlier task

    @classmethod
    def of(cls, env: EnvConfig) -> Curriculum | None:
        """The curriculum ``env``'s options ask for (None: none)."""
        if env.curriculum:  # ids as separate words or comma-separated, as --env-packages takes its modules
            ids = tuple(name.strip() for item in env.curriculum for name in item.split(",") if name.strip())
            return cls(dict(env.env_kwargs), (env.env, *ids), None, env.curriculum_replay)
        if env.curriculum_tasks:
            tasks = tuple(task_value(t) for t in env.curriculum_tasks)
            return cls(dict(env.env_kwargs), (env.env,) * len(tasks), tasks, env.curriculum_replay)
        return None

    def __len__(self) -> int:
        return len(self.ids)

    def label(self, task: int) -> str:
        """How a task is named on the console and in the summary: its env id, or its set_task value."""
        return self.ids[task] if self.tasks is None else json.dumps(self.tasks[task])

    def give_task(self, env: gym.Env, task: int) -> None:
        """Hand task ``task`` to an env of ``ids[task]`` through its ``set_task`` (an env-id curriculum's tasks are
        their envs: nothing to hand)."""
        if self.tasks is not None:
            env.get_wrapper_attr("set_task")(self.tasks[task])


class CurriculumEnv(gym.Env):
    """See the module docstring: plays task ``level`` (or, at the replay share, an earlier one) each episode."""

    def __init__(self, curriculum: Curriculum, seed: int | None, level: int = 0) -> None:
        self.curriculum = curriculum
        self.base_seed = seed
        self.level = min(level, len(curriculum) - 1)
        self.draws = np.random.default_rng(seed)  # which task each episode plays
        self.built: dict[int, gym.Env] = {}  # by task (one env, key 0, for a set_task curriculum)
        self.task_set: Any = None  # the task the set_task env was last given
        self.task = self._draw()
        self.env = self._env_for(self.task)
        self.observation_space, self.action_space = self.env.observation_space, self.env.action_space
        self.episode_return = 0.0

    def set_level(self, level: int) -> None:
        """Play task ``level`` from the next episode on (the driver's curriculum moved on)."""
        self.level = min(int(level), len(self.curriculum) - 1)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        self.task = self._draw()
        self.env = self._env_for(self.task)
        self.episode_return = 0.0
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.episode_return += float(reward)
        if terminated or truncated:
            extras = dict(info.get("episode_extra_stats") or {})
            extras.update({TASK_KEY: self.task, RETURN_KEY: self.episode_return})
            info = {**info, "episode_extra_stats": extras}
        return obs, reward, terminated, truncated, info

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        for env in self.built.values():
            env.close()
        self.built.clear()

    def _draw(self) -> int:
        if self.level > 0 and self.curriculum.replay > 0 and self.draws.random() < self.curriculum.replay:
            return int(self.draws.integers(self.level))
        return self.level

    def _env_for(self, task: int) -> gym.Env:
        """Task ``task``'s env, built on first use (each task's with a seed of its own); a set_task env is given
        the task when it changes."""
        c = self.curriculum
        key = task if c.tasks is None else 0
        if key not in self.built:
            seed = None if self.base_seed is None else (self.base_seed + _TASK_SEED_STRIDE * key) % 2**31
            self.built[key] = make_env(c.ids[task], seed=seed, env_kwargs=c.env_kwargs)
        env = self.built[key]
        if self.task_set != task:
            c.give_task(env, task)
            self.task_set = task
        return env


class CurriculumGroup(EnvGroup):
    """A rollout worker split's curriculum envs: an :class:`EnvGroup` whose envs the driver moves to a new level."""

    def __init__(self, envs: Sequence[gym.Env], level: list[int], **options: Any) -> None:
        super().__init__(envs, **options)
        self.level = level  # shared with the rebuild of an env that raised: it starts at the current level

    @classmethod
    def for_split(cls, curriculum: Curriculum, level: int, num_envs: int, seed: int | None, worker_index: int,
                  first_env_index: int, spaces: EnvSpaces, max_consecutive_failures: int,
                  info_keys: Sequence[str]) -> CurriculumGroup:
        """``num_envs`` curriculum envs at ``level``, seeded as :meth:`EnvGroup.from_spec` seeds its envs."""
        current = [level]
        envs, rebuild = build_seeded(num_envs, "", seed, worker_index, first_env_index,
                                     lambda _, s: CurriculumEnv(curriculum, s, current[0]))
        return cls(envs, current, spaces=spaces, rebuild=rebuild if max_consecutive_failures > 0 else None,
                   max_consecutive_failures=max_consecutive_failures, info_keys=info_keys)

    def set_task_level(self, level: int) -> None:
        """Every env plays task ``level`` from its next episode on."""
        self.level[0] = level
        for env in self.envs:
            env.get_wrapper_attr("set_level")(level)


def reached_task(env: EnvConfig, progress: dict[str, Any] | None, make: Callable[[str], Any]) -> Any:
    """The env of the task a curriculum had reached (``progress``: a checkpoint's ``curriculum``), built by
    ``make(env_id)``: what ``daskrl enjoy`` plays. Without a curriculum, --env's."""
    curriculum = Curriculum.of(env)
    if curriculum is None:
        return make(env.env)
    level = min(int((progress or {}).get("level", 0)), len(curriculum) - 1)
    built = make(curriculum.ids[level])
    curriculum.give_task(built, level)
    return built


def check_curriculum(env: EnvConfig, spaces: EnvSpaces) -> None:
    """Before a run: every task of ``env``'s curriculum can be played by the run's policy (the same spaces as
    --env's) and, for ``--curriculum-tasks``, the env takes each task; raises :class:`EnvError` in one line."""
    curriculum = Curriculum.of(env)
    if curriculum is None:
        return
    if spaces.num_agents > 1:
        raise EnvError(f"a curriculum plays single-agent envs; {env.env!r} is a multi-agent env")
    if curriculum.tasks is None:
        for task_id in curriculum.ids[1:]:
            other = probe_env(task_id, env.env_kwargs, env.obs_keys, env.action_mask_key)
            if other != spaces:
                raise EnvError(f"--curriculum: {task_id!r} has other spaces than --env {env.env!r} (observations "
                               f"{other.obs_shape} against {spaces.obs_shape}, {other.num_actions or other.action_dim}"
                               f" actions against {spaces.num_actions or spaces.action_dim}): a curriculum's tasks "
                               "share one policy, so they need the same spaces")
        return
    _check_tasks_accepted(env.env, curriculum)


def _check_tasks_accepted(env_id: str, curriculum: Curriculum) -> None:
    """A set_task curriculum: the env has ``set_task`` and takes each task (tried on one env, closed after)."""
    env = make_env(env_id, env_kwargs=curriculum.env_kwargs)
    try:
        try:
            set_task = env.get_wrapper_attr("set_task")
        except AttributeError:
            raise EnvError(f"--curriculum-tasks hands each task to the env's set_task(task), and {env_id!r} has no "
                           "set_task (give a family of env ids with --curriculum instead)") from None
        for k, task in enumerate(curriculum.tasks or ()):
            try:
                set_task(task)
            except Exception as exc:
                raise EnvError(f"--curriculum-tasks: {env_id!r} refused task {k} ({json.dumps(task)}) in set_task: "
                               f"{type(exc).__name__}: {exc}") from None
    finally:
        env.close()
