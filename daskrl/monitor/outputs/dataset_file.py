"""--record-dataset: the episodes the rollout workers recorded (:mod:`daskrl.sampling.slots.episode_recorder`),
written into a Minari dataset (https://minari.farama.org), the dataset standard of the Farama envs daskrl runs.

The dataset is created with the first episodes to arrive and grows at every poll (on a thread of the driver's), so a
long run does not hold its data in the driver's memory and a run that stops early leaves every episode it finished.
Its spaces are the env's as daskrl makes it (wrappers of the env's family included, such as Atari's frame stack); the
env's spec is kept when gymnasium knows the id and makes the same spaces, so ``dataset.recover_environment()`` works
there. Dict observations are written as a Dict of the keys daskrl keeps (those of a fixed shape), each in its
space's dtype; Box actions as the env received them (clipped into the box); image observations as they were, not
JPEG-encoded (Minari's default for frames of 32 x 32 pixels or more, which loses detail).
"""

from __future__ import annotations

import os
import queue
import threading
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from daskrl.config import EnvConfig
from daskrl.envs.layouts.dict_obs import ObsKey, unpack
from daskrl.errors import ConfigError, TrainingError

#: the install command named where Minari is missing
INSTALL = "pip install 'daskrl[datasets]'"


def check_can_record(dataset_id: str) -> None:
    """Before a run starts: Minari (with h5py, its default storage) is installed and ``dataset_id`` is free."""
    try:
        import h5py  # noqa: F401  (Minari's hdf5 storage)
        import minari  # noqa: F401
    except ImportError as exc:
        raise ConfigError([f"--record-dataset writes a Minari dataset, and {exc.name} is not installed: "
                           f"{INSTALL}"]) from exc
    from minari.storage import get_dataset_path

    path = get_dataset_path(dataset_id)
    if os.path.exists(path):
        raise ConfigError([f"--record-dataset {dataset_id}: a dataset with that id exists at {path}: choose another "
                           f"id (a new version, -v1 after -v0) or remove it (minari delete {dataset_id})"])


class DatasetWriter:
    """Writes the recorded episodes in the components' statistics into the dataset (see the module docstring), on a
    thread of its own: Minari writes an episode in milliseconds, and the run's loop must not wait on it."""

    def __init__(self, dataset_id: str, env: EnvConfig, description: str, limit: int = 0) -> None:
        """``limit``: the episodes to write at most (--record-episodes; 0: all): a rollout worker recreated after a
        fault starts its envs' quotas again."""
        self.dataset_id, self.description, self.limit = dataset_id, description, limit
        #: Dict observations: the keys the slots' packed records hold (daskrl drops keys of no fixed shape)
        self.observation_space, self.action_space, self.keys = dataset_spaces(env)
        self.env_spec = _gymnasium_spec(env.env, env.env_kwargs, self.observation_space, self.action_space)
        self.dataset: Any = None  # created with the first episodes
        self.episodes = 0  # taken from the components (each is written, in order)
        self.steps = 0
        self.dropped = 0  # episodes an env's failure cut short, by the rollout workers' counts
        self.error: BaseException | None = None  # what stopped the writing thread
        self.pending: queue.Queue[list | None] = queue.Queue()
        self.thread = threading.Thread(target=self._write_all, name="daskrl-dataset", daemon=True)
        self.thread.start()

    def take(self, stats: dict[str, Any]) -> None:
        """The episodes in one component's collected statistics, if any, handed to the writing thread."""
        if self.error is not None:
            raise TrainingError(f"writing Minari dataset {self.dataset_id} failed: {type(self.error).__name__}: "
                                f"{self.error}; the episodes written before are in it")
        self.dropped = max(self.dropped, stats.get("dataset_dropped", 0))
        episodes = stats.get("dataset_episodes")
        if self.limit:
            episodes = (episodes or [])[:max(self.limit - self.episodes, 0)]
        if not episodes:
            return
        self.pending.put(episodes)
        self.episodes += len(episodes)
        self.steps += sum(len(episode[2]) for episode in episodes)

    def close(self) -> None:
        """Wait until every episode taken is written."""
        self.pending.put(None)
        self.thread.join()

    def _write_all(self) -> None:
        while (episodes := self.pending.get()) is not None:
            if self.error is None:  # after a failure the rest is dropped: the run stops at its next take
                try:
                    self._write([self._buffer(episode) for episode in episodes])
                except Exception as exc:
                    self.error = exc

    def _write(self, buffers: list) -> None:
        import minari

        if self.dataset is None:
            with warnings.catch_warnings():  # Minari asks for an author and a code link we do not know
                warnings.simplefilter("ignore", UserWarning)
                self.dataset = minari.create_dataset_from_buffers(
                    self.dataset_id, buffers, env=self.env_spec, observation_space=self.observation_space,
                    action_space=self.action_space, algorithm_name="daskrl", description=self.description,
                    jpeg_encoding=False)  # frames exactly as the env gave them (Minari's default encodes them lossily)
        else:
            self.dataset.update_dataset_from_buffer(buffers)

    def _buffer(self, episode: tuple) -> Any:
        from minari.data_collector import EpisodeBuffer

        observations, actions, rewards, terminated, truncated, infos = episode
        if hasattr(self.action_space, "low"):  # a Box: the action the env was given
            actions = np.clip(actions, self.action_space.low, self.action_space.high)
        if self.keys:  # packed records: each key's arrays, in its space's dtype
            observations = {name: values.astype(self.observation_space[name].dtype, copy=False)
                            for name, values in unpack(observations, self.keys).items()}
        else:
            observations = observations.astype(self.observation_space.dtype, copy=False)
        return EpisodeBuffer(observations=observations,
                             actions=actions.astype(self.action_space.dtype, copy=False),
                             rewards=rewards.astype(np.float64), terminations=terminated.astype(bool),
                             truncations=truncated.astype(bool), infos=infos or None)

    def summary(self) -> dict[str, Any]:
        """What the run's summary says of the dataset."""
        return {"dataset": self.dataset_id, "dataset_episodes": self.episodes, "dataset_steps": self.steps,
                "dataset_dropped_episodes": self.dropped}


class NoDataset:
    """A run that records no dataset."""

    episodes = 0

    def take(self, stats: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass

    def summary(self) -> dict[str, Any]:
        return {}


def dataset_spaces(env: EnvConfig) -> tuple[Any, Any, tuple[ObsKey, ...]]:
    """The observation and action spaces of a dataset of this env as daskrl makes it (its family's wrappers
    included; Dict observations as the keys daskrl keeps), and those keys (none for array observations): what a
    dataset recorded here holds, and what one loaded here must hold."""
    from daskrl.envs import make_env, probe_env

    keys = probe_env(env.env, env.env_kwargs, env.obs_keys, env.action_mask_key).obs_keys
    made = make_env(env.env, env_kwargs=env.env_kwargs)
    try:
        observation_space = kept_keys_space(made.observation_space, keys) if keys else made.observation_space
        return observation_space, made.action_space, keys
    finally:
        made.close()


def kept_keys_space(space: Any, keys: Sequence[ObsKey]) -> Any:
    """The Dict space of the keys the slots hold (a nested key ``outer/inner`` under its full name)."""
    import gymnasium as gym

    def subspace(name: str) -> Any:
        if name in space.spaces:
            return space[name]
        outer, _, inner = name.partition("/")
        return space[outer][inner]

    return gym.spaces.Dict({key.name: subspace(key.name) for key in keys})


def _gymnasium_spec(env_id: str, env_kwargs: dict[str, Any], observation_space: Any, action_space: Any) -> Any:
    """gymnasium's spec of the env, when gymnasium makes it with the same spaces daskrl's env has (None: an env of
    daskrl's own families, or one daskrl wraps)."""
    import gymnasium as gym

    try:
        spec = gym.spec(env_id)
        env = gym.make(env_id, **env_kwargs)
    except Exception:
        return None
    try:
        same = env.observation_space == observation_space and env.action_space == action_space
    finally:
        env.close()
    return spec if same and not env_kwargs else None
