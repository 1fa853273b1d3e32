"""--record-dataset: whole episodes cut out of the slots a rollout worker fills, for a dataset the driver writes
(:mod:`daskrl.monitor.outputs.dataset_file`).

A slot holds ``rollout`` steps of each env of one split, and an episode may begin in one slot and end several slots
later. The recorder keeps, per env, the pieces of its episode so far; when the episode ends, it joins them with the
episode's real final observation, which the env group keeps for it (once an episode ends, the slot holds the next
episode's first observation). The pieces are copied once per filled slot, not per step, so recording costs a cheap
env a few percent of its sampling. An env that raised is rebuilt and its cut episode is dropped, as it is from the
statistics. Each env records at most its quota of episodes, its first ones (``daskrl record --episodes N``).

Infos come through a wrapper on each env (:class:`InfoTap`, only while a dataset is recorded), as Minari keeps them:
an array per key over the reset and every step, for the keys every step reports with a number or an array of one
shape (a key the reset does not report is NaN there), a string (kept as text; "" where the reset has none), or a
dict of such values (kept as a nested dict, the keys every step's dict has). An episode an env began after it was
rebuilt has no infos.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

#: one episode as it travels to the driver: observations (its steps' and the final one), actions, rewards,
#: terminations, truncations, each an array over the episode's steps, and its infos ({key: array over the reset and
#: the steps, or a dict of them}; None: not known whole)
RecordedEpisode = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any] | None]
#: the infos of one episode as they come: the reset's, then each step's (None first: the reset's is not known)
Infos = list[dict | None]


class InfoTap(gym.Wrapper):
    """Hands the info of every reset and step of env ``index`` of a split to the recorder, in order: ``(index,
    True, info)`` for a reset, ``(index, False, info)`` for a step."""

    def __init__(self, env: gym.Env, index: int, events: list) -> None:
        super().__init__(env)
        self.index, self.events = index, events

    def reset(self, **kwargs: Any) -> tuple[Any, dict]:
        obs, info = self.env.reset(**kwargs)
        self.events.append((self.index, True, info))
        return obs, info

    def step(self, action: Any) -> tuple:
        out = self.env.step(action)
        self.events.append((self.index, False, out[4]))
        return out


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
        self.tapped: list[list] = [[] for _ in widths]  # each split's infos as its InfoTaps hand them
        self.infos: list[list[Infos]] = [[[] for _ in range(w)] for w in widths]  # each env's open episode's
        self.ended_infos: list[list[deque[Infos | None]]] = [[deque() for _ in range(w)] for w in widths]
        for s, group in enumerate(self.groups):
            group.recorded_finals = []
            for env in range(group.num_envs):
                self._tap(s, env)

    def _tap(self, s: int, env: int) -> None:
        """Wrap env ``env`` of split ``s`` (again, after it was rebuilt) in an :class:`InfoTap`."""
        group = self.groups[s]
        group.envs[env] = InfoTap(group.envs[env], env, self.tapped[s])

    def step_taken(self, s: int, t: int) -> None:
        """Split ``s`` took its step ``t`` of the slot: keep the final observations of the episodes that ended."""
        group = self.groups[s]
        if group.recorded_finals:
            for env, obs in group.recorded_finals:
                self.finals[s][(t, env)] = obs
            group.recorded_finals.clear()
        events = self.tapped[s]
        for env, reset, info in events:
            if self.left[s][env] == 0:  # its quota is recorded: nothing of it is kept any more
                continue
            if reset:  # an episode ended at this step (or the run began): the next one starts here
                self._infos_end(s, env, info)
            else:
                self.infos[s][env].append(info)
        events.clear()

    def _infos_end(self, s: int, env: int, reset_info: dict | None) -> None:
        """Env ``env``'s episode ends: its infos wait for :meth:`_finish`; the next episode's begin with
        ``reset_info``."""
        if self.infos[s][env]:  # (none yet at the run's first reset)
            self.ended_infos[s][env].append(self.infos[s][env])
        self.infos[s][env] = [reset_info]

    def env_failed(self, s: int, t: int, env: int) -> None:
        """Env ``env`` of split ``s`` raised at step ``t`` and was rebuilt: the episode that ended there is dropped,
        and the next one's reset info is not known (the rebuilt env was reset before it was tapped again)."""
        self.failed[s].add((t, env))
        self._infos_end(s, env, None)
        self._tap(s, env)

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
        infos = self.ended_infos[s][env].popleft() if self.ended_infos[s][env] else None
        final = self.finals[s].get((step, env))
        if final is None or (step, env) in self.failed[s]:
            self.dropped += 1
            return
        observations = np.concatenate([*(p[0] for p in pieces), final[None]])
        self.finished.append((observations, *(np.concatenate([p[k] for p in pieces]) for k in range(1, 5)),
                              stacked_infos(infos)))
        if self.left[s][env] > 0:
            self.left[s][env] -= 1

    def news(self) -> dict[str, Any]:
        """The episodes finished since the last call (and how many were dropped so far), for the driver."""
        finished, self.finished = self.finished, []
        return {"dataset_episodes": finished, "dataset_dropped": self.dropped}


def stacked_infos(infos: Infos | None) -> dict[str, Any] | None:
    """An episode's infos as Minari keeps them (see the module docstring); None when they are not known whole."""
    if not infos or any(info is None for info in infos):
        return None
    return _stacked(infos[0], infos[1:])


def _stacked(reset: dict, steps: list[dict]) -> dict[str, Any]:
    """The keys every step reports, each stacked over the reset and the steps where it is an array over them (a
    nested dict: the same, one level down); others (ragged values, a key the steps report in other kinds) left out."""
    out: dict[str, Any] = {}
    for key in set(steps[0]).intersection(*steps[1:]) if steps else ():
        values = [step[key] for step in steps]
        first = reset.get(key)  # the reset may lack it (None)
        if all(isinstance(v, dict) for v in values):
            nested = _stacked(first if isinstance(first, dict) else {}, values)
            if nested:
                out[key] = nested
        elif all(isinstance(v, str) for v in values):  # text: an object array Minari writes as UTF-8
            out[key] = np.array([first if isinstance(first, str) else "", *values], dtype=object)
        elif (array := _numbers_over_episode(first, values)) is not None:
            out[key] = array
    return dict(sorted(out.items()))


def _numbers_over_episode(first: Any, values: list[Any]) -> np.ndarray | None:
    """Numbers or arrays of one shape over the reset (NaN where it reports none) and the steps, else None."""
    arrays = [np.asarray(v) for v in values]
    if arrays[0].dtype.kind not in "biuf" or any(a.dtype.kind not in "biuf" or a.shape != arrays[0].shape
                                                 for a in arrays):
        return None
    reset = np.asarray(first) if first is not None else np.full(arrays[0].shape, np.nan)
    if reset.shape != arrays[0].shape or reset.dtype.kind not in "biuf":
        return None
    return np.stack([reset, *arrays])


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
