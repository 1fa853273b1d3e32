"""The env groups of a rollout worker's splits, of the kind its backend and its env's agents need.

Every kind has the same interface (:class:`~daskrl.envs.vector.EnvGroup`'s: ``reset``, ``step`` into the slot's
arrays, and the :class:`~daskrl.envs.vector.EpisodeRecords` it reports through), so the rollout worker steps them
all alike once this has chosen: envpool's C++ pool (``--env-backend envpool``), one column per agent of each
PettingZoo env (:class:`~daskrl.envs.multi_agent.MultiAgentGroup`), or gymnasium envs stepped in a loop.
"""

from __future__ import annotations

from collections.abc import Sequence

from daskrl.config import EnvConfig
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.envs.multi_agent import MultiAgentGroup
from daskrl.envs.suites.envpool_group import EnvpoolGroup
from daskrl.envs.vector import EnvGroup

EnvGroupKind = type[EnvGroup] | type[MultiAgentGroup] | type[EnvpoolGroup]


def env_group_class(backend: str, num_agents: int) -> EnvGroupKind:
    """The group class for ``--env-backend`` and an env with ``num_agents`` agents (1: a gymnasium env)."""
    if backend == "envpool":
        return EnvpoolGroup
    return MultiAgentGroup if num_agents > 1 else EnvGroup


def split_groups(env: EnvConfig, spaces: EnvSpaces, num_envs: int, num_splits: int, seed: int, worker_index: int,
                 failure_limit: int, info_keys: Sequence[str]) -> list[EnvGroup | MultiAgentGroup | EnvpoolGroup]:
    """One group of ``num_envs / num_splits`` envs per split; env ``i`` of the worker is seeded
    ``env_seed(seed, worker_index, i)`` whichever split it is in."""
    group_class = env_group_class(env.env_backend, spaces.num_agents)
    per_split = num_envs // num_splits
    return [group_class.from_spec(env.env, per_split, seed=seed, worker_index=worker_index,
                                  first_env_index=s * per_split, env_kwargs=env.env_kwargs, spaces=spaces,
                                  max_consecutive_failures=failure_limit, info_keys=info_keys)
            for s in range(num_splits)]
