"""What the dashboard shows of a run's league: its own payoff table, or, for a member of a league of separate runs
(``--league-peers``), the league's one table joined from the newest report of every member run the scheduler has
seen (as ``daskrl report`` joins the experiments' ``payoff.csv``, :mod:`daskrl.monitor.figures.league_tables`).

Why joined here: each member run counts only the games played on its own rollout workers, so one run's heat map
shows half of the league's games between two runs; the scheduler hears every member's reports and can add them up
while the league trains. A peer the scheduler has not heard from yet is named under ``missing``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from daskrl.monitor.figures.league_plots import PAYOFF_TITLE
from daskrl.monitor.figures.league_tables import runs_table
from daskrl.monitor.history import MetricsStore, RunHistory


@dataclass(frozen=True)
class LeagueView:
    """The players to draw (rows and columns, in order), the payoff rows behind the cells, the runs whose tables
    were joined (one run: just its own) and the peers not heard from."""

    players: list[str]
    rows: list[dict[str, Any]]
    runs: list[str]
    missing: list[str] = field(default_factory=list)

    @property
    def title(self) -> str:
        if len(self.runs) < 2 and not self.missing:
            return PAYOFF_TITLE
        joined = f"League payoff of the runs {', '.join(self.runs)}, joined"
        return joined + (f" ({', '.join(self.missing)} not heard from yet)" if self.missing else "")

    def key(self, store: MetricsStore) -> tuple:
        """Changes when any joined run reports again (the page redraws only then)."""
        return tuple((run, _steps(store.get(run))) for run in self.runs) + (tuple(self.missing),)


def league_view(store: MetricsStore, hist: RunHistory) -> LeagueView | None:
    """``hist``'s league as the dashboard shows it; None for a run without a league."""
    league = hist.league
    if not league.get("players"):
        return None
    peers = [str(p) for p in league.get("peers") or []]
    if not peers:
        return LeagueView(list(league["players"]), list(league.get("payoff", [])), [hist.run])
    leagues = {}
    for run in [hist.run, *peers]:
        member = store.get(run)
        if member is not None and member.league.get("players"):
            leagues[run] = (member.league.get("payoff", []), member.league["players"])
    table = runs_table([hist.run, *peers], leagues)
    return LeagueView(table.players, table.rows, table.runs, table.missing)


def league_payload(store: MetricsStore, run: str | None = None) -> dict[str, Any]:
    """``api/league``: the league of a run (the one that started last by default) as the page draws it; ``joined``
    names the runs whose tables it sums, ``runs`` every run the scheduler knows (as the other routes do)."""
    hist = store.get(run)
    view = league_view(store, hist) if hist else None
    return {"run": hist.run if hist else None, "players": view.players if view else [],
            "payoff": view.rows if view else [], "joined": view.runs if view else [],
            "missing": view.missing if view else [], "runs": store.names()}


def _steps(hist: RunHistory | None) -> Any:
    return hist.league.get("env_steps") if hist else None
