"""The env groups of a rollout worker's splits, of the kind its backend and its env's agents need.

Every kind has the same interface (:class:`~daskrl.envs.vector.EnvGroup`'s: ``reset``, ``step`` into the slot's
arrays, and the :class:`~daskrl.envs.vector.EpisodeRecords` it reports through), so the rollout worker steps them
all alike once this has chosen: envpool's C++ pool (``--env-backend envpool``), gymnax's envs in one jitted JAX call
(``--env-backend jax``), one column per agent of each PettingZoo env
(:class:`~daskrl.envs.multi_agent.MultiAgentGroup`), gymnasium envs stepped in a loop, or, with a curriculum, such envs
that each play the task the run has reached (:class:`~daskrl.envs.curriculum_env.CurriculumGroup`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from daskrl.config import EnvConfig
from daskrl.envs.curriculum_env import Curriculum, CurriculumGroup
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.envs.multi_agent import MultiAgentGroup
from daskrl.envs.suites.envpool_group import EnvpoolGroup, envpool_task
from daskrl.envs.suites.jax_group import JaxGroup, check_jax_env
from daskrl.envs.vector import EnvGroup

AnyEnvGroup = EnvGroup | MultiAgentGroup | EnvpoolGroup | JaxGroup | CurriculumGroup
EnvGroupKind = type[EnvGroup] | type[MultiAgentGroup] | type[EnvpoolGroup] | type[JaxGroup]


def env_group_class(backend: str, num_agents: int) -> EnvGroupKind:
    """The group class for ``--env-backend`` and an env with ``num_agents`` agents (1: a gymnasium env)."""
    if backend == "envpool":
        return EnvpoolGroup
    if backend == "jax":
        return JaxGroup
    return MultiAgentGroup if num_agents > 1 else EnvGroup


def check_backend(backend: str, env: str, env_kwargs: dict[str, Any] | None) -> None:
    """Before a run: the backend can play this env with these options (its package installed, where it needs
    one); raises :class:`~daskrl.errors.EnvError` in one line if not."""
    if backend == "envpool":
        envpool_task(env, env_kwargs)
    elif backend == "jax":
        check_jax_env(env, env_kwargs)


def split_groups(env: EnvConfig, spaces: EnvSpaces, num_envs: int, num_splits: int, seed: int, worker_index: int,
                 failure_limit: int, info_keys: Sequence[str], task_level: int = 0) -> list[AnyEnvGroup]:
    """One group of ``num_envs / num_splits`` envs per split; env ``i`` of the worker is seeded
    ``env_seed(seed, worker_index, i)`` whichever split it is in. With a curriculum, the envs start at task
    ``task_level`` (the level the run had reached when this worker was made)."""
    per_split = num_envs // num_splits
    curriculum = Curriculum.of(env)
    if curriculum is not None:
        return [CurriculumGroup.for_split(curriculum, task_level, per_split, seed, worker_index, s * per_split, spaces,
                                          failure_limit, info_keys) for s in range(num_splits)]
    group_class = env_group_class(env.env_backend, spaces.num_agents)
    return [group_class.from_spec(env.env, per_split, seed=seed, worker_index=worker_index,
                                  first_env_index=s * per_split, env_kwargs=env.env_kwargs, spaces=spaces,
                                  max_consecutive_failures=failure_limit, info_keys=info_keys)
            for s in range(num_splits)]
