"""Each policy's own observation and action spaces, when a multi-agent env's agents differ.

A policy's network must fit every agent it plays, so where agents' spaces differ (daskrl/envs/layouts/agent_spaces.py) the
mapping is asked, before any process starts, which agents each policy can get over many episodes; each policy's
spaces are then those of its agents, and the learners and samplers build its network from them. The trajectory
slots keep the union layout: a policy reads the first ``obs_len`` of an observation row and writes the first
``act_dim`` of a Box action row (:meth:`EnvSpaces.cut_for`).
"""

from __future__ import annotations

from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.errors import ConfigError
from daskrl.sampling.policies.policy_map import _checked, resolve_mapping

#: episode indices the mapping is asked about (per agent) to learn which agents each policy can get
CHECKED_EPISODES = 256


def describe(spaces: EnvSpaces) -> str:
    """An agent's spaces in a few words, for messages."""
    action = f"Discrete({spaces.num_actions})" if spaces.action_kind == "discrete" \
        else f"{spaces.action_kind} actions {spaces.action_shape}"
    return f"observations {spaces.obs_shape}, {action}"


def policy_spaces(spec: str, num_policies: int, spaces: EnvSpaces, snapshots: int = 0) -> tuple[EnvSpaces, ...]:
    """The spaces of each trained policy (self-play snapshots act with policy 0's); every policy gets ``spaces``
    when the agents share them. Raises a one-line :class:`ConfigError` when a policy would play agents of
    different spaces, or no agent at all."""
    if not spaces.agent_spaces:
        return (spaces,) * num_policies
    ids, own = spaces.agent_ids, spaces.agent_spaces
    kind, fn = resolve_mapping(spec, num_policies, snapshots)
    if fn is None:
        a, b = next((ids[0], ids[i]) for i in range(1, len(ids)) if own[i] != own[0])
        raise ConfigError([
            f"--policy-mapping {spec} puts one policy on agents with different spaces: {a!r} has "
            f"{describe(own[ids.index(a)])} and {b!r} {describe(own[ids.index(b)])}; give each policy agents of "
            "one kind with a module:function mapping, (agent_id, episode_index) -> policy"])
    first: dict[int, int] = {}  # policy -> the first agent (position) it got
    for episode in range(CHECKED_EPISODES):
        for position, agent in enumerate(ids):
            policy = _checked(fn, spec, num_policies + snapshots, agent, episode)
            policy = 0 if policy >= num_policies else policy  # a snapshot acts with policy 0's network
            seen = first.setdefault(policy, position)
            if own[seen] != own[position]:
                raise ConfigError([
                    f"--policy-mapping {spec!r} gives policy {policy} agents with different spaces: {ids[seen]!r} "
                    f"({describe(own[seen])}) and {agent!r} ({describe(own[position])}, episode {episode}); one "
                    "policy's network must fit every agent it plays"])
    missing = [k for k in range(num_policies) if k not in first]
    if missing:
        raise ConfigError([
            f"--policy-mapping {spec!r} gives policy {missing[0]} no agent in episodes 0..{CHECKED_EPISODES - 1}, "
            "so its spaces (this env's agents' differ) are unknown; map an agent to every policy or lower "
            "--num-policies"])
    return tuple(own[first[k]] for k in range(num_policies))
