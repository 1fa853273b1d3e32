"""--record-dataset: whole episodes cut out of the slots a rollout worker fills, for a dataset the driver writes
(:mod:`daskrl.monitor.outputs.dataset_file`).

A slot holds ``rollout`` steps of each env of one split, and an episode may begin in one slot and end several slots
later. The recorder keeps, per env, the pieces of its episode so far; when the episode ends, it joins them with the
episode's real final observation, which the env group keeps for it (once an episode ends, the slot holds the next
episode's first observation). The pieces are copied once per filled slot, not per step, so recording costs a cheap
env a few percent of its sampling. An env that raised is rebuilt and its cut episode is dropped, as it is from the
statistics. Each env records at most its quota of episodes, its first ones (``daskrl record --episodes N``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

#: one episode as it travels to the driver: observations (its steps' and the final one), actions, rewards,
#: terminations, truncations, each an array over the episode's steps
RecordedEpisode = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class EpisodeRecorder:
    """See the module docstring. The rollout worker tells it each step taken, each env that raised and each slot
    filled; :meth:`news` hands the finished episodes over."""

    def __init__(self, groups: Sequence[Any], quotas: Sequence[int]) -> None:
        """``groups``: the splits' env groups, which keep their envs' final observations from now on; ``quotas``:
        the episodes each env of the worker records, in split order (-1: every one)."""
        self.groups = list(groups)
        widths = [group.num_envs for group in self.groups]
        starts = np.cumsum([0, *widths])
        self.left = [list(quotas[starts[s]:starts[s + 1]]) for s in range(len(widths))]  # episodes still to record
        self.pieces: list[list[list[tuple]]] = [[[] for _ in range(w)] for w in widths]  # each env's open episode
        self.finals: list[dict[tuple[int, int], np.ndarray]] = [{} for _ in widths]  # (step, env) -> final obs
        self.failed: list[set[tuple[int, int]]] = [set() for _ in widths]  # (step, env) where an env raised
        self.finished: list[RecordedEpisode] = []
        self.dropped = 0  # episodes an env's failure cut short
        for group in self.groups:
            group.recorded_finals = []

    def step_taken(self, s: int, t: int) -> None:
        """Split ``s`` took its step ``t`` of the slot: keep the final observations of the episodes that ended."""
        group = self.groups[s]
        if group.recorded_finals:
            for env, obs in group.recorded_finals:
                self.finals[s][(t, env)] = obs
            group.recorded_finals.clear()

    def env_failed(self, s: int, t: int, env: int) -> None:
        """Env ``env`` of split ``s`` raised at step ``t`` and was rebuilt: the episode that ended there is dropped."""
        self.failed[s].add((t, env))

    def slot_filled(self, s: int, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, terminated: np.ndarray,
                    truncated: np.ndarray) -> None:
        """Split ``s`` filled a slot: ``obs`` [T + 1, envs, ...] (the last row starts the next slot), the others
        [T, envs, ...]. Each env's steps join its open episode; the episodes that ended are finished."""
        ended = terminated | truncated
        steps = len(rewards)
        arrays = (obs, actions, rewards, terminated, truncated)
        for env, left in enumerate(self.left[s]):
            if left == 0:
                continue
            start = 0
            for end in np.flatnonzero(ended[:, env]):
                self.pieces[s][env].append(tuple(a[start:end + 1, env].copy() for a in arrays))
                self._finish(s, env, int(end))
                start = end + 1
                if self.left[s][env] == 0:
                    break
            else:
                if start < steps:
                    self.pieces[s][env].append(tuple(a[start:steps, env].copy() for a in arrays))
        self.finals[s].clear()
        self.failed[s].clear()

    def _finish(self, s: int, env: int, step: int) -> None:
        """Env ``env``'s episode ended at ``step`` of the slot: join its pieces with its final observation (dropped
        when the env raised there)."""
        pieces, self.pieces[s][env] = self.pieces[s][env], []
        final = self.finals[s].get((step, env))
        if final is None or (step, env) in self.failed[s]:
            self.dropped += 1
            return
        observations = np.concatenate([*(p[0] for p in pieces), final[None]])
        self.finished.append((observations, *(np.concatenate([p[k] for p in pieces]) for k in range(1, 5))))
        if self.left[s][env] > 0:
            self.left[s][env] -= 1

    def news(self) -> dict[str, Any]:
        """The episodes finished since the last call (and how many were dropped so far), for the driver."""
        finished, self.finished = self.finished, []
        return {"dataset_episodes": finished, "dataset_dropped": self.dropped}


class NoEpisodeRecorder:
    """A run that records no dataset: the same calls, doing nothing."""

    def step_taken(self, s: int, t: int) -> None:
        pass

    def env_failed(self, s: int, t: int, env: int) -> None:
        pass

    def slot_filled(self, s: int, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, terminated: np.ndarray,
                    truncated: np.ndarray) -> None:
        pass

    def news(self) -> dict[str, Any]:
        return {}


def episode_recorder(groups: Sequence[Any], quotas: Sequence[int] | None) -> EpisodeRecorder | NoEpisodeRecorder:
    """The recorder a rollout worker's setup asks for (``quotas`` None: no dataset is recorded)."""
    return NoEpisodeRecorder() if quotas is None else EpisodeRecorder(groups, quotas)
