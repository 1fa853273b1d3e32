"""A league's payoff heat map, shared by the live dashboard page and the HTML report (Bokeh only, no Dask).

Rows are players, columns their opponents, each cell the row player's win rate against the column player (a draw
counts half) over all their games, coloured from red (always loses) through white (even) to blue (always wins);
hovering shows the games behind it. Pairs that never played are left blank. The input is ``payoff.csv``'s rows
(:meth:`daskrl.league.payoff.Payoff.rows`) for the players to show.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from daskrl.monitor.stats import as_number

#: red (loses) -> white (even) -> blue (wins), 11 steps
WIN_RATE_PALETTE = ("#b2182b", "#d6604d", "#f4a582", "#fddbc7", "#f7f7f7", "#f7f7f7", "#d1e5f0", "#92c5de",
                    "#4393c3", "#2166ac", "#053061")


def payoff_cells(rows: Sequence[dict[str, Any]], players: Sequence[str]) -> dict[str, list]:
    """Columns for a ColumnDataSource: one cell per ordered pair of ``players`` that played."""
    shown = set(players)
    cells: dict[str, list] = {"player": [], "opponent": [], "win_rate": [], "games": [], "label": []}
    for r in rows:
        if r.get("player") in shown and r.get("opponent") in shown:
            rate = as_number(r.get("win_rate"))
            cells["player"].append(str(r["player"]))
            cells["opponent"].append(str(r["opponent"]))
            cells["win_rate"].append(rate)
            cells["games"].append(int(as_number(r.get("games"))))
            cells["label"].append(f"{rate:.2f}")
    return cells


#: the heat map's title when nothing more is to be said
PAYOFF_TITLE = "League payoff: the row player's win rate against the column player"


def payoff_figure(source: Any, players: Sequence[str], title: str = PAYOFF_TITLE):
    """The heat map of ``source`` (:func:`payoff_cells`) over ``players`` (rows top-down in this order)."""
    from bokeh.models import HoverTool, LinearColorMapper
    from bokeh.plotting import figure

    size = max(260, 60 + 34 * len(players))
    fig = figure(title=title, height=size, width=size + 160, x_range=list(players), y_range=list(reversed(players)),
                 tools="save", x_axis_location="above", name="daskrl-payoff")
    fig.toolbar.logo = None
    mapper = LinearColorMapper(palette=list(WIN_RATE_PALETTE), low=0.0, high=1.0)
    fig.rect(x="opponent", y="player", width=1, height=1, source=source, line_color="white",
             fill_color={"field": "win_rate", "transform": mapper})
    fig.text(x="opponent", y="player", text="label", source=source, text_align="center", text_baseline="middle",
             text_font_size="8pt")
    fig.add_tools(HoverTool(tooltips=[("player", "@player"), ("opponent", "@opponent"),
                                      ("win rate", "@win_rate{0.00}"), ("games", "@games")]))
    fig.xaxis.major_label_orientation = 0.9
    fig.grid.grid_line_color = None
    return fig
