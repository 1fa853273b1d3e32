"""Whom each league member plays: prioritized fictitious self-play (PFSP) over the players its role looks at.

PFSP (AlphaStar) draws an opponent with a weight ``f(p)`` of the member's recent win rate ``p`` against it:
``hard`` ``(1 - p)^2`` seeks the opponents the member still loses to, ``even`` ``p (1 - p)`` those of its own level,
``uniform`` is plain fictitious self-play. By role:

- a **main agent** plays ``--league-self-play`` of its games against the current main agents, the rest by
  ``--league-pfsp`` over every player of the league (members and their snapshots);
- a **main exploiter** plays the main agents, as they are now and their snapshots, weighted ``even``: while it
  cannot beat the current ones it meets the older ones it can learn to beat;
- a **league exploiter** plays every frozen player of the league by ``--league-pfsp``.

Every member also plays :data:`MEMBERS_SHARE` of its games against the other current members evenly, whatever its
role, so that the payoff table has games for every pair of members. In a league of separate runs the other runs'
players (:class:`~daskrl.league.members.Player`) count by their roles as this run's own do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from daskrl.league.members import Member, Player, Role
from daskrl.league.payoff import Payoff

WEIGHTINGS: dict[str, Callable[[float], float]] = {
    "hard": lambda p: (1.0 - p) ** 2,
    "even": lambda p: p * (1.0 - p),
    "uniform": lambda p: 1.0,
}
#: share of every member's games spread over the other current members (see the module docstring)
MEMBERS_SHARE = 0.1
#: added to every PFSP weight: an opponent beaten every time is still met now and then, and no row sums to 0
FLOOR = 0.01


def opponent_weights(members: Sequence[Member], roster: Sequence[Player | None], payoff: Payoff, pfsp: str,
                     self_play: float) -> tuple[tuple[float, ...], ...]:
    """For each member (by policy), the probability of each acting policy (``roster``: the player each one is now;
    None, a peer slot not known, is never drawn) sitting beside it. A member run of a league of runs counts the
    peers' players by their roles as it counts its own."""
    available = [a for a, p in enumerate(roster) if p is not None]
    live = [a for a in available if not roster[a].frozen]
    frozen = [a for a in available if roster[a].frozen]
    mains = [a for a in live if roster[a].role is Role.MAIN]
    main_snapshots = [a for a in frozen if roster[a].role is Role.MAIN]
    rows = []
    for member in members:
        me = member.policy
        if member.role is Role.MAIN:
            row = self_play * _even(mains or [me], len(roster)) + (1.0 - self_play) * _pfsp(
                member, available, roster, payoff, WEIGHTINGS[pfsp])
        elif member.role is Role.MAIN_EXPLOITER:
            row = _pfsp(member, _or_any(mains + main_snapshots, available, me), roster, payoff, WEIGHTINGS["even"])
        else:
            row = _pfsp(member, _or_any(frozen, available, me), roster, payoff, WEIGHTINGS[pfsp])
        others = [a for a in live if a != me] or [me]
        rows.append(tuple(float(x) for x in (1.0 - MEMBERS_SHARE) * row + MEMBERS_SHARE * _even(others, len(roster))))
    return tuple(rows)


def _or_any(candidates: list[int], available: list[int], me: int) -> list[int]:
    """A role's candidates, or while it has none (the main agents' run not seen yet) every player but the member."""
    return candidates or [a for a in available if a != me] or [me]


def _even(candidates: Sequence[int], size: int) -> np.ndarray:
    row = np.zeros(size)
    row[list(candidates)] = 1.0 / len(candidates)
    return row


def _pfsp(member: Member, candidates: Sequence[int], roster: Sequence[Player | None], payoff: Payoff,
          weighting: Callable[[float], float]) -> np.ndarray:
    """PFSP's distribution over ``candidates``; a player held by several snapshot blocks (those that still hold the
    initial weights) counts once, its weight shared among its blocks."""
    names = [p.name if p is not None else "" for p in roster]
    row = np.zeros(len(roster))
    blocks: dict[str, int] = {}
    for a in candidates:
        blocks[names[a]] = blocks.get(names[a], 0) + 1
    for a in candidates:
        row[a] = (weighting(payoff.win_rate(member.name, names[a])) + FLOOR) / blocks[names[a]]
    return row / row.sum()
