"""Who is in a league: its trained members by role, and its players as the rollout workers seat them.

The roles are those of AlphaStar's league (Vinyals et al., 2019): **main agents** (the policies the league exists
to make strong), **main exploiters** (they look for the main agents' weaknesses) and **league exploiters** (they
look for weaknesses of the whole league's past). A league of ``--num-policies N`` trains policies 0..M-1 as main
agents, then ``--league-main-exploiters`` main exploiters, then ``--league-league-exploiters`` league exploiters.

A **player** is one fixed opponent: a member as it is now (its name, ``main_0``), or one of its frozen snapshots
(``main_0@150``, the member at policy version 150). The rollout workers seat acting policies: the trained ones
(``0..N-1``), then each member's ``--self-play-snapshots`` blocks in turn (:func:`snapshot_owners`); which version a
block holds changes when the member takes a new snapshot, and the learners report it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from daskrl.config.options import PolicyConfig
from daskrl.sampling.policies.policy_map import snapshot_owners


class Role(str, Enum):
    MAIN = "main"
    MAIN_EXPLOITER = "main_exploiter"
    LEAGUE_EXPLOITER = "league_exploiter"


@dataclass(frozen=True)
class Member:
    """A trained policy of the league: its policy index, role and name (``<role>_<i>``, i counting within the role)."""

    policy: int
    role: Role
    name: str


def league_members(policies: PolicyConfig) -> list[Member]:
    """The league's members, by policy index (see the module docstring for the order of the roles)."""
    exploiters = [Role.MAIN_EXPLOITER] * policies.league_main_exploiters \
        + [Role.LEAGUE_EXPLOITER] * policies.league_league_exploiters
    roles = [Role.MAIN] * (policies.num_policies - len(exploiters)) + exploiters
    return [Member(k, role, f"{role.value}_{roles[:k].count(role)}") for k, role in enumerate(roles)]


class Players:
    """The acting policies of a league run as players: a name for each acting id, given the versions each member's
    snapshot blocks hold now."""

    def __init__(self, members: Sequence[Member], policies: PolicyConfig) -> None:
        self.members = list(members)
        self.owners = snapshot_owners(policies)  # acting id num_policies + j: a snapshot of member owners[j]

    @property
    def acting(self) -> int:
        """How many acting policies the rollout workers seat: the members, then every snapshot block."""
        return len(self.members) + len(self.owners)

    def member_of(self, acting: int) -> Member:
        """The member acting policy ``acting`` is (a trained one), or is a snapshot of."""
        n = len(self.members)
        return self.members[acting if acting < n else self.owners[acting - n]]

    def name(self, acting: int, version: int) -> str:
        """The player acting policy ``acting`` is when it acts with policy version ``version``: a member by its name,
        a snapshot by its member's name and the version it holds."""
        member = self.member_of(acting)
        return member.name if acting < len(self.members) else f"{member.name}@{version}"

    def names(self, block_versions: Sequence[Sequence[int]]) -> list[str]:
        """Every acting policy's player name, given each member's snapshot blocks' versions (a learner's
        ``snapshot_versions``; the blocks of a member whose learner has not reported yet hold its initial weights,
        published as version 1)."""
        n, seen = len(self.members), [0] * len(self.members)
        out = [m.name for m in self.members]
        for j, owner in enumerate(self.owners):
            versions = block_versions[owner]
            out.append(self.name(n + j, versions[seen[owner]] if seen[owner] < len(versions) else 1))
            seen[owner] += 1
        return out
