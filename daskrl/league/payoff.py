"""Who beat whom in a league: every finished game by player pair, and an Elo rating per player.

A game's outcome for a player is 1 (its return was positive: a win), 0.5 (zero: a draw) or 0 (a loss), as
``selfplay.csv`` counts them. The table keeps all games for ``payoff.csv`` and the recent ones (``window`` per pair)
for the win rates that prioritized fictitious self-play weighs opponents by: a member that improves should be judged
by how it plays now. Each game also moves both players' Elo ratings (K = :data:`ELO_K`); a snapshot starts at the
rating its member had when the league first saw the snapshot (its first game, or a report), which is where the member
stood when it was taken, give or take the games between.
"""

from __future__ import annotations

from collections import deque
from typing import Any

#: how far one game moves a rating (chess federations use 10 to 40)
ELO_K = 16.0
#: a new member's rating
ELO_START = 1000.0
#: recent games per ordered pair behind a win rate
RECENT_GAMES = 200


def outcome_of(ret: float) -> float:
    """A game's outcome for the player whose return ``ret`` was: win 1, draw 0.5, loss 0."""
    return 1.0 if ret > 0 else 0.5 if ret == 0 else 0.0


class Payoff:
    """See the module docstring."""

    def __init__(self, window: int = RECENT_GAMES) -> None:
        self.window = window
        self.counts: dict[tuple[str, str], list[int]] = {}  # (player, opponent) -> [wins, draws, losses]
        self.recent: dict[tuple[str, str], deque[float]] = {}  # the player's outcomes of the newest games
        self.ratings: dict[str, float] = {}

    def add(self, player: str, opponent: str, outcome: float, member_of: dict[str, str]) -> None:
        """One game ``player`` played against ``opponent`` with ``outcome`` (for ``player``); both directions are
        counted. ``member_of``: a snapshot's member by the snapshot's name, where its first rating comes from."""
        for a, b, x in ((player, opponent, outcome), (opponent, player, 1.0 - outcome)):
            count = self.counts.setdefault((a, b), [0, 0, 0])
            count[0 if x == 1.0 else 1 if x == 0.5 else 2] += 1
            self.recent.setdefault((a, b), deque(maxlen=self.window)).append(x)
        ra, rb = (self.rating(name, member_of.get(name)) for name in (player, opponent))
        expected = 1.0 / (1.0 + 10 ** ((rb - ra) / 400.0))
        self.ratings[player] = ra + ELO_K * (outcome - expected)
        self.ratings[opponent] = rb - ELO_K * (outcome - expected)

    def rating(self, name: str, member: str | None = None) -> float:
        """``name``'s Elo rating; a player not rated yet starts at its ``member``'s (a snapshot) or at the start."""
        if name not in self.ratings:
            self.ratings[name] = self.ratings.get(member, ELO_START) if member else ELO_START
        return self.ratings[name]

    def win_rate(self, player: str, opponent: str) -> float:
        """``player``'s share of recent games won against ``opponent`` (a draw counts half), with one game's worth
        of an even prior, so that an opponent never met is an even match, not a sure win or loss."""
        recent = self.recent.get((player, opponent), ())
        return (sum(recent) + 0.5) / (len(recent) + 1)

    def forget_recent(self, current: set[str]) -> None:
        """Drop the recent games of every pair with a player not in ``current`` (a snapshot replaced by a newer one):
        no draw weighs them again, and a checkpoint should not carry 200 outcomes for each snapshot ever taken. Their
        counts and ratings stay, for payoff.csv."""
        for pair in [pair for pair in self.recent if not (pair[0] in current and pair[1] in current)]:
            del self.recent[pair]

    def start_afresh(self, member: str, snapshot: str) -> None:
        """``member`` starts over from fresh weights, and ``snapshot`` keeps what it was: the snapshot takes the
        member's rating, the member starts at :data:`ELO_START`, and the member's recent games (a player that no
        longer exists) weigh no draw again. Its counts stay, for payoff.csv."""
        self.ratings[snapshot] = self.rating(member)
        self.ratings[member] = ELO_START
        for pair in [pair for pair in self.recent if member in pair]:
            del self.recent[pair]

    def games(self, player: str, opponent: str) -> int:
        return sum(self.counts.get((player, opponent), (0, 0, 0)))

    def rows(self) -> list[dict[str, Any]]:
        """``payoff.csv``: one row per ordered pair that played, all games counted, with the recent win rate (blank
        for a pair whose recent games were forgotten: :meth:`forget_recent`)."""
        out = []
        for (a, b), (won, drew, lost) in sorted(self.counts.items()):
            games = won + drew + lost
            out.append({"player": a, "opponent": b, "games": games, "wins": won, "draws": drew, "losses": lost,
                        "win_rate": (won + 0.5 * drew) / games,
                        "recent_win_rate": sum(recent) / len(recent) if (recent := self.recent.get((a, b))) else "",
                        "elo": round(self.ratings.get(a, ELO_START), 1),
                        "opponent_elo": round(self.ratings.get(b, ELO_START), 1)})
        return out

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps, so a resumed league goes on with its table and ratings."""
        return {"counts": [[a, b, *c] for (a, b), c in self.counts.items()],
                "recent": [[a, b, list(r)] for (a, b), r in self.recent.items()], "ratings": dict(self.ratings)}

    @classmethod
    def from_state(cls, state: dict[str, Any] | None, window: int = RECENT_GAMES) -> Payoff:
        table = cls(window)
        for a, b, *count in (state or {}).get("counts", []):
            table.counts[a, b] = list(count)
        for a, b, recent in (state or {}).get("recent", []):
            table.recent[a, b] = deque(recent, maxlen=window)
        table.ratings.update((state or {}).get("ratings", {}))
        return table
