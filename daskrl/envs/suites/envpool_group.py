"""``--env-backend envpool``: a rollout worker's envs stepped by envpool's C++ pool, one call for the whole split.

The gymnasium backend steps its envs one by one in Python (:class:`daskrl.envs.vector.EnvGroup`); envpool steps a
split's envs in one call. Which envs it plays, and as what:

- ``atari/<Game>``: envpool's emulators and preprocessing, set up to give the observations of the gymnasium path
  (:mod:`daskrl.envs.suites.envpool_atari`);
- any gymnasium id envpool has under the same name (classic control such as ``CartPole-v1`` and ``Pendulum-v1``,
  Box2D's ``LunarLander-v3`` and ``BipedalWalker-v3``, MuJoCo's ``HalfCheetah-v5`` and the other v5 tasks): the
  same spaces, time limits and rewards; ``--env-kwargs`` names envpool shares with gymnasium for that task (MuJoCo's
  ``reset_noise_scale``, ``ctrl_cost_weight``, ...) pass through, others are refused.

What differs from the gymnasium path, besides speed: envpool draws its resets from its own generators, so the same
seed starts other episodes (as another seed would); its MuJoCo is its own build, so a MuJoCo trajectory from the same
state agrees to about 1e-14 for tens of steps and then drifts apart as chaotic dynamics amplify the rounding
(``tests/cluster/test_envpool.py`` compares both where they can agree); rewards arrive as float32. An env whose
episode ended is reset at once (envpool would reset it on the next call, with that call's action), and the final
observation of a time-limit cut is kept for bootstrapping, as the gymnasium path keeps it. Evaluation, videos and
``daskrl enjoy`` play on the gymnasium env.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from daskrl.envs.batched_records import BatchedEpisodes
from daskrl.envs.layouts.spaces import EnvSpaces, spaces_differ
from daskrl.envs.registry import split_seeds
from daskrl.envs.suites.atari import PREFIX
from daskrl.envs.suites.envpool_atari import envpool_options
from daskrl.errors import EnvError

#: envpool's options that its pool, not the task, takes: the backend sets them (or the seeds do)
_POOL_OPTIONS = {"num_envs", "batch_size", "num_threads", "max_num_players", "thread_affinity_offset", "base_path",
                 "seed", "env_seed", "gym_reset_return_info"}


@dataclass(frozen=True)
class EnvpoolTask:
    """An env as envpool plays it: its task id, ``envpool.make``'s options for it, and whether its frames come
    channel-first (Atari's stacked frames, which the slots hold channel-last)."""

    task: str
    options: dict[str, Any] = field(default_factory=dict)
    channels_first: bool = False


def envpool_task(env: str, env_kwargs: dict[str, Any] | None) -> EnvpoolTask:
    """How envpool plays ``env`` with ``env_kwargs``; raises :class:`EnvError` (one line) where it cannot play it as
    the gymnasium backend does, or envpool is missing."""
    envpool = _import_envpool()
    if env.startswith(PREFIX):
        task, options = envpool_options(env, env_kwargs)
        if task not in envpool.list_all_envs():
            raise EnvError(f"envpool {envpool.__version__} has no {task} for {env!r}")
        return EnvpoolTask(task, options, channels_first=True)
    import gymnasium as gym

    if env not in envpool.list_all_envs() or env not in gym.registry:
        raise EnvError(f"envpool {envpool.__version__} has no {env!r} (it plays atari/<Game> and the gymnasium ids "
                       "it shares, such as CartPole-v1, LunarLander-v3 and HalfCheetah-v5): leave --env-backend at "
                       "gymnasium for it")
    accepted = set(envpool.make_spec(env).config._fields) - _POOL_OPTIONS
    unknown = sorted(set(env_kwargs or {}) - accepted)
    if unknown:
        raise EnvError(f"--env-backend envpool cannot pass {', '.join(map(repr, unknown))} of --env-kwargs to "
                       f"envpool's {env} (it takes {', '.join(sorted(accepted))}); use --env-backend gymnasium")
    return EnvpoolTask(env, dict(env_kwargs or {}))


def _import_envpool() -> Any:
    try:
        import envpool
    except ImportError as exc:
        raise EnvError(f"--env-backend envpool needs envpool ({exc}): pip install 'daskrl[envpool]' on every "
                       "machine that runs rollout workers") from exc
    return envpool


class EnvpoolGroup(BatchedEpisodes):
    """The envs of one rollout-worker split as one envpool (the interface of :class:`daskrl.envs.vector.EnvGroup`):
    ``step`` writes observations, rewards and episode ends into the slot's arrays, and an env whose episode ended
    already holds its next episode's first observation, as in EnvGroup."""

    def __init__(self, env: str, num_envs: int, seeds: Sequence[int] | None, env_kwargs: dict[str, Any] | None,
                 spaces: EnvSpaces | None = None, info_keys: Sequence[str] = ()) -> None:
        import envpool

        spec = envpool_task(env, env_kwargs)
        seeding = {"env_seed": [int(s) for s in seeds]} if seeds is not None else \
            {"seed": int(np.random.SeedSequence().generate_state(1)[0] % 2**31)}
        # one C++ thread: a rollout worker is one busy process per core already
        self.pool = envpool.make(spec.task, env_type="gymnasium", num_envs=num_envs, batch_size=num_envs,
                                 num_threads=1, **seeding, **spec.options)
        super().__init__(num_envs, info_keys)
        shape = tuple(self.pool.observation_space.shape)
        self.channels_first = spec.channels_first
        self.obs_shape = shape[1:] + shape[:1] if spec.channels_first else shape
        action_space = self.pool.action_space
        self.discrete = hasattr(action_space, "n")
        self._check_spaces(env, spec.task, spaces)
        self.failures: list = []  # envpool's envs do not raise into Python: nothing to rebuild
        self._actions = np.zeros((num_envs, *action_space.shape), np.int32 if self.discrete else action_space.dtype)
        if not self.discrete:  # actions clipped into the box, as the gymnasium backend clips them
            self._low = np.asarray(action_space.low, action_space.dtype)
            self._high = np.asarray(action_space.high, action_space.dtype)

    def _check_spaces(self, env: str, task: str, spaces: EnvSpaces | None) -> None:
        """envpool's spaces are the gymnasium env's (what the run's policy was built for), or one line says not."""
        if spaces is not None and (differ := spaces_differ(spaces, self.obs_shape, self.pool.action_space)):
            theirs, ours = differ
            raise EnvError(f"envpool's {task} observes {theirs}, and {env} with these options {ours}: use "
                           "--env-backend gymnasium")

    @classmethod
    def from_spec(cls, spec: str, num_envs: int, seed: int | None = None, worker_index: int = 0,
                  first_env_index: int = 0, env_kwargs: dict[str, Any] | None = None,
                  spaces: EnvSpaces | None = None, max_consecutive_failures: int = 0,
                  info_keys: Sequence[str] = ()) -> EnvpoolGroup:
        """As :meth:`EnvGroup.from_spec`: env ``i`` gets the seed ``env_seed(seed, worker_index, first + i)``."""
        seeds = split_seeds(seed, worker_index, first_env_index, num_envs)
        return cls(spec, num_envs, seeds, env_kwargs, spaces, info_keys)

    def _into_slot(self, obs: np.ndarray) -> np.ndarray:
        """envpool's observations in the slot's layout (Atari's channel-first stacks channel-last)."""
        return obs.transpose(0, 2, 3, 1) if self.channels_first else obs

    def reset(self, obs_out: np.ndarray) -> np.ndarray:
        obs, _ = self.pool.reset()
        np.copyto(obs_out, self._into_slot(obs), casting="unsafe")
        self.restart_episodes()
        return obs_out

    def step(self, actions: np.ndarray, obs_out: np.ndarray, reward_out: np.ndarray, terminated_out: np.ndarray,
             truncated_out: np.ndarray) -> None:
        if self.discrete:
            np.copyto(self._actions, actions, casting="unsafe")
        else:
            np.clip(np.asarray(actions).reshape(self._actions.shape), self._low, self._high, out=self._actions)
        obs, reward, terminated, truncated, info = self.pool.step(self._actions)
        np.copyto(obs_out, self._into_slot(obs), casting="unsafe")
        reward_out[:] = reward
        terminated_out[:] = terminated
        truncated_out[:] = truncated
        self.count_step(reward)
        ended = np.flatnonzero(terminated | truncated)
        if ended.size:
            self.record_ends(ended, truncated & ~terminated, obs_out, info)
            self._start_next_episodes(ended, obs_out)

    def _start_next_episodes(self, ended: np.ndarray, obs_out: np.ndarray) -> None:
        """Reset the envs whose episode ended now (envpool would on the next call, taking that call's action for
        the reset), their first observations into ``obs_out``."""
        ignored = np.zeros((ended.size, *self._actions.shape[1:]), self._actions.dtype)
        obs, _, _, _, reset_info = self.pool.step(ignored, ended.astype(np.int32))
        obs_out[reset_info["env_id"]] = self._into_slot(obs)

    def pop_failures(self) -> list:
        return []

    def close(self) -> None:
        self.pool.close()
