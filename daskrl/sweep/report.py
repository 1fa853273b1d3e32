"""``daskrl report --sweep DIR``: one self-contained HTML page (BokehJS inlined, no server, no network) of a sweep.

Each configuration's learning curve is the mean over its seeds with a 95% bootstrap band (:mod:`.results`), read
from the ``metrics.csv`` of each trial's experiment; the ranking table gives each configuration's values, status,
seeds, env steps, mean and IQM of the final returns with the IQM's 95% bootstrap interval; the trials table is
``sweep.csv`` itself.
"""

from __future__ import annotations

import html
import json
import math
import os
from typing import Any

import numpy as np

from daskrl.errors import ConfigError
from daskrl.monitor.plots import new_figure
from daskrl.monitor.report import read_metrics
from daskrl.sweep.results import Ranked, curve_band, rank
from daskrl.sweep.trials import read_table

#: configurations drawn in the curve plot (the best ranked): more lines than this cannot be told apart
MAX_CURVES = 10
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")


def write_sweep_report(sweep_dir: str, output: str | None = None) -> str:
    """Write the page (default ``<sweep_dir>/report.html``) and return its path."""
    from bokeh.embed import file_html
    from bokeh.layouts import column
    from bokeh.models import Div
    from bokeh.resources import INLINE

    if not os.path.exists(os.path.join(sweep_dir, "sweep.csv")):
        raise ConfigError([f"{sweep_dir!r} is not a sweep directory with results (no sweep.csv): check --sweep"])
    rows = read_table(sweep_dir)
    ranked = rank(rows)
    name = os.path.basename(os.path.normpath(sweep_dir))
    curve = _curves(sweep_dir, rows, ranked[:MAX_CURVES])
    header = (f"<h2>daskrl sweep {html.escape(name)}</h2><p>{len(rows)} trials of {len(ranked)} configurations in "
              f"{html.escape(os.path.abspath(sweep_dir))}. Curves: the mean return over each configuration's seeds, "
              "with a 95% bootstrap band; IQM: the interquartile mean of the seeds' final returns, with its 95% "
              "bootstrap interval (as rliable reports them).</p>")
    parts = [Div(text=header, sizing_mode="stretch_width"), curve,
             Div(text=ranking_html(ranked), sizing_mode="stretch_width"),
             Div(text=trials_html(rows), sizing_mode="stretch_width")]
    page = file_html(column(*parts, sizing_mode="stretch_width"), resources=INLINE, title=f"daskrl sweep: {name}")
    output = output or os.path.join(sweep_dir, "report.html")
    with open(output, "w", encoding="utf-8") as f:
        f.write(page)
    return output


def _curves(sweep_dir: str, rows: list[dict[str, Any]], ranked: list[Ranked]) -> Any:
    fig = new_figure("Learning curves: mean return over seeds (95% bootstrap band)", "return", "env steps")
    fig.xaxis.formatter.use_scientific = False
    for i, config in enumerate(ranked):
        curves = [c for r in rows if r["configuration"] == config.configuration
                  if (c := _trial_curve(os.path.join(sweep_dir, r["trial"]))) is not None]
        if not curves:
            continue
        grid, mean, low, high = curve_band(curves)
        color = PALETTE[i % len(PALETTE)]
        fig.varea(x=grid, y1=low, y2=high, fill_color=color, fill_alpha=0.15)
        fig.line(grid, mean, line_width=2, color=color, legend_label=f"c{config.configuration:03d}")
    if fig.legend:
        fig.legend.location = "bottom_right"
        fig.legend.click_policy = "hide"
    return fig


def _trial_curve(experiment_dir: str) -> tuple[np.ndarray, np.ndarray] | None:
    """A trial's (env steps, mean return) from its metrics.csv, the rows before its first episode left out."""
    try:
        metrics = read_metrics(experiment_dir)
    except ConfigError:  # a trial that never reported
        return None
    points = [(r["env_steps"], r["episode_return_mean"]) for r in metrics if not math.isnan(r["episode_return_mean"])]
    if not points:
        return None
    x, y = np.array(points, float).T
    return x, y


def ranking_html(ranked: list[Ranked]) -> str:
    head = ("rank", "configuration", "values", "status", "seeds", "env steps", "mean return", "IQM", "IQM 95% CI")
    body = []
    for i, r in enumerate(ranked, 1):
        cells = (i, f"c{r.configuration:03d}", _values(r.params), r.status, r.seeds, f"{r.env_steps:,}",
                 _num(r.mean), _num(r.iqm), f"[{_num(r.ci[0])}, {_num(r.ci[1])}]")
        body.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    return _table("Configurations, best first", head, body, "ranking")


def trials_html(rows: list[dict[str, Any]]) -> str:
    head = ("trial", "values", "seed", "status", "env steps", "final return", "best return", "wall time", "note")
    body = ["<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in (
        r["trial"], _values(r["params"]), r["seed"], r["status"], f"{r['env_steps']:,}", _num(r["final_return"]),
        _num(r["best_return"]), f"{r['wall_time_s']:.0f} s", r.get("note", ""))) + "</tr>" for r in rows]
    return _table("Trials (sweep.csv)", head, body, "trials")


def _table(title: str, head: tuple[str, ...], body: list[str], css_id: str) -> str:
    th = "".join(f"<th style='text-align:left;padding-right:1em'>{h}</th>" for h in head)
    return f"<h3>{title}</h3><table id='{css_id}'><tr>{th}</tr>{''.join(body)}</table>"


def _values(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={json.dumps(v)}" for k, v in params.items())


def _num(x: float) -> str:
    return "-" if x is None or math.isnan(x) else f"{x:.1f}"
