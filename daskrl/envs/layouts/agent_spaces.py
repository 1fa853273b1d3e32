"""Recognizing multi-agent (PettingZoo) envs and reading the spaces their agents share.

Apart from daskrl/envs/multi_agent.py (which steps them) so the registry can tell them from gymnasium envs without
importing the env group, which imports the registry.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from daskrl.envs.layouts.spaces import EnvSpaces
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
    """The spaces of the agents in ``possible_agents``, with the agent count and ids. Agents may differ only where
    a slot row can hold every one of them: flat float Box observations (any length) and all-Discrete or all-1-D-Box
    actions; the result is then their union (the slot layout) with each agent's own in ``agent_spaces``."""
    agents = list(env.possible_agents)
    if not agents:
        raise EnvError(f"multi-agent env {type(env).__name__} has no possible_agents")
    ids = tuple(str(a) for a in agents)
    own = [(env.observation_space(a), env.action_space(a)) for a in agents]
    first = own[0]
    if all(o == first[0] and a == first[1] for o, a in own[1:]):
        spaces = EnvSpaces.from_spaces(first[0], first[1], obs_keys, action_mask_key)
        return dataclasses.replace(spaces, num_agents=len(agents), agent_ids=ids)
    if obs_keys or action_mask_key:
        raise EnvError("--obs-keys and --action-mask-key apply to Dict observations; agents with different spaces "
                       f"need flat Box observations ({_name(env)})")
    for i, (obs, act) in enumerate(own):
        reason = _unpaddable(obs, act, first[1])
        if reason:
            raise EnvError(
                f"the agents of {_name(env)} have different spaces that cannot share one slot row: agent {ids[i]!r} "
                f"has {obs} / {act}, agent {ids[0]!r} {first[0]} / {first[1]} ({reason}); pad them to one space in "
                "a wrapper, e.g. supersuit's pad_observations_v0 and pad_action_space_v0")
    per_agent = tuple(dataclasses.replace(EnvSpaces.from_spaces(o, a), num_agents=1) for o, a in own)
    widest = max(per_agent, key=lambda s: s.obs_dim)
    union = dataclasses.replace(widest, obs_shape=(max(s.obs_dim for s in per_agent),), obs_dtype="float32")
    if union.action_kind == "discrete":
        union = dataclasses.replace(union, num_actions=max(int(s.num_actions or 0) for s in per_agent))
    else:
        big = max(per_agent, key=lambda s: s.action_dim)
        union = dataclasses.replace(union, action_shape=big.action_shape, action_dtype=big.action_dtype,
                                    low=big.low, high=big.high)  # bounds unused: each agent clips to its own
    return dataclasses.replace(union, num_agents=len(agents), agent_ids=ids, agent_spaces=per_agent)


def _unpaddable(obs: Any, act: Any, first_act: Any) -> str:
    """Why this agent's spaces cannot be padded into a union row ('' when they can)."""
    import gymnasium as gym
    import numpy as np

    if not (isinstance(obs, gym.spaces.Box) and len(obs.shape) == 1 and np.issubdtype(obs.dtype, np.floating)):
        return "differing observation spaces must all be flat 1-D float Boxes"
    kinds = {type(act), type(first_act)}
    if kinds == {gym.spaces.Discrete}:
        return "" if int(act.start) == 0 else "Discrete actions must start at 0"
    if kinds == {gym.spaces.Box} and len(act.shape) == 1:
        return ""
    return "differing action spaces must be all Discrete or all 1-D Box"


def _name(env: Any) -> str:
    metadata = getattr(env, "metadata", None)
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return str(name or type(env).__name__)


def seed_multi_agent(env: Any, seed: int) -> None:
    """Seed through the first ``reset(seed=...)`` (PettingZoo's only way), and each agent's action space."""
    env.reset(seed=int(seed))
    for i, agent in enumerate(env.possible_agents):
        env.action_space(agent).seed(int(seed) + i)
