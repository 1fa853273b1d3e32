"""When a league member starts afresh (``--league-exploiter-resets``), as AlphaStar's league resets its exploiters.

A member that adds a snapshot by its win rate (``--league-snapshot-win-rate`` of its last games) may then train on
from fresh weights, the snapshot keeping what it was:

- a **main exploiter** does when it also beats every current main agent at that rate (by its recent games against
  each), as AlphaStar's does: it has found their weakness and starts over to find the next one. Its last games alone
  do not say so: they are also against the main agents' snapshots, which a fresh exploiter may beat first;
- a **league exploiter** does with chance 0.25, so that the league keeps exploiters of several ages;
- a **main agent** never does: it keeps what it learned.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from daskrl.league.members import Member, Player, Role
from daskrl.league.payoff import Payoff

#: the chance that a member which adds a snapshot by win rate starts afresh, by role (see the module docstring)
RESET_CHANCE = {Role.MAIN: 0.0, Role.MAIN_EXPLOITER: 1.0, Role.LEAGUE_EXPLOITER: 0.25}


def starts_afresh(member: Member, roster: Sequence[Player | None], payoff: Payoff, threshold: float,
                  rng: np.random.Generator) -> bool:
    """Whether ``member``, adding a snapshot now, trains on from fresh weights (see the module docstring):
    ``roster``, the league's players now; ``threshold``, --league-snapshot-win-rate."""
    if rng.random() >= RESET_CHANCE[member.role]:
        return False
    if member.role is not Role.MAIN_EXPLOITER:
        return True
    mains = {p.name for p in roster if p is not None and p.role is Role.MAIN and not p.frozen}
    return bool(mains) and all(payoff.win_rate(member.name, main) >= threshold for main in mains)
