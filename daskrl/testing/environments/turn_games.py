"""Two-player turn-based games in PettingZoo's AEC API (duck-typed: no pettingzoo needed): what such games share
(:class:`TurnGame`), a game whose rewards cross between the players' turns, and a zero-sum game for self-play."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class TurnGame:
    """What two-player games in PettingZoo's AEC API (duck-typed: no pettingzoo needed) share: the players take
    turns (``possible_agents[0]`` first), rewards accumulate in ``_cumulative_rewards`` until the mover's next turn,
    and a finished player's only step is PettingZoo's dead step (action None), which removes it. A game defines its
    spaces, ``observe``, ``_start`` and ``_move(mover, other, action) -> (rewards, ended)``."""

    possible_agents: list[str]
    _obs_space: gym.Space
    _act_space: gym.Space
    truncate = False  # a game's end is a time limit (truncated) rather than terminated

    def observation_space(self, agent: str) -> gym.Space:
        return self._obs_space

    def action_space(self, agent: str) -> gym.Space:
        return self._act_space

    def observe(self, agent: str) -> np.ndarray:
        raise NotImplementedError

    def _start(self) -> None:
        raise NotImplementedError

    def _move(self, mover: str, other: str, action: Any) -> tuple[dict[str, float], bool]:
        raise NotImplementedError

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self.agents = list(self.possible_agents)
        self._start()
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos: dict[str, dict] = {a: {} for a in self.agents}
        self.agent_selection = self.possible_agents[0]

    def last(self, observe: bool = True) -> tuple[Any, float, bool, bool, dict]:
        a = self.agent_selection
        return (self.observe(a) if observe else None, self._cumulative_rewards[a], self.terminations[a],
                self.truncations[a], self.infos[a])

    def step(self, action: Any) -> None:
        mover = self.agent_selection
        if self.terminations[mover] or self.truncations[mover]:
            if action is not None:
                raise ValueError("a finished agent's only action is None")
            self.agents.remove(mover)
            for d in (self.rewards, self._cumulative_rewards, self.terminations, self.truncations, self.infos):
                del d[mover]
            if self.agents:
                self.agent_selection = self.agents[0]
            return
        other = self.possible_agents[1] if mover == self.possible_agents[0] else self.possible_agents[0]
        self._cumulative_rewards[mover] = 0.0
        self.rewards, ended = self._move(mover, other, action)
        if ended:
            flags = self.truncations if self.truncate else self.terminations
            for agent in self.agents:
                flags[agent] = True
        for agent, reward in self.rewards.items():
            self._cumulative_rewards[agent] += reward
        self.agent_selection = other

    def close(self) -> None:
        pass


class TakeTurnsEnv(TurnGame):
    """A two-player turn-based game ``moves`` moves long (``p0`` moves first and they alternate). A move with action
    ``a`` gives the mover 10 and the other player ``-(a + 1)``; the game's end gives ``p0`` +100 and ``p1`` -100,
    both terminated (truncated with ``truncate=True``). Each player's return thus depends on the other's moves,
    which is what crediting rewards between turns has to get right. The observation is ``[player, moves so far]``.
    The move with action ``fail_action`` raises."""

    metadata: dict[str, Any] = {"name": "take_turns"}

    def __init__(self, moves: int = 5, truncate: bool = False, fail_action: int = -1,
                 render_mode: str | None = None) -> None:
        self.moves = int(moves)
        self.truncate = bool(truncate)
        self.render_mode = render_mode
        self.fail_action = int(fail_action)
        self.possible_agents = ["p0", "p1"]
        self._obs_space = gym.spaces.Box(0.0, 1000.0, (2,), np.float32)
        self._act_space = gym.spaces.Discrete(3)
        self.agents: list[str] = []
        self._moved = 0

    def observe(self, agent: str) -> np.ndarray:
        return np.array([self.possible_agents.index(agent), self._moved], np.float32)

    def _start(self) -> None:
        self._moved = 0

    def _move(self, mover: str, other: str, action: Any) -> tuple[dict[str, float], bool]:
        if int(action) == self.fail_action:
            raise RuntimeError(f"action {self.fail_action} breaks this env")
        rewards = {mover: 10.0, other: -(int(action) + 1.0)}
        self._moved += 1
        if self._moved >= self.moves:
            rewards["p0"] += 100.0
            rewards["p1"] -= 100.0
        return rewards, self._moved >= self.moves


def take_turns(moves: int = 5, truncate: bool = False, fail_action: int = -1,
               render_mode: str | None = None) -> TakeTurnsEnv:
    return TakeTurnsEnv(moves, truncate, fail_action, render_mode)



class RaceToTenEnv(TurnGame):
    """A two-player zero-sum game: players take turns adding 1 or 2 to a count from 0; whoever brings it to 10
    wins (+1, the other -1). It has a known perfect strategy (leave the count at 1, 4 or 7), random play wins half
    the games, and a policy learns to beat weaker past versions of itself within seconds: the self-play tests' game.
    The observation is the count, one-hot (11 floats). With ``render_mode="rgb_array"`` it draws the count as a bar
    (in the colour of the player about to move), so multi-agent videos have a game that renders without pygame."""

    metadata: dict[str, Any] = {"name": "race_to_ten", "render_modes": ["rgb_array"], "render_fps": 4}

    def __init__(self, render_mode: str | None = None) -> None:
        self.render_mode = render_mode
        self.possible_agents = ["first", "second"]
        self._obs_space = gym.spaces.Box(0.0, 1.0, (11,), np.float32)
        self._act_space = gym.spaces.Discrete(2)
        self.agents: list[str] = []
        self.count = 0

    def observe(self, agent: str) -> np.ndarray:
        obs = np.zeros(11, np.float32)
        obs[min(self.count, 10)] = 1.0
        return obs

    def _start(self) -> None:
        self.count = 0

    def _move(self, mover: str, other: str, action: Any) -> tuple[dict[str, float], bool]:
        self.count += int(action) + 1
        won = self.count >= 10
        return ({mover: 1.0, other: -1.0} if won else {mover: 0.0, other: 0.0}), won

    def render(self) -> np.ndarray | None:
        """A 32x112 frame: one 10-pixel cell per count reached, in the colour of the player to move."""
        if self.render_mode != "rgb_array":
            return None
        frame = np.full((32, 112, 3), 255, np.uint8)
        first = getattr(self, "agent_selection", self.possible_agents[0]) == self.possible_agents[0]
        colour = (200, 40, 40) if first else (40, 40, 200)
        frame[8:24, 6:6 + 10 * min(self.count, 10)] = colour
        return frame


def race_to_ten(render_mode: str | None = None) -> RaceToTenEnv:
    return RaceToTenEnv(render_mode)
