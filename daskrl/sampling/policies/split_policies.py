"""Who plays the columns of one rollout-worker split, and who is credited with the episodes that end there.

A run of one policy in a single-agent env is a map of one: :class:`OnePolicy` says policy 0 plays every column,
always, so acting and crediting take the same path as with several policies without asking at every step whether
there are several. With several policies, or agents that may sit steps out (a multi-agent env), a
:class:`~daskrl.sampling.policies.policy_map.PolicyMap` chooses each column's policy per episode: :class:`EnvPolicies` for
single-agent envs, :class:`AgentPolicies` for multi-agent ones, whose episodes also name their opponent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import EllipsisType
from typing import Any, Protocol

import numpy as np

from daskrl.sampling.episode import Episode
from daskrl.sampling.policies.policy_map import PolicyMap

#: the columns of a split one policy acts for: all of them (:data:`EVERY_COLUMN`), a run of them, or a few (numpy
#: indexes a slot field's rows with any of them)
Columns = EllipsisType | slice | np.ndarray

#: every column of a split: ``field[slot, t, EVERY_COLUMN]`` is the whole step, a per-step field (one policy
#: version per step in untagged slots) included, and ``rows[EVERY_COLUMN]`` a view of them all
EVERY_COLUMN = Ellipsis


class SplitPolicies(Protocol):
    """What acting and crediting ask about a split's columns (see the module docstring)."""

    def groups(self) -> list[tuple[int, Columns]]:
        """Each policy acting at the split's current step, with its columns."""

    def acting(self) -> np.ndarray:
        """The policy id of each column at the split's current step (-1: that agent does not act)."""

    def episodes_began(self, slot_index: int, t: int) -> None:
        """Step ``t`` of ``slot_index`` was stepped: give the envs that began an episode their policies."""

    def credit(self, finished: list[tuple[float, int, int]], version_of: Callable[[int], int]) -> list[Episode]:
        """The split's finished ``(return, length, column)`` as episodes of the policies that played them."""

    def draw_opponents_by(self, weights: Sequence[Sequence[float]] | None) -> None:
        """A league's opponent draw from the next episodes on (:meth:`PolicyMap.draw_opponents_by`)."""


class OnePolicy:
    """Policy 0 plays every column of the split, in every episode (untagged slots)."""

    def __init__(self, num_columns: int) -> None:
        self.everyone = [(0, EVERY_COLUMN)]
        self.ids = np.zeros(num_columns, np.int8)

    def groups(self) -> list[tuple[int, Columns]]:
        return self.everyone

    def acting(self) -> np.ndarray:
        return self.ids

    def episodes_began(self, slot_index: int, t: int) -> None:
        pass

    def credit(self, finished: list[tuple[float, int, int]], version_of: Callable[[int], int]) -> list[Episode]:
        return [Episode(ret, length) for ret, length, _ in finished]

    def draw_opponents_by(self, weights: Sequence[Sequence[float]] | None) -> None:
        pass  # one policy, no opponents


class EnvPolicies:
    """A :class:`PolicyMap` chooses the policy of each env (one column) per episode."""

    def __init__(self, policy_map: PolicyMap, group: Any, terminated: np.ndarray, truncated: np.ndarray,
                 active: np.ndarray | None = None) -> None:
        """``group``: the split's env group, which says whose episode began; ``terminated``, ``truncated``: the
        worker's slot fields, where episodes end; ``active``: which columns act (None: all of them)."""
        self.map, self.group, self.active = policy_map, group, active
        self.terminated, self.truncated = terminated, truncated

    def groups(self) -> list[tuple[int, Columns]]:
        return self.map.groups(self.active)

    def acting(self) -> np.ndarray:
        return self.map.acting(self.active)

    def episodes_began(self, slot_index: int, t: int) -> None:
        """The envs that began an episode get its policies (after the one that ended was credited)."""
        began = self.group.pop_new_episodes(self.terminated[slot_index, t] | self.truncated[slot_index, t])
        if len(began):
            self.map.episodes_began(began)

    def credit(self, finished: list[tuple[float, int, int]], version_of: Callable[[int], int]) -> list[Episode]:
        policies = self.map.column_policy
        return [Episode(ret, length, int(policies[column])) for ret, length, column in finished]

    def draw_opponents_by(self, weights: Sequence[Sequence[float]] | None) -> None:
        self.map.draw_opponents_by(weights)


class AgentPolicies(EnvPolicies):
    """A :class:`PolicyMap` chooses the policy of each agent of each env (a column) per episode; an agent's episode
    names the policy of the first other agent of its env and that policy's version (self-play: which snapshot it
    lost or won against), and adds the agent's return to the episode numbers (``return/<agent>``)."""

    def __init__(self, policy_map: PolicyMap, group: Any, terminated: np.ndarray, truncated: np.ndarray,
                 extras: Any) -> None:
        """``extras``: where the worker keeps finished episodes' numbers (a deque of dicts)."""
        super().__init__(policy_map, group, terminated, truncated, group.active)
        self.extras = extras

    def credit(self, finished: list[tuple[float, int, int]], version_of: Callable[[int], int]) -> list[Episode]:
        policies, agents, agent_ids = self.map.column_policy, self.map.agents_per_env, self.map.agent_ids
        out = []
        for ret, length, column in finished:
            first = column - column % agents
            other = int(policies[first + 1 if column == first else first])
            out.append(Episode(ret, length, int(policies[column]), other, version_of(other)))
            self.extras.append({f"return/{agent_ids[column]}": ret})  # each agent's own mean return
        return out


def mapped_policies(mapping: str, num_policies: int, snapshots: int, num_agents: int, groups: Sequence[Any],
                    envs_per_split: int, first_env: int, run_envs: int, terminated: np.ndarray, truncated: np.ndarray,
                    extras: Any, opponent_weights: Sequence[Sequence[float]] | None = None) -> list[SplitPolicies]:
    """Each split's :class:`EnvPolicies`, or :class:`AgentPolicies` where envs hold several agents; ``first_env``:
    the run-wide index of the worker's first env (the run's envs are numbered worker by worker, split by split);
    ``opponent_weights``: a league's draw as it stands."""
    out: list[SplitPolicies] = []
    for s, group in enumerate(groups):
        env_indices = [first_env + s * envs_per_split + i for i in range(envs_per_split)]
        if num_agents > 1:
            agents_map = PolicyMap(mapping, num_policies, group.agent_ids, env_indices, run_envs, snapshots,
                                   opponent_weights)
            out.append(AgentPolicies(agents_map, group, terminated, truncated, extras))
        else:
            envs_map = PolicyMap(mapping, num_policies, ["agent_0"] * envs_per_split, env_indices, run_envs, snapshots)
            out.append(EnvPolicies(envs_map, group, terminated, truncated))
    return out
