"""A group of envs stepped in one plain loop, writing into caller-owned arrays.

Rollout workers own the trajectory buffers, so results go straight into them
instead of being stacked into fresh arrays (and infos are never merged, which is
most of SyncVectorEnv's per-step cost). Envs auto-reset in the same step they end.

Envs whose step waits on a process of their own with the GIL released (VizDoom's games: the class sets
:data:`STEPS_IN_ANOTHER_PROCESS`) are stepped from a thread each instead, so their games run at once rather than one
after the other while the rollout worker waits on each: on doom/basic, 2 rollout workers x 16 games trained 17-22%
more env steps a second so (docs/performance.md).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import gymnasium as gym
import numpy as np

from daskrl.envs.layouts.dict_obs import PackedDictObservations
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.envs.owned_processes import close_all
from daskrl.envs.registry import env_seed, make_env
from daskrl.errors import EnvStepError

#: the class attribute (True) of an env whose ``step`` waits on another process with the GIL released
STEPS_IN_ANOTHER_PROCESS = "daskrl_steps_in_another_process"


def _summarize(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
    message = str(exc).strip().replace("\n", " ")
    if len(message) > 300:  # one line, not a dump of the offending value
        message = message[:300] + " ..."
    return f"{type(exc).__name__}: {message}{where}"


def build_seeded(num_envs: int, spec: str, seed: int | None, worker_index: int, first_env_index: int,
                 make: Callable[[str, int | None], Any]) -> tuple[list[Any], Callable[[int], Any]]:
    """``num_envs`` envs made by ``make(spec, seed)`` with seeds ``env_seed(seed, worker_index, first_env_index +
    i)`` (all closed again if one fails to build), and ``rebuild(i)``, which makes env ``i`` anew with a seed no
    earlier build of it had: what every group of envs needs to build, and to rebuild an env that raised."""
    rebuilds = [0]

    def build(i: int, generation: int = 0) -> Any:
        s = None if seed is None else env_seed(seed + 7919 * generation, worker_index, first_env_index + i)
        return make(spec, s)

    def rebuild(i: int) -> Any:
        rebuilds[0] += 1
        return build(i, rebuilds[0])

    envs: list[Any] = []
    try:
        for i in range(num_envs):
            envs.append(build(i))
    except BaseException:
        close_all(envs)
        raise
    return envs, rebuild


def count_failure(group: Any, env: int, phase: str, exc: BaseException) -> None:
    """Record that env ``env`` of ``group`` raised in ``phase``, to be rebuilt; raise :class:`EnvStepError` instead
    when the group does not rebuild envs or this env failed ``max_consecutive_failures`` times in a row."""
    summary = _summarize(exc)
    if group.rebuild is None:
        raise EnvStepError(env, phase, summary) from exc
    group._consecutive[env] += 1
    if group._consecutive[env] > group.max_consecutive_failures:
        raise EnvStepError(env, phase, f"{summary} ({group._consecutive[env]} failures in a row; giving up)") from exc
    group.failures.append(EnvFailure(env, phase, summary))


class EnvFailure:
    """One env that raised and was rebuilt: which, where, and the error in one line."""

    __slots__ = ("env_index", "phase", "summary")

    def __init__(self, env_index: int, phase: str, summary: str) -> None:
        self.env_index, self.phase, self.summary = env_index, phase, summary


class EpisodeRecords:
    """What a group of envs reports about finished episodes, drained by its owner: (return, length) pairs, the info
    numbers at their ends, and the final observations of those a time limit cut. Shared by every env backend."""

    finished_episodes: list[tuple[float, int, int]]  # (return, length, env column)
    episode_extras: list[dict[str, float]]
    truncations: list[tuple[int, np.ndarray]]

    def pop_episode_extras(self) -> list[dict[str, float]]:
        """Return and clear the info numbers of episodes finished since the last call (see ``episode_extras``)."""
        extras, self.episode_extras = self.episode_extras, []
        return extras

    def pop_truncations(self) -> list[tuple[int, np.ndarray]]:
        """Return and clear the (env index, final observation) of episodes cut by a time limit since the last call."""
        truncations, self.truncations = self.truncations, []
        return truncations

    def pop_new_episodes(self, ended: np.ndarray | None = None) -> Sequence[int]:
        """The envs (indices within the group) whose episode started since the last call. Here one env is one
        column and it starts its next episode in the step its last one ended (``ended``: that step's terminated |
        truncated rows); a group whose envs hold several agents keeps its own record (MultiAgentGroup)."""
        return () if ended is None else np.flatnonzero(ended)

    def pop_episode_stats(self) -> list[tuple[float, int, int]]:
        """Return and clear the (return, length, env column) of episodes finished since the last call."""
        stats, self.finished_episodes = self.finished_episodes, []
        return stats


class EnvGroup(EpisodeRecords):
    """Envs of one rollout-worker split; `step` writes obs/reward/terminated/truncated in place.

    After an episode ends, `obs_out[i]` holds the first observation of the next
    episode and the finished (return, length, i) is appended to `finished_episodes`; when it ended at a time limit
    (truncated, not terminated), its real final observation is appended to `truncations` as `(i, obs)`, for the
    learner to bootstrap from (a time limit is no death).
    """

    def __init__(self, envs: Sequence[gym.Env], spaces: EnvSpaces | None = None,
                 rebuild: Any = None, max_consecutive_failures: int = 0, info_keys: Sequence[str] = ()) -> None:
        """``rebuild(i) -> gym.Env`` makes a fresh env i; with it, an env that raises is rebuilt and its episode
        cut short (``truncated``), and only ``max_consecutive_failures`` failures in a row of one env raise."""
        if not envs:
            raise ValueError("EnvGroup needs at least one env")
        self.envs = list(envs)
        self.rebuild = rebuild
        self.max_consecutive_failures = max_consecutive_failures
        self.failures: list[EnvFailure] = []  # drained by the owner (pop_failures)
        self._consecutive = [0] * len(self.envs)
        self.num_envs = len(self.envs)
        self.spaces = spaces if spaces is not None else EnvSpaces.from_env(self.envs[0])
        self.envs = [self._packed(env) for env in self.envs]
        self.finished_episodes: list[tuple[float, int, int]] = []
        # numbers the env reports at an episode's end: info["episode_extra_stats"] (Sample Factory's convention) and
        # the info keys asked for; one dict per finished episode that had any, drained with pop_episode_extras
        self.info_keys = tuple(info_keys)
        self.episode_extras: list[dict[str, float]] = []
        self.truncations: list[tuple[int, np.ndarray]] = []  # drained by the owner (pop_truncations)
        #: --record-dataset: the (env index, final observation) of every episode that ended, terminated ones too (a
        #: dataset holds each episode's last observation); None: not kept. Drained by the episode recorder
        self.recorded_finals: list[tuple[int, np.ndarray]] | None = None
        self._ep_return = [0.0] * self.num_envs
        self._ep_length = [0] * self.num_envs
        kind = self.spaces.action_kind
        self._discrete = kind == "discrete"
        self._box = kind == "box"
        if self._box:
            shape = self.spaces.action_shape
            dtype = np.dtype(self.spaces.action_dtype)
            self._low = np.asarray(self.spaces.low, dtype=dtype).reshape(shape)
            self._high = np.asarray(self.spaces.high, dtype=dtype).reshape(shape)
            self._clipped = np.empty((self.num_envs, *shape), dtype=dtype)
        # Tuple or Dict actions: each flat row becomes the env's structure here, where the env is stepped
        self._to_env = self.spaces.action_layout.to_env if kind == "composite" else None
        #: a thread per env where the envs step in processes of their own (see the module docstring); None: in turn
        self._threads = ThreadPoolExecutor(self.num_envs, thread_name_prefix="daskrl-env") \
            if self.num_envs > 1 and getattr(self.envs[0].unwrapped, STEPS_IN_ANOTHER_PROCESS, False) else None

    @classmethod
    def from_spec(
        cls,
        spec: str,
        num_envs: int,
        seed: int | None = None,
        worker_index: int = 0,
        first_env_index: int = 0,
        env_kwargs: dict[str, Any] | None = None,
        spaces: EnvSpaces | None = None,
        max_consecutive_failures: int = 0,
        info_keys: Sequence[str] = (),
    ) -> EnvGroup:
        """Build `num_envs` envs with seeds `env_seed(seed, worker_index, first_env_index + i)`; with
        `max_consecutive_failures` > 0 an env that raises is rebuilt (with a new seed) instead of failing."""
        # packed by __init__ and _recover where needed
        envs, rebuild = build_seeded(num_envs, spec, seed, worker_index, first_env_index,
                                     lambda name, s: make_env(name, seed=s, env_kwargs=env_kwargs))
        return cls(envs, spaces, rebuild if max_consecutive_failures > 0 else None, max_consecutive_failures,
                   info_keys)

    def __len__(self) -> int:
        return self.num_envs

    def reset(self, obs_out: np.ndarray) -> np.ndarray:
        """Reset every env into `obs_out` (shape (num_envs, *obs_shape)) and zero running stats."""
        for i, env in enumerate(self.envs):
            try:
                obs_out[i], _ = env.reset()
            except Exception as exc:
                obs_out[i] = self._recover(i, "reset", exc)
        self._ep_return = [0.0] * self.num_envs
        self._ep_length = [0] * self.num_envs
        return obs_out

    def step(
        self,
        actions: np.ndarray,
        obs_out: np.ndarray,
        reward_out: np.ndarray,
        terminated_out: np.ndarray,
        truncated_out: np.ndarray,
    ) -> None:
        """Step every env with its action; ended envs are reset and their stats recorded."""
        if self._discrete:
            # numpy integer scalars, as gymnasium's own vector envs pass them: Discrete.contains (which most
            # envs assert) checks them faster than a Python int, which shows in a step as cheap as CartPole's
            acts: Any = list(actions)
        elif self._box:
            acts = np.clip(actions, self._low, self._high, out=self._clipped)
        elif self._to_env is not None:
            acts = [self._to_env(row) for row in actions]
        else:
            acts = actions
        outs = (obs_out, reward_out, terminated_out, truncated_out)
        if self._threads is None:
            self._step_envs(acts, 0, self.num_envs, *outs)
        else:  # each env in a thread: list() waits for them all, and raises what one raised (EnvStepError)
            list(self._threads.map(lambda i: self._step_envs(acts, i, i + 1, *outs), range(self.num_envs)))

    def _step_envs(self, acts: Any, first: int, end: int, obs_out: np.ndarray, reward_out: np.ndarray,
                   terminated_out: np.ndarray, truncated_out: np.ndarray) -> None:
        """Step envs ``first`` to ``end - 1`` (see :meth:`step`); what two calls share is touched per env index or
        appended to a list, so envs may step from threads of their own."""
        ep_return, ep_length = self._ep_return, self._ep_length
        i = first
        while i < end:
            env, phase = self.envs[i], "step"
            try:
                obs, reward, terminated, truncated, info = env.step(acts[i])
                ep_return[i] += reward
                ep_length[i] += 1
                if terminated or truncated:
                    self.finished_episodes.append((float(ep_return[i]), ep_length[i], i))
                    if info:
                        self._keep_extras(info)
                    if truncated and not terminated:
                        self.truncations.append((i, np.array(obs)))  # a copy: the env may reuse its buffer
                    if self.recorded_finals is not None:
                        self.recorded_finals.append((i, np.array(obs)))
                    ep_return[i] = 0.0
                    ep_length[i] = 0
                    phase = "reset"
                    obs, _ = env.reset()
                obs_out[i] = obs
                reward_out[i] = reward
                terminated_out[i] = terminated
                truncated_out[i] = truncated
                self._consecutive[i] = 0
            except Exception as exc:
                obs_out[i] = self._recover(i, phase, exc)
                reward_out[i] = 0.0
                terminated_out[i] = False
                truncated_out[i] = True  # the partial episode ends here: nothing bootstraps across it
            i += 1

    def _recover(self, i: int, phase: str, exc: Exception) -> Any:
        """Rebuild env ``i`` after it raised (dropping its episode) and return its first observation; raise
        :class:`EnvStepError` if rebuilding is off or the env keeps failing."""
        while True:
            count_failure(self, i, phase, exc)
            self._ep_return[i] = 0.0
            self._ep_length[i] = 0
            try:
                self.envs[i].close()
            except Exception:
                pass
            try:
                self.envs[i] = self._packed(self.rebuild(i))
                phase = "reset"
                obs, _ = self.envs[i].reset()
                return obs
            except Exception as again:
                exc = again

    def _packed(self, env: gym.Env) -> gym.Env:
        """``env`` with Dict observations packed into records (daskrl/envs/layouts/dict_obs.py), if it has them."""
        if self.spaces.is_dict and not isinstance(env, PackedDictObservations):
            return PackedDictObservations(env, self.spaces.obs_keys)
        return env

    def pop_failures(self) -> list[EnvFailure]:
        failures, self.failures = self.failures, []
        return failures

    def _keep_extras(self, info: dict) -> None:
        extras = dict(info.get("episode_extra_stats") or {})
        extras.update({k: info[k] for k in self.info_keys if k in info})
        numbers = {k: float(v) for k, v in extras.items() if isinstance(v, (int, float, np.number, np.ndarray))
                   and np.size(v) == 1}
        if numbers:
            self.episode_extras.append(numbers)


    def close(self) -> None:
        if self._threads is not None:
            self._threads.shutdown(wait=True)
        close_all(self.envs)
