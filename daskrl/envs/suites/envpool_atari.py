"""``--env-backend envpool``: a rollout worker's Atari envs stepped by envpool's C++ emulators, with the observations
of the gymnasium path (daskrl/envs/suites/atari.py).

The gymnasium path goes through Python for every emulator frame (4 per step) and several wrappers; envpool runs the
frame skip, max-pooling, grayscale, resize and frame stack in C++ for the whole group in one call. Both use the
same settings: 84x84 grayscale frames (inter-area resize), 4 frames a step with the max of the last two, 4 frames
stacked (the first frame fills the stack at reset), 1 to 30 no-ops after a reset, sticky actions 0.25, episodes cut
at 27,000 steps (108,000 frames), the minimal action set, raw game rewards, no life loss as an episode end, no FIRE
at reset. With no randomness (``noop_max`` 1, ``sticky_actions`` 0) the two give the same pixels, step for step
(``tests/cluster/test_atari.py``); with it they draw from different generators (envpool's C++ mt19937 against gymnasium's
numpy one), so the same seed gives other no-op counts and sticky repeats, as two seeds would.

What differs, besides that: envpool has no zero-no-op reset (``noop_max`` must be at least 1), stacks frames
channel-first (this group transposes into the slot's HWC layout), and resets an ended env in a second call (its
"next-step" auto-reset); its 108,000-frame limit counts steps after the reset's no-ops, ALE's counts frames with
them (the gymnasium path cuts an episode up to 8 steps sooner). Evaluation episodes, videos and ``daskrl enjoy``
play on the gymnasium env: the same observations.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.envs.registry import env_seed
from daskrl.envs.suites.atari import PREFIX
from daskrl.envs.vector import EpisodeRecords
from daskrl.errors import EnvError

#: daskrl's atari/<Game> options (--env-kwargs) -> envpool's names for them
_OPTIONS = {"num_frames": "stack_num", "sticky_actions": "repeat_action_probability", "noop_max": "noop_max",
            "full_action_space": "full_action_space"}
#: what envpool must be told to play as daskrl/envs/suites/atari.py does (its own defaults differ for these)
_AS_GYMNASIUM = {"use_fire_reset": False, "episodic_life": False, "reward_clip": False, "gray_scale": True,
                 "use_inter_area_resize": True, "frame_skip": 4, "max_episode_steps": 27_000, "stack_num": 4,
                 "repeat_action_probability": 0.25, "noop_max": 30, "zero_discount_on_life_loss": False}


def envpool_options(env: str, env_kwargs: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """envpool's task id and ``envpool.make`` options for ``atari/<Game>`` with ``env_kwargs``; raises
    :class:`EnvError` (one line) for an env or an option envpool cannot play as the gymnasium path does."""
    match = re.fullmatch(re.escape(PREFIX) + r"(\w+)", env)
    if match is None:
        raise EnvError(f"--env-backend envpool plays the {PREFIX}<Game> envs only, not {env!r}: leave --env-backend "
                       "at gymnasium for it")
    options = dict(_AS_GYMNASIUM)
    for key, value in (env_kwargs or {}).items():
        if key == "screen_size":
            options["img_height"] = options["img_width"] = int(value)
        elif key in _OPTIONS:
            options[_OPTIONS[key]] = value
        else:
            raise EnvError(f"--env-backend envpool cannot pass {key!r} of --env-kwargs to envpool (it takes "
                           f"{', '.join(sorted([*_OPTIONS, 'screen_size']))}); use --env-backend gymnasium")
    if options["noop_max"] < 1:
        raise EnvError("--env-backend envpool always plays at least one no-op after a reset: noop_max must be at "
                       "least 1 (or use --env-backend gymnasium)")
    return f"{match.group(1)}-v5", options


def check_backend(backend: str, env: str, env_kwargs: dict[str, Any] | None) -> None:
    """Before a run: the backend can play this env with these options, and envpool is installed for it."""
    if backend != "envpool":
        return
    task, _ = envpool_options(env, env_kwargs)
    try:
        import envpool
    except ImportError as exc:
        raise EnvError(f"--env-backend envpool needs envpool ({exc}): pip install 'daskrl[envpool]' on every "
                       "machine that runs rollout workers") from exc
    if task not in envpool.list_all_envs():
        raise EnvError(f"envpool {envpool.__version__} has no {task} for {env!r}")


class EnvpoolGroup(EpisodeRecords):
    """The envs of one rollout-worker split as one envpool (the interface of :class:`daskrl.envs.vector.EnvGroup`):
    ``step`` writes observations, rewards and episode ends into the slot's arrays, and an env whose episode ended
    already holds its next episode's first observation, as in EnvGroup."""

    def __init__(self, env: str, num_envs: int, seeds: Sequence[int] | None, env_kwargs: dict[str, Any] | None,
                 spaces: EnvSpaces | None = None, info_keys: Sequence[str] = ()) -> None:
        import envpool

        check_backend("envpool", env, env_kwargs)
        task, options = envpool_options(env, env_kwargs)
        seeding = {"env_seed": [int(s) for s in seeds]} if seeds is not None else \
            {"seed": int(np.random.SeedSequence().generate_state(1)[0] % 2**31)}
        # one C++ thread: a rollout worker is one busy process per core already
        self.pool = envpool.make(task, env_type="gymnasium", num_envs=num_envs, batch_size=num_envs, num_threads=1,
                                 **seeding, **options)
        self.num_envs = num_envs
        self.obs_shape = tuple(self.pool.observation_space.shape[1:]) + self.pool.observation_space.shape[:1]
        if spaces is not None and (tuple(spaces.obs_shape) != self.obs_shape
                                   or spaces.num_actions != self.pool.action_space.n):
            raise EnvError(f"envpool's {task} observes {self.obs_shape} with {self.pool.action_space.n} actions, and "
                           f"{env} with these options {tuple(spaces.obs_shape)} with {spaces.num_actions}")
        self.info_keys = tuple(info_keys)
        self.failures: list = []  # envpool's emulators do not raise into Python: nothing to rebuild
        self.finished_episodes: list[tuple[float, int, int]] = []
        self.episode_extras: list[dict[str, float]] = []
        self.truncations: list[tuple[int, np.ndarray]] = []
        self._ep_return = np.zeros(num_envs, np.float64)
        self._ep_length = np.zeros(num_envs, np.int64)
        self._actions = np.zeros(num_envs, np.int32)

    @classmethod
    def from_spec(cls, spec: str, num_envs: int, seed: int | None = None, worker_index: int = 0,
                  first_env_index: int = 0, env_kwargs: dict[str, Any] | None = None,
                  spaces: EnvSpaces | None = None, max_consecutive_failures: int = 0,
                  info_keys: Sequence[str] = ()) -> EnvpoolGroup:
        """As :meth:`EnvGroup.from_spec`: env ``i`` gets the seed ``env_seed(seed, worker_index, first + i)``."""
        seeds = None if seed is None else [env_seed(seed, worker_index, first_env_index + i) for i in range(num_envs)]
        return cls(spec, num_envs, seeds, env_kwargs, spaces, info_keys)

    def __len__(self) -> int:
        return self.num_envs

    def reset(self, obs_out: np.ndarray) -> np.ndarray:
        obs, _ = self.pool.reset()
        np.copyto(obs_out, obs.transpose(0, 2, 3, 1))
        self._ep_return[:] = 0.0
        self._ep_length[:] = 0
        return obs_out

    def step(self, actions: np.ndarray, obs_out: np.ndarray, reward_out: np.ndarray, terminated_out: np.ndarray,
             truncated_out: np.ndarray) -> None:
        np.copyto(self._actions, actions, casting="unsafe")
        obs, reward, terminated, truncated, info = self.pool.step(self._actions)
        np.copyto(obs_out, obs.transpose(0, 2, 3, 1))
        reward_out[:] = reward
        terminated_out[:] = terminated
        truncated_out[:] = truncated
        self._ep_return += reward
        self._ep_length += 1
        ended = np.flatnonzero(terminated | truncated)
        if ended.size:
            self._end_episodes(ended, obs_out, truncated & ~terminated, info)

    def _end_episodes(self, ended: np.ndarray, obs_out: np.ndarray, cut: np.ndarray, info: dict) -> None:
        """Record the episodes that ended, keep the final observations of those cut by the time limit, and start
        the next episodes now (envpool would on the next call, taking that call's action for the reset)."""
        for i in ended:
            self.finished_episodes.append((float(self._ep_return[i]), int(self._ep_length[i]), int(i)))
            extras = {k: float(np.asarray(info[k])[i]) for k in self.info_keys if k in info}
            if extras:
                self.episode_extras.append(extras)
            if cut[i]:
                self.truncations.append((int(i), obs_out[i].copy()))
        self._ep_return[ended] = 0.0
        self._ep_length[ended] = 0
        obs, _, _, _, reset_info = self.pool.step(np.zeros(ended.size, np.int32), ended.astype(np.int32))
        obs_out[reset_info["env_id"]] = obs.transpose(0, 2, 3, 1)

    def pop_failures(self) -> list:
        return []

    def close(self) -> None:
        self.pool.close()
