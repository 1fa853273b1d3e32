"""Multi-agent envs (PettingZoo's Parallel and AEC APIs) as a group of agent columns.

A rollout worker writes one row per column of its trajectory slot at every step. Here a column is one (env, agent)
pair: column ``c`` is env ``c // A``, agent ``possible_agents[c % A]``, so every agent gets its own trajectory and
a policy can be assigned per column. Agents that are not acting (finished early, or waiting for their turn in a
turn-based game) are marked in :attr:`MultiAgentGroup.active`; their rows hold zeros and their actions are ignored.

Reward rule, the same for both APIs: a column's reward rows from a step at which it acts up to (not including) its
next acting step, and the terminated/truncated flags among them, belong to that acting step's action. In a parallel
env every live agent acts every step, so that is just its own row; in a turn-based game the rewards other agents'
moves gave an agent are credited on the row of the step after which it is about to act again (or on which it ends).
The learner moves a turn-based player's own rows together, with those credits, before V-trace
(:mod:`daskrl.learning.turns`); the waiting rows' zero observations are never bootstrapped from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from daskrl.envs.layouts.agent_spaces import is_multi_agent, is_turn_based, multi_agent_spaces, seed_multi_agent
from daskrl.envs.layouts.dict_obs import pack_into, record_size
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.envs.owned_processes import close_all
from daskrl.envs.registry import make_env
from daskrl.envs.vector import EnvFailure, EpisodeRecords, build_seeded, count_failure
from daskrl.errors import EnvError

__all__ = ["MultiAgentGroup", "is_multi_agent", "is_turn_based", "multi_agent_spaces", "seed_multi_agent"]


def _episode_numbers(info: Any, info_keys: Sequence[str]) -> dict[str, float]:
    """What EnvGroup keeps from an episode's last info: ``episode_extra_stats`` and the asked-for keys, numbers only."""
    if not info:
        return {}
    extras = dict(info.get("episode_extra_stats") or {})
    extras.update({k: info[k] for k in info_keys if k in info})
    return {k: float(v) for k, v in extras.items()
            if isinstance(v, (int, float, np.number, np.ndarray)) and np.size(v) == 1}


class MultiAgentGroup(EpisodeRecords):
    """Multi-agent envs of one rollout-worker split, with :class:`~daskrl.envs.vector.EnvGroup`'s interface over
    agent columns (see the module docstring). ``num_envs`` counts columns; ``envs`` the env instances.

    Per step, per column: ``active`` (which columns act at the next step), its episode's bookkeeping
    (``finished_episodes`` as ``(return, length in its own acting steps, column)``, ``truncations`` as
    ``(column, final obs)``), and per env ``new_episodes`` / ``episode_index`` (to map agents to policies anew per
    episode). An env whose agents are all done resets in the same step, like EnvGroup's envs.
    """

    def __init__(self, envs: Sequence[Any], spaces: EnvSpaces | None = None, rebuild: Any = None,
                 max_consecutive_failures: int = 0, info_keys: Sequence[str] = ()) -> None:
        """``rebuild(i)`` makes a fresh env ``i``; with it, an env that raises is rebuilt and the episodes of its
        agents cut short (``truncated``), and only ``max_consecutive_failures`` failures in a row of one env raise."""
        if not envs:
            raise ValueError("MultiAgentGroup needs at least one env")
        self.envs = list(envs)
        self._agents = list(self.envs[0].possible_agents)  # the env's own ids (dict keys), in column order
        if spaces is None:
            spaces = multi_agent_spaces(self.envs[0])
        elif not spaces.agent_ids:
            spaces = dataclasses.replace(spaces, num_agents=len(self._agents),
                                         agent_ids=tuple(str(a) for a in self._agents))
        self.spaces = spaces
        if [str(a) for a in self._agents] != list(self.spaces.agent_ids):
            raise EnvError(f"the env's agents {self._agents} are not the probed ones {list(self.spaces.agent_ids)}")
        self._slot = {agent: k for k, agent in enumerate(self._agents)}
        self.num_agents = len(self._agents)
        self.num_envs = len(self.envs) * self.num_agents
        self.agent_ids = [str(a) for a in self._agents] * len(self.envs)
        self.turn_based = is_turn_based(self.envs[0])
        self.rebuild = rebuild
        self.max_consecutive_failures = max_consecutive_failures
        self.failures: list[EnvFailure] = []
        self._consecutive = [0] * len(self.envs)
        self.info_keys = tuple(info_keys)
        self.finished_episodes: list[tuple[float, int, int]] = []  # type: ignore[assignment]
        self.episode_extras: list[dict[str, float]] = []
        self.truncations: list[tuple[int, np.ndarray]] = []
        self.active = np.zeros(self.num_envs, bool)
        self.new_episodes: list[int] = []
        self.episode_index = [-1] * len(self.envs)  # the first episode is 0
        self._alive = [False] * self.num_envs  # in the current episode and not yet ended (acting or waiting)
        self._ep_return = [0.0] * self.num_envs
        self._ep_length = [0] * self.num_envs
        self._keys = self.spaces.obs_keys if self.spaces.is_dict else ()
        self._phase = "reset"
        kind = self.spaces.action_kind
        self._discrete, self._box = kind == "discrete", kind == "box"
        self._to_env = self.spaces.action_layout.to_env if kind == "composite" else None  # Tuple or Dict actions
        # agents with different spaces: each one's observation fills the first obs_len of its row (zeros after),
        # and takes the first act_dim of its Box action row, clipped to its own bounds
        own = self.spaces.agent_spaces
        self._obs_len = [a.obs_dim for a in own] if own else None
        self._act_dim = [a.action_dim for a in own] if own and self._box else None
        if self._box:
            shape, dtype = self.spaces.action_shape, np.dtype(self.spaces.action_dtype)
            self._low = np.asarray(self.spaces.low, dtype=dtype).reshape(shape)
            self._high = np.asarray(self.spaces.high, dtype=dtype).reshape(shape)
            if self._act_dim:
                self._low, self._high = (np.tile(np.stack([np.pad(np.asarray(getattr(a, side), dtype), (
                    0, shape[0] - a.action_dim)) for a in own]), (len(self.envs), 1)) for side in ("low", "high"))
            self._clipped = np.empty((self.num_envs, *shape), dtype=dtype)

    @classmethod
    def from_spec(cls, spec: str, num_envs: int, seed: int | None = None, worker_index: int = 0,
                  first_env_index: int = 0, env_kwargs: dict[str, Any] | None = None,
                  spaces: EnvSpaces | None = None, max_consecutive_failures: int = 0,
                  info_keys: Sequence[str] = ()) -> MultiAgentGroup:
        """EnvGroup.from_spec's arguments; ``num_envs`` env instances are built (seeded
        ``env_seed(seed, worker_index, first_env_index + i)``), giving ``num_envs * num_agents`` columns."""
        def build(name: str, s: int | None) -> Any:
            env = make_env(name, seed=s, env_kwargs=env_kwargs)
            if not is_multi_agent(env):
                env.close()
                raise EnvError(f"environment {spec!r} is not a multi-agent (PettingZoo) env")
            return env

        envs, rebuild = build_seeded(num_envs, spec, seed, worker_index, first_env_index, build)
        return cls(envs, spaces, rebuild if max_consecutive_failures > 0 else None, max_consecutive_failures,
                   info_keys)

    def __len__(self) -> int:
        return self.num_envs

    def pop_new_episodes(self, ended: np.ndarray | None = None) -> list[int]:
        """Return and clear the envs (indices within the group) whose episode started since the last call (a
        column's end is no env's start here: ``ended`` is not needed)."""
        started, self.new_episodes = self.new_episodes, []
        return started

    def pop_failures(self) -> list[EnvFailure]:
        failures, self.failures = self.failures, []
        return failures

    def reset(self, obs_out: np.ndarray) -> np.ndarray:
        """Start a new episode in every env; ``obs_out`` (num_envs columns) gets the first observations of the
        active columns and zeros elsewhere."""
        for e in range(len(self.envs)):
            try:
                self._start_episode(e, obs_out)
            except Exception as exc:
                self._recover(e, "reset", exc, obs_out, None, None, None)
        self._zero_inactive(obs_out)
        return obs_out

    def step(self, actions: np.ndarray, obs_out: np.ndarray, reward_out: np.ndarray, terminated_out: np.ndarray,
             truncated_out: np.ndarray) -> None:
        """Apply the active columns' actions (the others' are ignored) and write every column's row."""
        if self._discrete:
            acts: Any = list(actions)  # numpy scalars, which Discrete.contains checks fastest (see EnvGroup)
        elif self._box:
            acts = np.clip(actions, self._low, self._high, out=self._clipped)
        elif self._to_env is not None:
            acts = [self._to_env(row) for row in actions]
        else:
            acts = actions
        reward_out[:] = 0
        terminated_out[:] = False
        truncated_out[:] = False
        step_env = self._step_turn if self.turn_based else self._step_parallel
        for e in range(len(self.envs)):
            self._phase = "step"
            try:
                step_env(e, acts, obs_out, reward_out, terminated_out, truncated_out)
                self._consecutive[e] = 0
            except Exception as exc:
                self._recover(e, self._phase, exc, obs_out, reward_out, terminated_out, truncated_out)
        self._zero_inactive(obs_out)

    # ---- one env ----

    def _step_parallel(self, e: int, acts: Any, obs_out: np.ndarray, reward_out: np.ndarray,
                       terminated_out: np.ndarray, truncated_out: np.ndarray) -> None:
        env, agents, active = self.envs[e], self._agents, self.active
        lo = e * self.num_agents
        actions = {}
        dims = self._act_dim
        for k, agent in enumerate(agents):
            if active[lo + k]:
                actions[agent] = acts[lo + k] if dims is None else acts[lo + k][:dims[k]]
        obs, rewards, terms, truncs, infos = env.step(actions)
        live = set(env.agents)
        ep_return, ep_length = self._ep_return, self._ep_length
        for k, agent in enumerate(agents):
            c = lo + k
            if not active[c]:
                continue
            reward = rewards.get(agent, 0.0)
            reward_out[c] = reward
            ep_return[c] += reward
            ep_length[c] += 1
            terminated, truncated = terms.get(agent, False), truncs.get(agent, False)
            if terminated or truncated or agent not in live:
                terminated = terminated or not truncated  # left without a flag: gone for good
                self._end(c, terminated, truncated, obs.get(agent), infos.get(agent), terminated_out, truncated_out)
            elif self._keys:
                pack_into(obs_out[c], obs[agent], self._keys)
            elif self._obs_len:
                self._pad_into(obs_out[c], obs[agent], k)
            else:
                obs_out[c] = obs[agent]
        if not live or not active[lo:lo + self.num_agents].any():
            self._phase = "reset"
            self._start_episode(e, obs_out)

    def _step_turn(self, e: int, acts: Any, obs_out: np.ndarray, reward_out: np.ndarray,
                   terminated_out: np.ndarray, truncated_out: np.ndarray) -> None:
        """One move of a turn-based (AEC) env: the selected agent's action, then the dead agents' ``step(None)``
        (each ending that agent's episode) until a live agent is selected or none is left (a new episode)."""
        env, lo = self.envs[e], e * self.num_agents
        c = lo + self._slot[env.agent_selection]
        self.active[c] = False
        self._ep_length[c] += 1
        env.step(acts[c] if self._act_dim is None else acts[c][:self._act_dim[c % self.num_agents]])
        for _ in range(2 * self.num_agents + 2):  # each dead step removes an agent
            if not env.agents:
                self._phase = "reset"
                self._start_episode(e, obs_out)
                return
            agent = env.agent_selection
            c = lo + self._slot[agent]
            _, reward, terminated, truncated, info = env.last(observe=False)
            if reward:
                reward_out[c] = reward
                self._ep_return[c] += reward
            if not (terminated or truncated):
                self._clear_reward(env, agent)
                self._select(c, env.observe(agent), obs_out)
                return
            final = env.observe(agent) if truncated and not terminated else None
            self._end(c, bool(terminated), bool(truncated), final, info, terminated_out, truncated_out)
            env.step(None)
        raise EnvError(f"turn-based env {type(env).__name__} selected no live agent after {2 * self.num_agents + 2} "
                       "dead steps (each dead agent's step(None) should remove it from env.agents)")

    @staticmethod
    def _clear_reward(env: Any, agent: Any) -> None:
        """Zero the agent's unreported rewards once credited: PettingZoo envs are meant to at its next step, but
        some (tictactoe) never do, which would credit them twice."""
        cumulative = getattr(env, "_cumulative_rewards", None)
        if cumulative is not None and agent in cumulative:
            cumulative[agent] = 0

    def _select(self, c: int, obs: Any, obs_out: np.ndarray) -> None:
        self.active[c] = True
        if self._keys:
            pack_into(obs_out[c], obs, self._keys)
        elif self._obs_len:
            self._pad_into(obs_out[c], obs, c % self.num_agents)
        else:
            obs_out[c] = obs

    def _pad_into(self, row: np.ndarray, obs: Any, agent: int) -> np.ndarray:
        """An agent's observation in the first entries of its (wider) row, zeros after."""
        n = self._obs_len[agent]  # type: ignore[index]
        row[:n] = obs
        row[n:] = 0
        return row

    def _end(self, c: int, terminated: bool, truncated: bool, final_obs: Any, info: Any,
             terminated_out: np.ndarray, truncated_out: np.ndarray) -> None:
        """Column ``c``'s agent is done: flag its row, record its episode, keep a time limit's final observation."""
        terminated_out[c] = terminated
        truncated_out[c] = truncated
        self.finished_episodes.append((float(self._ep_return[c]), self._ep_length[c], c))
        if info:
            numbers = _episode_numbers(info, self.info_keys)
            if numbers:
                self.episode_extras.append(numbers)
        if truncated and not terminated and final_obs is not None:
            if self._keys:
                row = pack_into(np.zeros(record_size(self._keys), np.uint8), final_obs, self._keys)
            elif self._obs_len:
                row = self._pad_into(np.empty(self.spaces.obs_shape, np.float32), final_obs, c % self.num_agents)
            else:
                row = np.array(final_obs)  # a copy: the env may reuse its buffer
            self.truncations.append((c, row))
        self._ep_return[c], self._ep_length[c] = 0.0, 0
        self._alive[c] = False
        self.active[c] = False

    def _start_episode(self, e: int, obs_out: np.ndarray) -> None:
        """Reset env ``e`` and write the first observations of the columns that act first."""
        env, lo = self.envs[e], e * self.num_agents
        for c in range(lo, lo + self.num_agents):
            self.active[c] = False
            self._alive[c] = False
            self._ep_return[c], self._ep_length[c] = 0.0, 0
        if self.turn_based:
            env.reset()
            for agent in env.agents:
                self._alive[lo + self._slot[agent]] = True
            agent = env.agent_selection
            self._clear_reward(env, agent)
            self._select(lo + self._slot[agent], env.observe(agent), obs_out)
        else:
            obs, _ = env.reset()
            for agent in env.agents:
                c = lo + self._slot[agent]
                self._alive[c] = True
                self._select(c, obs[agent], obs_out)
        self.episode_index[e] += 1
        self.new_episodes.append(e)

    def _zero_inactive(self, obs_out: np.ndarray) -> None:
        if not self.active.all():
            obs_out[~self.active] = 0

    def _recover(self, e: int, phase: str, exc: Exception, obs_out: np.ndarray, reward_out: np.ndarray | None,
                 terminated_out: np.ndarray | None, truncated_out: np.ndarray | None) -> None:
        """Rebuild env ``e`` after it raised, cutting its agents' episodes short (``truncated``, reward 0, their
        partial returns dropped), and start a new episode; raise :class:`EnvStepError` if rebuilding is off or the
        env keeps failing. Other envs' columns are untouched."""
        lo = e * self.num_agents
        if truncated_out is not None and reward_out is not None and terminated_out is not None:
            for c in range(lo, lo + self.num_agents):
                if self._alive[c] and not terminated_out[c] and not truncated_out[c]:
                    reward_out[c] = 0.0
                    truncated_out[c] = True  # the partial episode ends here: nothing bootstraps across it
        for c in range(lo, lo + self.num_agents):
            self.active[c] = self._alive[c] = False
            self._ep_return[c], self._ep_length[c] = 0.0, 0
        while True:
            count_failure(self, e, phase, exc)
            try:
                self.envs[e].close()
            except Exception:
                pass
            try:
                self.envs[e] = self.rebuild(e)
                phase = "reset"
                self._start_episode(e, obs_out)
                return
            except Exception as again:
                exc = again

    def close(self) -> None:
        close_all(self.envs)
