"""Multi-agent envs in PettingZoo's Parallel API (duck-typed: no pettingzoo needed), every agent acting at each
step: agents that leave at known steps with known returns, and two CartPoles (or two hybrid-action tasks) side by
side."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from daskrl.testing.environments.single_agent_envs import HybridTargetsEnv


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
        self.truncate_last = bool(truncate_last)
        self.fail_action = int(fail_action)
        self.dict_obs = bool(dict_obs)
        self.render_mode = render_mode
        self.possible_agents = [f"a{k}" for k in range(len(self.lengths))]
        self.agents: list[str] = []
        state = gym.spaces.Box(0.0, 1000.0, (2,), np.float32)
        self._obs_space: gym.Space = state
        if self.dict_obs:
            self._obs_space = gym.spaces.Dict({"state": state, "action_mask": gym.spaces.MultiBinary(3)})
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
        obs: dict[str, Any] = {}
        rewards: dict[str, float] = {}
        terms: dict[str, bool] = {}
        truncs: dict[str, bool] = {}
        infos: dict[str, dict] = {}
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
        obs: dict[str, Any] = {}
        rewards: dict[str, float] = {}
        terms: dict[str, bool] = {}
        truncs: dict[str, bool] = {}
        for agent in self.agents:
            obs[agent], rewards[agent], terms[agent], truncs[agent], _ = self.poles[agent].step(
                self._action(actions[agent]))
        self.agents = [a for a in self.agents if not (terms[a] or truncs[a])]
        return obs, rewards, terms, truncs, {a: {} for a in obs}

    @staticmethod
    def _action(action: Any) -> Any:
        return int(action)

    def close(self) -> None:
        for pole in self.poles.values():
            pole.close()


def twin_cartpoles(render_mode: str | None = None) -> TwinCartPoles:
    return TwinCartPoles(render_mode)


class TwinHybridTargets(TwinCartPoles):
    """Two agents, each playing its own :class:`~daskrl.testing.environments.single_agent_envs.HybridTargetsEnv`: a
    multi-agent env with Tuple (or Dict) actions, which each agent's env checks it contains."""

    metadata: dict[str, Any] = {"name": "twin_hybrid_targets"}

    def __init__(self, structure: str = "tuple", render_mode: str | None = None) -> None:
        self.possible_agents = ["left", "right"]
        self.poles = {a: HybridTargetsEnv(structure=structure) for a in self.possible_agents}
        self.agents: list[str] = []
        self.render_mode = render_mode

    @staticmethod
    def _action(action: Any) -> Any:
        return action


def twin_hybrid_targets(structure: str = "tuple", render_mode: str | None = None) -> TwinHybridTargets:
    return TwinHybridTargets(structure, render_mode)

