"""Who is in a league: its trained members by role, and its players as the rollout workers seat them.

The roles are those of AlphaStar's league (Vinyals et al., 2019): **main agents** (the policies the league exists
to make strong), **main exploiters** (they look for the main agents' weaknesses) and **league exploiters** (they
look for weaknesses of the whole league's past). A league of ``--num-policies N`` trains policies 0..M-1 as main
agents, then ``--league-main-exploiters`` main exploiters, then ``--league-league-exploiters`` league exploiters.

A **player** is one fixed opponent: a member as it is now (its name, ``main_0``), or one of its frozen snapshots
(``main_0@150``, the member at policy version 150). The rollout workers seat acting policies: the trained ones
(``0..N-1``), then each member's ``--self-play-snapshots`` blocks in turn (:func:`snapshot_owners`); which version a
block holds changes when the member takes a new snapshot, and the learners report it.

In a league of separate runs (``--league-peers``, :mod:`daskrl.league.peers`) each run is one member, and the slots
after its own seat the other runs' players, named after their run (``b:main_exploiter_0``,
``b:main_exploiter_0@40``).
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
    """The league's members, by policy index (see the module docstring for the order of the roles); a member run of a
    league of runs (``--league-peers``) is one member, in ``--league-role``."""
    if policies.league_peers:
        return [Member(0, Role(policies.league_role), f"{policies.league_role}_0")]
    exploiters = [Role.MAIN_EXPLOITER] * policies.league_main_exploiters \
        + [Role.LEAGUE_EXPLOITER] * policies.league_league_exploiters
    roles = [Role.MAIN] * (policies.num_policies - len(exploiters)) + exploiters
    return [Member(k, role, f"{role.value}_{roles[:k].count(role)}") for k, role in enumerate(roles)]


@dataclass(frozen=True)
class Player:
    """One opponent as the payoff table knows it: its name, its member's name (where a snapshot's first rating comes
    from), the member's role, and whether it is frozen (a snapshot) or the member as it trains now."""

    name: str
    member: str
    role: Role
    frozen: bool


@dataclass(frozen=True)
class PeerSeats:
    """What a member run of a league of runs tells the others (through the run registry): its member's name and
    role, the parameter blocks of its current policy and of its snapshots, and the versions the snapshots hold."""

    member: str
    role: Role
    blocks: tuple[dict | None, ...]
    versions: tuple[int, ...]

    def record(self) -> dict:
        return {"member": self.member, "role": self.role.value, "blocks": list(self.blocks),
                "versions": list(self.versions)}

    @classmethod
    def from_record(cls, record: dict) -> PeerSeats:
        return cls(record["member"], Role(record["role"]), tuple(record["blocks"]), tuple(record["versions"]))


class Players:
    """The acting policies of a league run as players, given the versions each member's snapshot blocks hold now and,
    in a league of runs, what the peers last told (their players are named ``<peer>:<member>`` and
    ``<peer>:<member>@<version>``)."""

    def __init__(self, members: Sequence[Member], policies: PolicyConfig) -> None:
        self.members = list(members)
        self.owners = snapshot_owners(policies)  # acting id num_policies + j: a snapshot of member owners[j]
        self.peers = list(policies.league_peers)
        self.peer_snapshots = policies.self_play_snapshots  # each peer's slots: its policy, then this many snapshots
        self.seats: dict[str, PeerSeats | None] = dict.fromkeys(self.peers)  # None: not seen (or gone)

    @property
    def acting(self) -> int:
        """How many acting policies the rollout workers seat: the members, every snapshot block, the peer slots."""
        return len(self.members) + len(self.owners) + len(self.peers) * (1 + self.peer_snapshots)

    @property
    def first_peer_slot(self) -> int:
        return len(self.members) + len(self.owners)

    def peer_slot(self, acting: int) -> tuple[str, int]:
        """The peer acting policy ``acting`` seats and which of its slots it is (0: its policy, 1..: a snapshot)."""
        peer, slot = divmod(acting - self.first_peer_slot, 1 + self.peer_snapshots)
        return self.peers[peer], slot

    def member_of(self, acting: int) -> Member:
        """The member acting policy ``acting`` (one of this run's) is, or is a snapshot of."""
        n = len(self.members)
        return self.members[acting if acting < n else self.owners[acting - n]]

    def player(self, acting: int, version: int) -> Player | None:
        """The player acting policy ``acting`` is when it acts with policy version ``version`` (None: a peer slot
        whose peer is not known, or has fewer snapshots)."""
        if acting < self.first_peer_slot:
            member = self.member_of(acting)
            frozen = acting >= len(self.members)
            return Player(f"{member.name}@{version}" if frozen else member.name, member.name, member.role, frozen)
        peer, slot = self.peer_slot(acting)
        seats = self.seats[peer]
        if seats is None or slot >= len(seats.blocks) or seats.blocks[slot] is None:
            return None
        member = f"{peer}:{seats.member}"
        return Player(f"{member}@{version}" if slot else member, member, seats.role, slot > 0)

    def roster(self, block_versions: Sequence[Sequence[int]]) -> list[Player | None]:
        """Every acting policy's player now, given each member's snapshot blocks' versions (a learner's
        ``snapshot_versions``; the blocks of a member whose learner has not reported yet hold its initial weights,
        published as version 1) and the versions the peers' snapshots hold as they last told."""
        n, seen = len(self.members), [0] * len(self.members)
        out = [self.player(k, 0) for k in range(n)]
        for j, owner in enumerate(self.owners):
            versions = block_versions[owner]
            out.append(self.player(n + j, versions[seen[owner]] if seen[owner] < len(versions) else 1))
            seen[owner] += 1
        for acting in range(self.first_peer_slot, self.acting):
            peer, slot = self.peer_slot(acting)
            seats = self.seats[peer]
            version = seats.versions[slot - 1] if seats and 0 < slot <= len(seats.versions) else 1
            out.append(self.player(acting, version))
        return out
