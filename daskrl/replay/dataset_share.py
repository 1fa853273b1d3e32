"""``--dataset minari:ID``: a Minari dataset preloaded into the replay shards and drawn beside new experience.

The driver splits the dataset by episode over the shards the run starts with (:func:`dataset_shares`: whole
episodes, in order, each shard's transitions within one episode of an equal share), so a dataset larger than one
host's memory stays split over the hosts. Each shard reads only its own episodes from the dataset's folder (its
Dask worker must see that folder: one host, or a shared file system) into a :class:`DatasetPart`, kept apart from
its ring of new experience and never overwritten. Every minibatch then takes ``--dataset-fraction`` of its rows from
the dataset part, uniformly and with importance weight 1, and the rest from the ring: RLPD's symmetric sampling
(Ball et al. 2023) at the default 0.5. Dataset rows carry no priority: their position in an answer is -1, and the
shard drops the TD errors that come back for them.

An episode becomes n-step transitions as one env's slot would (:func:`~daskrl.replay.n_step.slot_transitions`),
with its last observation as the real final one: a truncated episode bootstraps from it, a terminated one does
not. Rewards are scaled and clipped as the ring's are (``--reward-scale``, ``--reward-clip``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from daskrl.envs.layouts.dict_obs import ObsKey, pack_rows
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.replay.n_step import Transitions, slot_transitions
from daskrl.replay.sampler import UniformSampler
from daskrl.replay.store import TransitionStore, numpy_arrays, store_shapes
from daskrl.setups import DatasetShare

#: the source prefix of ``--dataset`` (the only kind of dataset read today)
MINARI = "minari:"
#: the position an answer gives a row drawn from the dataset part (no priority to update)
DATASET_ROW = -1


def minari_id(source: str) -> str:
    """The Minari id of a ``--dataset`` value (``minari:NS/ENV/NAME-vN``)."""
    return source[len(MINARI):] if source.startswith(MINARI) else source


def dataset_folder(dataset_id: str) -> str:
    """Where Minari keeps ``dataset_id`` on this machine (it need not exist)."""
    from minari.storage import get_dataset_path

    return str(get_dataset_path(dataset_id))


def _data(path: str) -> str:
    """Where a dataset's episodes are, inside its folder (Minari's layout)."""
    return os.path.join(path, "data")


def episode_lengths(path: str) -> np.ndarray:
    """[episodes] int64: the steps of each episode of the dataset in ``path``, read from its metadata alone."""
    from minari.dataset.minari_storage import MinariStorage

    storage = MinariStorage.read(_data(path))
    return np.array([int(m["total_steps"]) for m in storage.get_episode_metadata(range(storage.total_episodes))],
                    np.int64)


def split_by_episode(lengths: Sequence[int], parts: int) -> list[tuple[int, int]]:
    """``parts`` ranges of whole episodes, in order, whose steps are each within one episode of an equal share: part
    ``j`` ends at the episode boundary nearest ``(j + 1) / parts`` of all steps (a part may be empty when episodes
    are fewer than parts)."""
    ends = np.concatenate([[0], np.cumsum(lengths)])
    total, bounds = ends[-1], [0]
    for j in range(1, parts):
        nearest = int(np.argmin(np.abs(ends - total * j / parts)))
        bounds.append(max(nearest, bounds[-1]))
    bounds.append(len(lengths))
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def dataset_shares(source: str, fraction: float, parts: int) -> list[DatasetShare]:
    """Each of ``parts`` shards' share of the dataset ``source`` names (see :func:`split_by_episode`)."""
    dataset_id = minari_id(source)
    path = dataset_folder(dataset_id)
    lengths = episode_lengths(path)
    return [DatasetShare(dataset_id, path, first, stop, int(lengths[first:stop].sum()), fraction)
            for first, stop in split_by_episode(lengths, parts)]


def dataset_problems(source: str, env: Any) -> list[str]:
    """Before the run starts (one line each): Minari is installed, the dataset exists and holds episodes, and its
    spaces are those of the env ``env`` (an :class:`~daskrl.config.EnvConfig`) as daskrl makes it."""
    try:
        import h5py  # noqa: F401  (Minari's hdf5 storage)
        import minari
    except ImportError as exc:
        from daskrl.monitor.outputs.dataset_file import INSTALL

        return [f"--dataset reads a Minari dataset, and {exc.name} is not installed: {INSTALL}"]
    from daskrl.monitor.outputs.dataset_file import dataset_spaces

    dataset_id = minari_id(source)
    path = dataset_folder(dataset_id)
    if not os.path.isdir(_data(path)):
        return [f"--dataset {source}: no Minari dataset {dataset_id} at {path} (the datasets folder is "
                "$MINARI_DATASETS_PATH, or ~/.minari/datasets): record one with daskrl record or --record-dataset, "
                "or list what is there with: minari list local"]
    dataset = minari.MinariDataset(_data(path))
    if dataset.total_episodes == 0:
        return [f"--dataset {source}: the dataset holds no episode: record some into it first"]
    observation_space, action_space, _ = dataset_spaces(env)
    problems = []
    for what, theirs, ours in (("observations", dataset.observation_space, observation_space),
                               ("actions", dataset.action_space, action_space)):
        if theirs != ours:
            problems.append(f"--dataset {source} holds {what} in {theirs}, and --env {env.env} gives them in {ours}: "
                            "load a dataset recorded from this env (with the same --env-kwargs and --obs-keys)")
    return problems


def episode_part(episode: Any, keys: Sequence[ObsKey]) -> dict[str, np.ndarray]:
    """One Minari episode as the slot of one env holding it whole (the fields
    :func:`~daskrl.replay.n_step.slot_transitions` reads): its last observation is the real final one."""
    steps = len(episode.rewards)
    obs = pack_rows(episode.observations, keys, steps + 1) if keys else np.asarray(episode.observations)
    terminated = np.asarray(episode.terminations, bool)
    truncated = np.asarray(episode.truncations, bool)
    cut = bool(truncated[-1] and not terminated[-1])
    return {"obs": obs[:, None], "actions": np.asarray(episode.actions)[:, None],
            "rewards": np.asarray(episode.rewards, np.float64)[:, None], "terminated": terminated[:, None],
            "truncated": truncated[:, None], "final_obs": obs[steps:] if cut else obs[:0],
            "final_at": np.array([steps - 1] if cut else [], np.int64)}


def share_transitions(share: DatasetShare, keys: Sequence[ObsKey], n_step: int, gamma: float,
                      reward_scale: float = 1.0, reward_clip: float = 0.0) -> Iterator[Transitions]:
    """The n-step transitions of ``share``'s episodes, one episode at a time (rewards scaled, then clipped)."""
    import minari

    dataset = minari.MinariDataset(_data(share.path))
    for episode in dataset.iterate_episodes(range(share.first, share.stop)):
        part = episode_part(episode, keys)
        part["rewards"] = part["rewards"] * reward_scale
        if reward_clip > 0:
            np.clip(part["rewards"], -reward_clip, reward_clip, out=part["rewards"])
        yield slot_transitions(part, n_step, gamma)


class DatasetPart:
    """A shard's share of the dataset, in plain arrays of the shard's process, drawn uniformly beside the ring."""

    def __init__(self, share: DatasetShare, spaces: EnvSpaces, n_step: int, gamma: float, reward_scale: float,
                 reward_clip: float, seed: int) -> None:
        self.share = share
        shapes = store_shapes(max(share.transitions, 1), tuple(spaces.obs_shape), spaces.obs_dtype,
                              tuple(spaces.action_shape), spaces.action_dtype)
        self.store = TransitionStore(numpy_arrays(shapes))
        for transitions in share_transitions(share, spaces.obs_keys, n_step, gamma, reward_scale, reward_clip):
            self.store.add(transitions)
        self.sampler = UniformSampler(self.store.capacity, seed=seed)
        self.drawn = 0  # rows drawn from it, in all
        #: the share of a minibatch drawn from it: --dataset-fraction, or 1 while a run trains from it alone
        #: (an offline run throughout; --online-after until it starts sampling)
        self.fraction = share.fraction

    @property
    def size(self) -> int:
        return self.store.size

    def rows(self, batch: int) -> int:
        """How many rows of a ``batch``-row minibatch come from the dataset (none while it is empty)."""
        return int(round(batch * self.fraction)) if self.store.size else 0

    def draw_beside(self, ring: TransitionStore, sampler: Any, count: int, out: dict[str, np.ndarray]
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``count`` minibatches into ``out`` ({field: [count, batch, ...]}), each with its first rows drawn from
        the ring (by ``sampler``: uniform or prioritized) and its last :meth:`rows` from this part; every row's
        position, stamp and importance weight, flat (this part's rows: :data:`DATASET_ROW`, -1 and 1)."""
        batch = len(out["rewards"][0])
        mine = self.rows(batch)
        own = batch - mine
        positions = np.full((count, batch), DATASET_ROW, np.int64)
        stamps = np.full((count, batch), -1, np.int64)
        weights = np.ones((count, batch), np.float32)
        drawn = self.sampler.draw(self.store.size, mine, count).positions
        self.drawn += drawn.size
        parts = [(self.store.read(drawn), slice(own, None), mine)]
        if own:  # none at --dataset-fraction 1
            draw = sampler.draw(ring.size, own, count)
            positions[:, :own] = draw.positions.reshape(count, own)
            stamps[:, :own] = ring.stamps[draw.positions].reshape(count, own)
            weights[:, :own] = draw.weights.reshape(count, own)
            parts.append((ring.read(draw.positions), slice(0, own), own))
        for fields, columns, width in parts:
            for name, block in out.items():
                block[:, columns] = fields[name].reshape(count, width, *block.shape[2:])
        return positions.reshape(-1), stamps.reshape(-1), weights.reshape(-1)

    def stats(self) -> dict[str, Any]:
        return {"dataset": self.share.dataset_id, "dataset_size": self.store.size,
                "dataset_episodes": self.share.episodes, "dataset_rows_drawn": self.drawn}
