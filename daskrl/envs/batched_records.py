"""Episode bookkeeping for groups whose envs step in one call (envpool's pool, a jitted JAX step): the running return
and length of every env as arrays, and at an episode's end the records :class:`~daskrl.envs.vector.EpisodeRecords`
reports, as the gymnasium backend's per-env loop keeps them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from daskrl.envs.vector import EpisodeRecords


class BatchedEpisodes(EpisodeRecords):
    """The running episodes of ``num_envs`` envs stepped together; a backend calls :meth:`count_step` after each
    step and :meth:`record_ends` for the envs whose episode ended in it."""

    def __init__(self, num_envs: int, info_keys: Sequence[str] = ()) -> None:
        self.num_envs = num_envs
        self.info_keys = tuple(info_keys)
        self.finished_episodes: list[tuple[float, int, int]] = []
        self.episode_extras: list[dict[str, float]] = []
        self.truncations: list[tuple[int, np.ndarray]] = []
        self._ep_return = np.zeros(num_envs, np.float64)
        self._ep_length = np.zeros(num_envs, np.int64)

    def __len__(self) -> int:
        return self.num_envs

    def restart_episodes(self) -> None:
        """Every env starts a new episode (after a reset of the whole group)."""
        self._ep_return[:] = 0.0
        self._ep_length[:] = 0

    def count_step(self, reward: np.ndarray) -> None:
        self._ep_return += reward
        self._ep_length += 1

    def record_ends(self, ended: np.ndarray, cut: np.ndarray, final_obs: np.ndarray, info: Mapping[str, Any]) -> None:
        """Record the episodes of envs ``ended`` (indices): their return and length, the ``info_keys`` numbers of
        ``info`` (arrays over the group), and the final observation of those a time limit cut (``cut``: a mask over
        the group), copied since the backend may reuse its buffer."""
        for i in ended:
            self.finished_episodes.append((float(self._ep_return[i]), int(self._ep_length[i]), int(i)))
            extras = {k: float(np.asarray(info[k])[i]) for k in self.info_keys if k in info}
            if extras:
                self.episode_extras.append(extras)
            if cut[i]:
                self.truncations.append((int(i), np.array(final_obs[i])))
        self._ep_return[ended] = 0.0
        self._ep_length[ended] = 0
