"""Who plays an agent's seat in a multi-agent game played in this process: a trained network, or a random player.

A player acts for some columns (agents) of one env's rows as :class:`~daskrl.envs.multi_agent.MultiAgentGroup`
lays them out (Dict observations packed into records, agents of different spaces padded to the union), and writes
their actions into the group's action rows. One player may hold several seats at once (a shared policy in a
parallel env), so a recurrent network keeps one state per column.
"""

from __future__ import annotations

from typing import Any, Protocol

import gymnasium as gym
import numpy as np
import torch

from daskrl.envs.layouts.dict_obs import unpack
from daskrl.envs.layouts.spaces import EnvSpaces


class Player(Protocol):
    """What the playing loop asks of whoever sits in a seat."""

    name: str

    def begin(self, column: int) -> None:
        """A new game starts for this column (a recurrent network's state goes back to zeros)."""

    def act(self, obs: np.ndarray, columns: np.ndarray, actions: np.ndarray) -> None:
        """Write the actions of ``columns`` (whose rows of ``obs`` are this step's observations) into ``actions``."""


class PolicyPlayer:
    """A network (a trained policy's, or a self-play snapshot's) playing in the slots' layout ``layout``: it reads
    the first entries of an observation row and writes the first entries of a Box action row where its own spaces
    are smaller than the union (agents of different spaces)."""

    def __init__(self, name: str, model: Any, layout: EnvSpaces, deterministic: bool) -> None:
        self.name, self.model, self.deterministic = name, model, deterministic
        cut = layout.cut_for(model.spaces)
        self.obs_len, self.act_dim = cut if cut else (0, 0)
        self.discrete = model.spaces.action_kind == "discrete"
        columns = max(layout.num_agents, 1)
        self.state = np.zeros((columns, model.state_size), np.float32) if model.recurrent else None

    def begin(self, column: int) -> None:
        if self.state is not None:
            self.state[column] = 0.0

    def act(self, obs: np.ndarray, columns: np.ndarray, actions: np.ndarray) -> None:
        batch = obs[columns]
        if self.obs_len:
            batch = batch[:, :self.obs_len]
        if batch.dtype == np.float64:
            batch = batch.astype(np.float32)
        state = self.state[columns] if self.state is not None else None  # a copy: written back below
        with torch.inference_mode():
            chosen, _, _ = self.model.act(np.ascontiguousarray(batch), deterministic=self.deterministic,
                                          state=state)
        if state is not None:
            self.state[columns] = state
        if self.act_dim:
            actions[columns] = 0
            actions[columns, :self.act_dim] = chosen.reshape(len(columns), -1)
        else:
            actions[columns] = chosen.reshape(actions[columns].shape)


class RandomPlayer:
    """Uniform over each agent's own action space; a Discrete action honours the action mask of a Dict observation
    (``--action-mask-key``, ``action_mask`` by default) when there is one, so it only ever plays legal moves."""

    name = "random"

    def __init__(self, env: Any, layout: EnvSpaces, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.spaces = [env.action_space(agent) for agent in env.possible_agents]
        for k, space in enumerate(self.spaces):
            space.seed(int(seed) + k)
        self.layout = layout
        self.mask_key = layout.action_mask_key if layout.is_dict else None

    def begin(self, column: int) -> None:
        return None

    def act(self, obs: np.ndarray, columns: np.ndarray, actions: np.ndarray) -> None:
        for c in columns:
            space = self.spaces[int(c) % len(self.spaces)]
            if isinstance(space, gym.spaces.Discrete):  # starting at 0, as daskrl takes them
                actions[c] = self._choose(int(space.n), obs[c])
                continue
            sample = np.asarray(space.sample())
            if sample.ndim == 1 and actions[c].shape[0] > sample.shape[0]:  # a Box smaller than the union's
                actions[c] = 0
                actions[c, :sample.shape[0]] = sample
            else:
                actions[c] = sample

    def _choose(self, n: int, row: np.ndarray) -> int:
        if self.mask_key:
            mask = unpack(row[None], self.layout.obs_keys)[self.mask_key][0].reshape(-1)[:n]
            legal = np.flatnonzero(mask > 0.5)
            if len(legal):
                return int(self.rng.choice(legal))
        return int(self.rng.integers(n))
