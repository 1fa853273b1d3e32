"""Small real envs whose right answer is known in closed form, for checking what the learner learns."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class ConstantRewardEnv(gym.Env):
    """Reward 1 at every step, forever, but cut by a time limit every ``limit`` steps (truncated, never terminated).

    The observation is the fraction of the limit used, ``[t / limit]``, so a value function *can* tell the end is
    near. The time limit is no part of the task: the true value of every state is ``1 / (1 - gamma)``. A learner that
    treats the cut as a death learns ``(1 - gamma ** (limit - t)) / (1 - gamma)`` instead, which falls to 1 at the end.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, limit: int = 20, render_mode: str | None = None) -> None:
        self.limit = int(limit)
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._t = 0

    def _obs(self) -> np.ndarray:
        return np.array([self._t / self.limit], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self._t += 1
        return self._obs(), 1.0, False, self._t >= self.limit, {}


def constant_reward(limit: int = 20, render_mode: str | None = None) -> gym.Env:
    return ConstantRewardEnv(limit, render_mode)


class InfoReportingEnv(ConstantRewardEnv):
    """:class:`ConstantRewardEnv` that reports numbers in its info dict: ``episode_extra_stats`` (Sample Factory's
    convention) at an episode's end with ``{"episode": n}`` (the count of episodes this env finished, 1, 2, ...),
    and ``distance`` (``t / 10``) at every step."""

    def __init__(self, limit: int = 20, render_mode: str | None = None) -> None:
        super().__init__(limit, render_mode)
        self.episodes = 0

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        obs, reward, terminated, truncated, _ = super().step(action)
        info: dict[str, Any] = {"distance": self._t / 10}
        if truncated:
            self.episodes += 1
            info["episode_extra_stats"] = {"episode": self.episodes}
        return obs, reward, terminated, truncated, info


def info_reporting(limit: int = 20, render_mode: str | None = None) -> gym.Env:
    return InfoReportingEnv(limit, render_mode)


class BrokenCameraEnv(ConstantRewardEnv):
    """:class:`ConstantRewardEnv` (return = ``limit``, whatever the policy does) whose ``rgb_array`` camera works
    once per instance and then raises: the check before a run passes, every video recorded during it fails."""

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, limit: int = 20, render_mode: str | None = None) -> None:
        super().__init__(limit, render_mode)
        self.renders = 0

    def render(self) -> np.ndarray:
        self.renders += 1
        if self.renders > 1:
            raise RuntimeError("camera unplugged")
        return np.zeros((8, 8, 3), np.uint8)


def broken_camera(limit: int = 20, render_mode: str | None = None) -> gym.Env:
    return BrokenCameraEnv(limit, render_mode)


class CueEnv(gym.Env):
    """Dict observations where one key carries everything: reward 1 when the action equals the cue, 0 otherwise,
    over ``length`` steps (then truncated), so the best return is ``length`` and a policy blind to the cue gets
    ``length / n`` on average.

    Keys: ``cue`` (Discrete(n + 1): the cue, or ``n`` = hidden), ``clock`` (Box [t / length]), ``view`` (a 3x3x1
    uint8 image, every pixel ``10 * t``), ``note`` (Text: no fixed shape, dropped by daskrl), and with
    ``masked=True`` ``action_mask`` (MultiBinary(n): the cue and one other action allowed; a forbidden action
    raises). With ``memory=True`` the cue is shown at the first step only (a recurrent policy's task).
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, n: int = 3, length: int = 8, memory: bool = False, masked: bool = False,
                 render_mode: str | None = None) -> None:
        self.n, self.length, self.memory, self.masked = int(n), int(length), bool(memory), bool(masked)
        self.render_mode = render_mode
        spaces: dict[str, gym.Space] = {
            "cue": gym.spaces.Discrete(self.n + 1),
            "clock": gym.spaces.Box(0.0, 1.0, (1,), np.float32),
            "view": gym.spaces.Box(0, 255, (3, 3, 1), np.uint8),
            "note": gym.spaces.Text(8),
        }
        if self.masked:
            spaces["action_mask"] = gym.spaces.MultiBinary(self.n)
        self.observation_space = gym.spaces.Dict(spaces)
        self.action_space = gym.spaces.Discrete(self.n)
        self._t = 0
        self._cue = 0
        self._mask = np.ones(self.n, np.int8)

    def _obs(self) -> dict[str, Any]:
        shown = self._cue if not self.memory or self._t == 0 else self.n
        obs: dict[str, Any] = {"cue": shown, "clock": np.array([self._t / self.length], np.float32),
                               "view": np.full((3, 3, 1), 10 * self._t, np.uint8), "note": "cue"}
        if self.masked:
            self._mask = np.zeros(self.n, np.int8)
            other = (self._cue + 1 + int(self.np_random.integers(self.n - 1))) % self.n
            self._mask[[self._cue, other]] = 1
            obs["action_mask"] = self._mask.copy()
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        self._t = 0
        self._cue = int(self.np_random.integers(self.n))
        return self._obs(), {}

    def step(self, action: int) -> tuple[dict, float, bool, bool, dict]:
        if self.masked and not self._mask[int(action)]:
            raise ValueError(f"action {int(action)} is masked out (mask {self._mask.tolist()})")
        reward = float(int(action) == self._cue)
        self._t += 1
        return self._obs(), reward, False, self._t >= self.length, {}


def cue(n: int = 3, length: int = 8, memory: bool = False, masked: bool = False,
        render_mode: str | None = None) -> gym.Env:
    return CueEnv(n, length, memory, masked, render_mode)


class StaggeredAgentsEnv:
    """A multi-agent env in PettingZoo's Parallel API (duck-typed: no pettingzoo needed) whose answers are known:
    agent ``k`` (of ``len(lengths)``) acts ``lengths[k]`` steps and then leaves, terminated (the last agent is
    truncated instead, a time limit, when ``truncate_last``). At its step ``t`` (1, 2, ...) it gets reward
    ``100 * (k + 1) + t``, so its return is ``100 * (k + 1) * L + L * (L + 1) / 2``; its observation is ``[k, t]``
    and its last info ``{"steps": L}`` (with ``dict_obs``, ``{"state": [k, t], "action_mask": all ones}``). Strict
    like a real env: an action for an agent that is not there, or none for one that is, raises; so does
    ``fail_action`` (a way to make one env fail on purpose)."""

    metadata: dict[str, Any] = {"name": "staggered"}

    def __init__(self, lengths: tuple[int, ...] = (2, 3, 4), truncate_last: bool = True, fail_action: int = -1,
                 dict_obs: bool = False, render_mode: str | None = None) -> None:
        self.lengths = tuple(int(n) for n in lengths)
        self.truncate_last, self.fail_action, self.dict_obs = bool(truncate_last), int(fail_action), bool(dict_obs)
        self.render_mode = render_mode
        self.possible_agents = [f"a{k}" for k in range(len(self.lengths))]
        self.agents: list[str] = []
        state = gym.spaces.Box(0.0, 1000.0, (2,), np.float32)
        self._obs_space: gym.Space = gym.spaces.Dict({"state": state, "action_mask": gym.spaces.MultiBinary(3)}) \
            if self.dict_obs else state
        self._act_space = gym.spaces.Discrete(3)
        self._t = 0
        self.resets = 0

    def observation_space(self, agent: str) -> gym.Space:
        return self._obs_space

    def action_space(self, agent: str) -> gym.Space:
        return self._act_space

    def _obs(self, agent: str) -> Any:
        state = np.array([self.possible_agents.index(agent), self._t], np.float32)
        return {"state": state, "action_mask": np.ones(3, np.int8)} if self.dict_obs else state

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.resets += 1
        self._t = 0
        self.agents = list(self.possible_agents)
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict) -> tuple[dict, dict, dict, dict, dict]:
        if set(actions) != set(self.agents):
            raise ValueError(f"actions for {sorted(actions)}, but the agents are {self.agents}")
        if any(int(a) == self.fail_action for a in actions.values()):
            raise RuntimeError(f"action {self.fail_action} breaks this env")
        self._t += 1
        obs, rewards, terms, truncs, infos = {}, {}, {}, {}, {}
        for agent in self.agents:
            k = self.possible_agents.index(agent)
            done = self._t >= self.lengths[k]
            last = k == len(self.lengths) - 1
            obs[agent] = self._obs(agent)
            rewards[agent] = float(100 * (k + 1) + self._t)
            terms[agent] = done and not (last and self.truncate_last)
            truncs[agent] = done and last and self.truncate_last
            infos[agent] = {"steps": self._t} if done else {}
        self.agents = [a for a in self.agents if not (terms[a] or truncs[a])]
        return obs, rewards, terms, truncs, infos

    def close(self) -> None:
        pass


def staggered(lengths: tuple[int, ...] = (2, 3, 4), truncate_last: bool = True, fail_action: int = -1,
              dict_obs: bool = False, render_mode: str | None = None) -> StaggeredAgentsEnv:
    return StaggeredAgentsEnv(lengths, truncate_last, fail_action, dict_obs, render_mode)


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
        self.moves, self.truncate, self.render_mode = int(moves), bool(truncate), render_mode
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


class TwinCartPoles:
    """Two agents in PettingZoo's Parallel API (duck-typed), each balancing its own CartPole: a multi-agent env
    whose agents finish at different times and that a working multi-agent path learns as fast as CartPole."""

    metadata: dict[str, Any] = {"name": "twin_cartpoles"}

    def __init__(self, render_mode: str | None = None) -> None:
        self.possible_agents = ["left", "right"]
        self.poles = {a: gym.make("CartPole-v1") for a in self.possible_agents}
        self.agents: list[str] = []
        self.render_mode = render_mode

    def observation_space(self, agent: str) -> gym.Space:
        return self.poles[agent].observation_space

    def action_space(self, agent: str) -> gym.Space:
        return self.poles[agent].action_space

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.agents = list(self.possible_agents)
        obs = {}
        for i, agent in enumerate(self.agents):
            obs[agent], _ = self.poles[agent].reset(seed=None if seed is None else seed + i)
        return obs, {a: {} for a in self.agents}

    def step(self, actions: dict) -> tuple[dict, dict, dict, dict, dict]:
        out: tuple[dict, dict, dict, dict, dict] = ({}, {}, {}, {}, {})
        for agent in self.agents:
            obs, reward, terminated, truncated, _ = self.poles[agent].step(int(actions[agent]))
            for field, value in zip(out, (obs, reward, terminated, truncated, {}), strict=True):
                field[agent] = value
        self.agents = [a for a in self.agents if not (out[2][a] or out[3][a])]
        return out

    def close(self) -> None:
        for pole in self.poles.values():
            pole.close()


def twin_cartpoles(render_mode: str | None = None) -> TwinCartPoles:
    return TwinCartPoles(render_mode)


class RaceToTenEnv(TurnGame):
    """A two-player zero-sum game: players take turns adding 1 or 2 to a count from 0; whoever brings it to 10
    wins (+1, the other -1). It has a known perfect strategy (leave the count at 1, 4 or 7), random play wins half
    the games, and a policy learns to beat weaker past versions of itself within seconds: the self-play tests' game.
    The observation is the count, one-hot (11 floats)."""

    metadata: dict[str, Any] = {"name": "race_to_ten"}

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


def race_to_ten(render_mode: str | None = None) -> RaceToTenEnv:
    return RaceToTenEnv(render_mode)
