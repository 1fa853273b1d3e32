"""A self-contained HTML report of a finished (or running) experiment, from the files it wrote.

The live page disappears with the cluster; this one is a single file (BokehJS inlined, no server, no network)
that can be attached to an issue or archived with the checkpoints. It reads ``metrics.csv`` (one row per
report) and ``time_breakdown.jsonl`` (the time shares at each report) and draws the same plots as the live page,
plus the learning curve against env steps (with the evaluation returns, when the run evaluated), and embeds the
newest video of ``videos/`` (``--save-video-every-env-steps``) in the page itself. A run with several policies
also wrote ``policies.csv`` (one row per policy and report): its plots then have one line per policy, and the PBT
replacements of ``pbt.csv`` are marked on the return plots and listed in a table. A league's ``payoff.csv`` is drawn
as a heat map over the players of its last report (``league.csv``); a member of a league of runs draws the league's
table, joined from its peers' experiments beside it (:mod:`.league_tables`).
"""

from __future__ import annotations

import base64
import csv
import html
import json
import math
import os
import time
from typing import Any

from daskrl.config import ConfigError
from daskrl.monitor.figures.league_plots import payoff_cells, payoff_figure
from daskrl.monitor.figures.league_tables import read_league, read_runs_table, write_runs_table
from daskrl.monitor.figures.plots import RETURN_COLOR, eval_points, series, share_bars, shares_figure, time_figures
from daskrl.monitor.figures.policy_plots import (
    pbt_marks,
    pbt_series,
    pbt_table_html,
    policy_figures,
    policy_series,
    return_lines,
    split_policies,
)
from daskrl.monitor.outputs.video import saved_videos

#: a newer video than this is linked (by its path next to the report) rather than embedded
MAX_EMBEDDED_VIDEO_BYTES = 32 * 2**20
#: PBT replacements listed in the report's table (the newest; pbt.csv has them all)
MAX_PBT_ROWS = 100


def read_metrics(experiment_dir: str) -> list[dict[str, Any]]:
    """The rows of ``metrics.csv`` as numbers (empty cells as NaN)."""
    path = os.path.join(experiment_dir, "metrics.csv")
    if not os.path.isdir(experiment_dir):
        raise ConfigError([f"experiment {experiment_dir!r} not found (check --experiment and --train-dir)"])
    if not os.path.exists(path):
        raise ConfigError([f"experiment {experiment_dir!r} has no metrics.csv: it never reported (nothing to show)"])
    with open(path, newline="") as f:
        rows = [{k: _float(v) for k, v in r.items()} for r in csv.DictReader(f)]
    if not rows:
        raise ConfigError([f"experiment {experiment_dir!r} has no reports in metrics.csv yet"])
    return rows


def read_policies(experiment_dir: str) -> list[dict[str, Any]]:
    """The rows of ``policies.csv`` as numbers (empty: a one-policy run, which writes none)."""
    path = os.path.join(experiment_dir, "policies.csv")
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return [{k: _float(v) for k, v in r.items()} for r in csv.DictReader(f)]


def read_pbt(experiment_dir: str) -> list[dict[str, Any]]:
    """The replacements in ``pbt.csv`` (:class:`daskrl.pbt.population.PBTLog`) as the events the runner logs (``before`` and
    ``after`` from the ``<name>_before`` / ``<name>_after`` columns; which were perturbed is not in the file)."""
    path = os.path.join(experiment_dir, "pbt.csv")
    if not os.path.exists(path):
        return []
    events = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            event: dict[str, Any] = {"before": {}, "after": {}}
            for column, value in r.items():
                name, _, when = (column or "").rpartition("_")
                if when in ("before", "after") and name:
                    event[when][name] = _float(value)
                else:
                    event[column] = _float(value)
            events.append(event)
    return events


def read_shares(experiment_dir: str) -> dict[str, dict[str, float]]:
    """The last time shares in ``time_breakdown.jsonl``: components time themselves from their start, so the last
    record already averages over the whole run."""
    path = os.path.join(experiment_dir, "time_breakdown.jsonl")
    last: dict[str, dict[str, float]] = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:  # a line cut by a crash
                    continue
                if record.get("shares"):
                    last = record["shares"]
    return last


def write_report(experiment_dir: str, output: str | None = None) -> str:
    """Write the report (default ``<experiment_dir>/report.html``) and return its path."""
    from bokeh.embed import file_html
    from bokeh.layouts import column, gridplot
    from bokeh.models import ColumnDataSource, Div
    from bokeh.plotting import figure
    from bokeh.resources import INLINE

    rows = read_metrics(experiment_dir)
    shares = read_shares(experiment_dir)
    by_policy = split_policies(read_policies(experiment_dir))
    events = read_pbt(experiment_dir)
    output = output or os.path.join(experiment_dir, "report.html")
    source = ColumnDataSource(series(rows))
    sources = {k: ColumnDataSource(policy_series(policy_rows)) for k, policy_rows in sorted(by_policy.items())}
    pbt_source = ColumnDataSource(pbt_series(events))
    figs = policy_figures(source, sources, pbt_source) if sources else time_figures(source)
    several = " of each policy (mean of its last 100 episodes)" if sources else \
        " (mean ± std of the last 100 episodes)"
    curve = figure(title=f"Learning curve: episode return{several} vs env steps",
                   height=230, sizing_mode="stretch_width", x_axis_label="env steps", y_axis_label="return",
                   tools="pan,wheel_zoom,box_zoom,reset,save")
    curve.toolbar.logo = None
    if sources:
        return_lines(curve, "env_steps", sources)
    else:
        curve.varea(x="env_steps", y1="return_low", y2="return_high", source=source, fill_color=RETURN_COLOR,
                    fill_alpha=0.2)
        curve.line("env_steps", "episode_return_mean", source=source, line_width=2, color=RETURN_COLOR)
    eval_points(curve, "eval_env_steps", source)
    if sources:
        pbt_marks(curve, "env_steps", pbt_source)
    curve.xaxis.formatter.use_scientific = False
    breakdown = shares_figure(ColumnDataSource(share_bars(shares)), sorted(shares)) if shares else \
        Div(text="<p>no time breakdown recorded (time_breakdown.jsonl is missing or empty)</p>")
    if sources:
        grid_rows = [[curve, figs["return"]], [figs["fps"], figs["policy_lag"]], [figs["length"], figs["policy_version"]],
                     [figs["losses"], figs["entropy"]], [figs["kl"], figs["learning_rate"]]]
    else:
        grid_rows = [[curve, figs["return"]], [figs["fps"], figs["policy_lag"]], [figs["losses"], figs["kl"]]]
    grid = gridplot(grid_rows, sizing_mode="stretch_width", merge_tools=False, toolbar_options={"logo": None})
    name = os.path.basename(os.path.normpath(experiment_dir))
    header = _header(name, experiment_dir, rows) + _policies_header(by_policy, events)
    table = [Div(text=pbt_table_html(events, limit=MAX_PBT_ROWS), sizing_mode="stretch_width")] if events else []
    heat_map = league_figures(experiment_dir)
    layout = column(Div(text=header, sizing_mode="stretch_width"), grid, *table, *heat_map, breakdown,
                    sizing_mode="stretch_width")
    page = file_html(layout, resources=INLINE, title=f"daskrl report: {name}")
    video = latest_video(experiment_dir)
    if video is not None:  # plain HTML after the plots (the page's last </body>: BokehJS holds the text too)
        head, body_end, tail = page.rpartition("</body>")
        page = head + _video_html(video, output) + "\n" + body_end + tail
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    with open(output, "w", encoding="utf-8") as f:
        f.write(page)
    return output


def league_figures(experiment_dir: str) -> list:
    """The league's heat map: this run's table, or for a member of a league of runs the league's table when a peer's
    experiment is beside it (written there too, as ``league_payoff.csv``), and a line naming the peers whose
    experiment is not."""
    from bokeh.models import ColumnDataSource, Div

    payoff, players = read_league(experiment_dir)
    league = read_runs_table(experiment_dir)
    notes = []
    if league is not None and len(league.runs) > 1:
        payoff, players = league.rows, league.players
        write_runs_table(os.path.join(experiment_dir, "league_payoff.csv"), league.rows)
    if league is not None and league.missing:
        notes.append(Div(text=f"<p>League of runs: no payoff table of {', '.join(league.missing)} beside this "
                              "experiment (its games on those runs' workers are not in the table)</p>"))
    return [payoff_figure(ColumnDataSource(payoff_cells(payoff, players)), players), *notes] if players else []


def latest_video(experiment_dir: str) -> str | None:
    """The newest ``videos/video_<env steps>.mp4`` of an experiment (the most env steps), or None."""
    found = saved_videos(experiment_dir)
    return found[-1][1] if found else None


def _video_html(path: str, output: str) -> str:
    """A <video> element with the file inside the page (a data: URL), or a relative link for a large one."""
    steps = int(os.path.splitext(os.path.basename(path))[0][6:])
    if os.path.getsize(path) <= MAX_EMBEDDED_VIDEO_BYTES:
        with open(path, "rb") as f:
            src = "data:video/mp4;base64," + base64.b64encode(f.read()).decode("ascii")
    else:
        src = html.escape(os.path.relpath(path, os.path.dirname(os.path.abspath(output))))
    return (f"<div style='font-family:sans-serif;margin:8px'><h3>The policy at {steps:,} env steps</h3>"
            f"<video id='daskrl-video' controls loop style='max-width:100%' src='{src}'></video></div>")


def _header(name: str, experiment_dir: str, rows: list[dict[str, Any]]) -> str:
    env = "?"
    try:
        with open(os.path.join(experiment_dir, "config.json")) as f:
            env = json.load(f)["env"]["env"]
    except (OSError, KeyError, ValueError):
        pass
    last = rows[-1]
    returns = [r["episode_return_mean"] for r in rows if not math.isnan(r.get("episode_return_mean", math.nan))]
    seconds, steps = last.get("time_s", math.nan), last.get("env_steps", math.nan)
    facts = [f"env <b>{html.escape(str(env))}</b>", f"{steps:,.0f} env steps in {seconds:,.0f} s",
             f"{steps / seconds:,.0f} frames/s on average" if seconds > 0 else "",
             f"final return {returns[-1]:.1f}, best {max(returns):.1f}" if returns else "no finished episode",
             _last_eval(rows), f"policy version {last.get('policy_version', math.nan):.0f}", f"{len(rows)} reports"]
    return (f"<h2>daskrl report: {html.escape(name)}</h2><p>{' &nbsp;|&nbsp; '.join(f for f in facts if f)}</p>"
            f"<p style='color:#777'>from {html.escape(os.path.abspath(experiment_dir))}, "
            f"{time.strftime('%Y-%m-%d %H:%M')}</p>")


def _policies_header(by_policy: dict[int, list[dict[str, Any]]], events: list[dict[str, Any]]) -> str:
    """With several policies: each one's final and best return, and the PBT replacements."""
    if not by_policy:
        return ""
    facts = []
    for k, policy_rows in sorted(by_policy.items()):
        returns = [r["episode_return_mean"] for r in policy_rows if not math.isnan(r.get("episode_return_mean", math.nan))]
        facts.append(f"policy {k}: final return {returns[-1]:.1f}, best {max(returns):.1f}" if returns else
                     f"policy {k}: no finished episode")
    if events:
        rounds = len({e.get("round") for e in events})
        facts.append(f"{len(events)} PBT replacement{'s' if len(events) > 1 else ''} in {rounds} "
                     f"round{'s' if rounds > 1 else ''}")
    return f"<p>{len(by_policy)} policies: {' &nbsp;|&nbsp; '.join(facts)}</p>"


def _last_eval(rows: list[dict[str, Any]]) -> str:
    evals = [r for r in rows if not math.isnan(r.get("eval_return_mean", math.nan))]
    if not evals:
        return ""
    return (f"evaluation return {evals[-1]['eval_return_mean']:.1f} at {evals[-1].get('eval_env_steps', 0):,.0f} "
            f"env steps")


def _float(value: str | None) -> float:
    try:
        return float(value) if value not in (None, "") else math.nan
    except ValueError:
        return math.nan
