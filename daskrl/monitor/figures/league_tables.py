"""A league's payoff tables as its experiments keep them, for the report: one run's (``payoff.csv`` and the players of
its last report in ``league.csv``), and one table for a league of separate runs (``--league-peers``), which the
dashboard also builds from the runs' newest reports.

Each member run keeps the games played on its own rollout workers in its own ``payoff.csv``: its own players named
plainly (``main_0``, ``main_0@40``), its peers' after their run (``b:main_exploiter_0``). A game is played on one
run's workers and is in that run's table only, so the league's table is the runs' tables summed, with every player
named after its run (``a:main_0``). Elo ratings are left out of it: each run rates players from its own games, so the
runs' ratings of one player differ. ``daskrl report`` of a member run draws this table when its peers' experiments
sit beside its own (one ``--train-dir``), and writes it as ``league_payoff.csv`` there.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: what the joined table keeps of each ordered pair of players
COLUMNS = ("player", "opponent", "games", "wins", "draws", "losses", "win_rate")


def named_after_run(run: str, player: str) -> str:
    """``player`` of ``run``'s table as the league names it: a run's own players get the run's name."""
    return player if ":" in player else f"{run}:{player}"


def join_tables(tables: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """The runs' ``payoff.csv`` rows (by run name) as one table: every ordered pair once, its games summed."""
    counts: dict[tuple[str, str], list[int]] = {}
    for run, rows in tables.items():
        for r in rows:
            pair = (named_after_run(run, r["player"]), named_after_run(run, r["opponent"]))
            count = counts.setdefault(pair, [0, 0, 0])
            for k, column in enumerate(("wins", "draws", "losses")):
                count[k] += int(r[column])
    return [{"player": a, "opponent": b, "games": sum(c), "wins": c[0], "draws": c[1], "losses": c[2],
             "win_rate": (c[0] + 0.5 * c[1]) / sum(c)} for (a, b), c in sorted(counts.items()) if sum(c)]


def league_runs(experiment_dir: str) -> list[str]:
    """This run and its peers (``--league-peers``, from its saved config), or [] for a run that is no member of a
    league of runs."""
    path = os.path.join(experiment_dir, "config.json")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        peers = json.load(f).get("policies", {}).get("league_peers") or []
    return [os.path.basename(os.path.normpath(experiment_dir)), *peers] if peers else []


def read_league(experiment_dir: str) -> tuple[list[dict[str, Any]], list[str]]:
    """A league's ``payoff.csv`` rows and the players of its last report (``league.csv``); empty without a league."""
    payoff, players = os.path.join(experiment_dir, "payoff.csv"), os.path.join(experiment_dir, "league.csv")
    if not (os.path.exists(payoff) and os.path.exists(players)):
        return [], []
    with open(payoff, newline="") as f:
        rows = list(csv.DictReader(f))
    with open(players, newline="") as f:
        reports = list(csv.DictReader(f))
    last = reports[-1]["env_steps"] if reports else None
    return rows, [r["player"] for r in reports if r["env_steps"] == last]


@dataclass(frozen=True)
class RunsTable:
    """A league of runs' table as the report finds it: the joined rows, the current players of every run found
    (each run's last report, named after its run), the runs found, and the peers whose experiment is not beside
    this one (so their games are missing)."""

    rows: list[dict[str, Any]]
    players: list[str]
    runs: list[str]
    missing: list[str]


def runs_table(runs: Sequence[str], leagues: Mapping[str, tuple[Sequence[Mapping[str, Any]], Sequence[str]]]
               ) -> RunsTable:
    """The league's table from each run's ``(payoff rows, current players)`` found in ``leagues`` (by run name):
    from the experiments beside one (the report) or from the runs' newest reports (the dashboard)."""
    tables: dict[str, Sequence[Mapping[str, Any]]] = {}
    players: list[str] = []
    for run in runs:
        rows, current = leagues.get(run, ([], []))
        if rows:
            tables[run] = rows
            players += [name for p in current if (name := named_after_run(run, p)) not in players]
    return RunsTable(join_tables(tables), players, list(tables), [run for run in runs if run not in tables])


def read_runs_table(experiment_dir: str) -> RunsTable | None:
    """The league's table from the experiments of its runs beside this one; None for a run that is no member of a
    league of runs."""
    runs = league_runs(experiment_dir)
    if not runs:
        return None
    parent = os.path.dirname(os.path.normpath(experiment_dir))
    return runs_table(runs, {run: read_league(os.path.join(parent, run)) for run in runs})


def write_runs_table(path: str, rows: Sequence[Mapping[str, Any]]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(COLUMNS))
        writer.writeheader()
        writer.writerows(rows)
