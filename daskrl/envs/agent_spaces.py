"""Recognizing multi-agent (PettingZoo) envs and reading the spaces their agents share.

Apart from daskrl/envs/multi_agent.py (which steps them) so the registry can tell them from gymnasium envs without
importing the env group, which imports the registry.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from daskrl.envs.spaces import EnvSpaces
from daskrl.errors import EnvError


def is_multi_agent(obj: Any) -> bool:
    """A PettingZoo ``ParallelEnv`` or ``AECEnv``, or anything shaped like one: ``possible_agents`` and an
    ``observation_space(agent)`` method (a gymnasium env's ``observation_space`` is a Space, not a method)."""
    try:
        from pettingzoo.utils.env import AECEnv, ParallelEnv
    except ImportError:
        pass
    else:
        if isinstance(obj, (AECEnv, ParallelEnv)):
            return True
    space = getattr(type(obj), "observation_space", None)
    return hasattr(obj, "possible_agents") and callable(space) and not isinstance(space, property)


def is_turn_based(env: Any) -> bool:
    """An AEC env (one agent acts per step, the one ``agent_selection`` names)."""
    try:
        from pettingzoo.utils.env import AECEnv, ParallelEnv
    except ImportError:
        pass
    else:
        if isinstance(env, (AECEnv, ParallelEnv)):
            return isinstance(env, AECEnv)
    return callable(getattr(env, "last", None)) and callable(getattr(env, "observe", None))


def multi_agent_spaces(env: Any, obs_keys: Sequence[str] = (), action_mask_key: str = "") -> EnvSpaces:
    """The one observation and action space every agent in ``possible_agents`` shares, with the agent count and ids;
    agents with different spaces are refused (one policy network must fit every column)."""
    agents = list(env.possible_agents)
    if not agents:
        raise EnvError(f"multi-agent env {type(env).__name__} has no possible_agents")
    first = agents[0]
    obs_space, act_space = env.observation_space(first), env.action_space(first)
    for agent in agents[1:]:
        for role, mine, theirs in (("observation", env.observation_space(agent), obs_space),
                                   ("action", env.action_space(agent), act_space)):
            if mine != theirs:
                raise EnvError(
                    f"the agents of {_name(env)} need one shared {role} space: agent {agent!r} has {mine} but "
                    f"{first!r} has {theirs}; agents with different spaces are not supported yet (pad them to "
                    "one space in a wrapper, e.g. supersuit's pad_observations_v0 and pad_action_space_v0)")
    spaces = EnvSpaces.from_spaces(obs_space, act_space, obs_keys, action_mask_key)
    return dataclasses.replace(spaces, num_agents=len(agents), agent_ids=tuple(str(a) for a in agents))


def _name(env: Any) -> str:
    metadata = getattr(env, "metadata", None)
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return str(name or type(env).__name__)


def seed_multi_agent(env: Any, seed: int) -> None:
    """Seed through the first ``reset(seed=...)`` (PettingZoo's only way), and each agent's action space."""
    env.reset(seed=int(seed))
    for i, agent in enumerate(env.possible_agents):
        env.action_space(agent).seed(int(seed) + i)
