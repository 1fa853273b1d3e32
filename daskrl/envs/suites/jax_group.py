"""``--env-backend jax``: a rollout worker's envs as one JAX program, gymnax's functional envs stepped for the whole
split in one jitted, vmapped call.

gymnax (``reset(key, params)``, ``step(key, state, action, params)``) resets an env whose episode ended inside the
step and hands back the final observation and both end flags, which is the contract of daskrl's slots: the step
writes the next episode's first observation, and keeps the final one of a time-limit cut for bootstrapping. Which
envs it plays: the gymnasium ids gymnax has under the same name (``CartPole-v1``, ``Acrobot-v1``,
``MountainCar-v0``, ``MountainCarContinuous-v0``, ``Pendulum-v1``), with gymnax's default parameters (the
gymnasium env's physics, time limit and reward); ``--env-kwargs`` are refused, since gymnax names its parameters
otherwise. Evaluation, videos and ``daskrl enjoy`` play the gymnasium env.

Installing it: gymnax 1.0.1 pins gymnasium below 1.4, which daskrl's envs need, so ``pip install 'daskrl[jax]'``
installs what gymnax imports (jax, flax, matplotlib, seaborn) and ``pip install --no-deps gymnax`` adds gymnax
without downgrading gymnasium (docs/performance.md).

What differs from the gymnasium path, besides speed: JAX draws the first states from its own generators (the same
seed starts other episodes, as another seed would), and gymnax computes in float32 where gymnasium's classic control
computes in float64, so a trajectory from the same state agrees to float32's rounding for tens of steps and then
drifts (``tests/cluster/test_jax_backend.py`` compares both).

JAX runs on the CPU with one thread of its own, as a rollout worker is one busy process per core: XLA sizes its
thread pool by the CPUs the process may use when its backend starts, and a pool per core in every rollout worker
made a step of 256 CartPoles cost 1.3-1.5x as much here (two workers on two cores), so the backend starts with the
calling thread held to its current core, which is then given back (:func:`_held_to_one_core`). The variables
below are set only where the user has not set them.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from daskrl.envs.batched_records import BatchedEpisodes
from daskrl.envs.layouts.spaces import EnvSpaces, spaces_differ
from daskrl.envs.registry import split_seeds
from daskrl.envs.vector import EnvFailure, count_failure
from daskrl.errors import EnvError

#: JAX's settings for a rollout worker: the CPU, one thread, no memory taken ahead on a GPU it is not asked to use
_JAX_ENVIRONMENT = {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false",
                    "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}


def _import_gymnax() -> Any:
    """gymnax, with JAX started on one core of this process where this is the first to import it."""
    for name, value in _JAX_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    try:
        with _held_to_one_core() if "jax" not in sys.modules else contextlib.nullcontext():
            import gymnax
            import jax
            import jax.numpy as jnp

            jax.jit(lambda x: x + 1)(jnp.zeros(2)).block_until_ready()  # the CPU backend starts with it
    except ImportError as exc:
        raise EnvError(f"--env-backend jax needs gymnax ({exc}): pip install 'daskrl[jax]' and then "
                       "pip install --no-deps gymnax (it pins an older gymnasium) on every machine that runs "
                       "rollout workers") from exc
    return gymnax


@contextlib.contextmanager
def _held_to_one_core() -> Iterator[None]:
    """Hold the calling thread to the core it runs on, then give its affinity back, and the same to the threads
    started meanwhile: JAX started inside sizes its thread pools to one core (the way JAX's maintainers advise
    limiting its threads), and its threads are not tied to the core the import happened to run on."""
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    if len(allowed) <= 1:
        yield
        return
    import psutil

    before = set(os.listdir("/proc/self/task"))
    core = psutil.Process().cpu_num()
    os.sched_setaffinity(0, {core if core in allowed else min(allowed)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, allowed)
        for thread in set(os.listdir("/proc/self/task")) - before:
            with contextlib.suppress(OSError):  # a thread that ended meanwhile
                os.sched_setaffinity(int(thread), allowed)


def check_jax_env(env: str, env_kwargs: dict[str, Any] | None) -> None:
    """Before a run: gymnax is installed and plays ``env`` as the gymnasium backend would; one line if not."""
    gymnax = _import_gymnax()
    import gymnasium as gym

    if env not in gymnax.registered_envs or env not in gym.registry:
        shared = sorted(e for e in gymnax.registered_envs if e in gym.registry)
        raise EnvError(f"--env-backend jax plays the gymnasium ids gymnax has ({', '.join(shared)}), not {env!r}: "
                       "leave --env-backend at gymnasium for it")
    if env_kwargs:
        raise EnvError(f"--env-backend jax plays gymnax's {env} with its default parameters and cannot pass "
                       f"--env-kwargs ({', '.join(sorted(env_kwargs))}): drop them or use --env-backend gymnasium")


@functools.cache
def batched_env(env: str) -> tuple[Any, Any, Any, Any]:
    """gymnax's ``env`` and its parameters, with its reset and its autoresetting step over a batch of envs, each
    compiled once per process (and per batch size) whichever split calls them."""
    import jax

    gymnax = _import_gymnax()
    model, params = gymnax.make(env)

    def reset(keys: Any) -> tuple[Any, Any, Any]:
        step_keys = jax.vmap(jax.random.split)(keys)
        obs, state = jax.vmap(model.reset, in_axes=(0, None))(step_keys[:, 1], params)
        return step_keys[:, 0], state, obs

    def step(keys: Any, state: Any, actions: Any) -> tuple[Any, ...]:
        step_keys = jax.vmap(jax.random.split)(keys)
        obs, state, reward, terminated, truncated, info = jax.vmap(model.step, in_axes=(0, 0, 0, None))(
            step_keys[:, 1], state, actions, params)
        return step_keys[:, 0], state, obs, reward, terminated, truncated, info

    return model, params, jax.jit(reset), jax.jit(step)


class JaxGroup(BatchedEpisodes):
    """The envs of one rollout-worker split as one batch of gymnax envs (the interface of
    :class:`daskrl.envs.vector.EnvGroup`): each env keeps its own key, split at every step, and ``step`` writes the
    observations after the autoreset, the rewards and the episode ends into the slot's arrays.

    A step that raises (a bug in a user's env, a JAX runtime error) restarts every env of the group from new keys,
    counted as a failure of each, and the step's rows end their episodes as truncated, as the gymnasium backend
    rebuilds an env that raised; past ``max_consecutive_failures`` failures in a row it raises."""

    def __init__(self, env: str, num_envs: int, seeds: Sequence[int] | None, spaces: EnvSpaces | None = None,
                 max_consecutive_failures: int = 0, info_keys: Sequence[str] = ()) -> None:
        import jax

        super().__init__(num_envs, info_keys)
        self.env = env
        self.model, self.params, self._reset, self._step = batched_env(env)
        action_space = self.model.action_space(self.params)
        self.discrete = hasattr(action_space, "n")
        self.obs_shape = tuple(self.model.observation_space(self.params).shape)
        self._check_spaces(spaces, action_space)
        if not self.discrete:  # actions clipped into the box, as the gymnasium backend clips them
            self._low = np.asarray(action_space.low, np.float32)
            self._high = np.asarray(action_space.high, np.float32)
            self._action_shape = tuple(action_space.shape)
        seeds = seeds if seeds is not None else np.random.SeedSequence().generate_state(num_envs) % 2**31
        self._keys = jax.vmap(jax.random.PRNGKey)(np.asarray(seeds, np.uint32))
        self._state: Any = None
        self.max_consecutive_failures = max_consecutive_failures
        self.rebuild = self._restart if max_consecutive_failures > 0 else None  # count_failure reads these two
        self._consecutive = np.zeros(num_envs, np.int64)
        self.failures: list[EnvFailure] = []

    def _check_spaces(self, spaces: EnvSpaces | None, action_space: Any) -> None:
        """gymnax's spaces are the gymnasium env's (what the run's policy was built for), or one line says not."""
        if spaces is not None and (differ := spaces_differ(spaces, self.obs_shape, action_space)):
            theirs, ours = differ
            raise EnvError(f"gymnax's {self.env} observes {theirs}, and the gymnasium env {ours}: use --env-backend "
                           "gymnasium")

    @classmethod
    def from_spec(cls, spec: str, num_envs: int, seed: int | None = None, worker_index: int = 0,
                  first_env_index: int = 0, env_kwargs: dict[str, Any] | None = None,
                  spaces: EnvSpaces | None = None, max_consecutive_failures: int = 0,
                  info_keys: Sequence[str] = ()) -> JaxGroup:
        """As :meth:`EnvGroup.from_spec`: env ``i`` gets the seed ``env_seed(seed, worker_index, first + i)``."""
        check_jax_env(spec, env_kwargs)
        seeds = split_seeds(seed, worker_index, first_env_index, num_envs)
        return cls(spec, num_envs, seeds, spaces, max_consecutive_failures, info_keys)

    def reset(self, obs_out: np.ndarray) -> np.ndarray:
        self._keys, self._state, obs = self._reset(self._keys)
        np.copyto(obs_out, np.asarray(obs), casting="unsafe")
        self.restart_episodes()
        return obs_out

    def _restart(self, obs_out: np.ndarray) -> None:
        """Start every env afresh from its next key (after a step raised)."""
        self.reset(obs_out)

    def step(self, actions: np.ndarray, obs_out: np.ndarray, reward_out: np.ndarray, terminated_out: np.ndarray,
             truncated_out: np.ndarray) -> None:
        if self.discrete:
            acts = np.asarray(actions, np.int32).reshape(self.num_envs)
        else:
            acts = np.clip(np.asarray(actions, np.float32).reshape(self.num_envs, *self._action_shape), self._low,
                           self._high)
        try:
            keys, state, obs, reward, terminated, truncated, info = self._step(self._keys, self._state, acts)
            rewards, ends = np.asarray(reward, np.float64).reshape(self.num_envs), np.asarray(terminated)
            cuts = np.asarray(truncated)
        except Exception as exc:
            self._recover(exc, obs_out, reward_out, terminated_out, truncated_out)
            return
        self._keys, self._state = keys, state
        self._consecutive[:] = 0
        np.copyto(obs_out, np.asarray(obs), casting="unsafe")
        reward_out[:] = rewards
        terminated_out[:] = ends
        truncated_out[:] = cuts
        self.count_step(rewards)
        ended = np.flatnonzero(ends | cuts)
        if ended.size:
            self.record_ends(ended, cuts & ~ends, np.asarray(info["final_observation"]), info)

    def _recover(self, exc: Exception, obs_out: np.ndarray, reward_out: np.ndarray, terminated_out: np.ndarray,
                 truncated_out: np.ndarray) -> None:
        """After a step raised: count a failure of every env (raising past the limit, or where rebuilding is off)
        and restart them all, the step's rows ending their episodes as truncated (nothing bootstraps across)."""
        for i in range(self.num_envs):
            count_failure(self, i, "step", exc)
        self._restart(obs_out)
        reward_out[:] = 0.0
        terminated_out[:] = False
        truncated_out[:] = True

    def pop_failures(self) -> list[EnvFailure]:
        failures, self.failures = self.failures, []
        return failures

    def close(self) -> None:
        self._state = None
