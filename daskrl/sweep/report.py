"""``daskrl report --sweep DIR``: one self-contained HTML page (BokehJS inlined, no server, no network) of a sweep.

Each configuration's learning curve is the mean over its seeds with a 95% bootstrap band (:mod:`.results`), read
from the ``metrics.csv`` of each trial's experiment; the ranking table gives each configuration's values, status,
seeds, env steps, mean and IQM of the final returns with the IQM's 95% bootstrap interval (stratified by task);
beside it, the probability that the best configuration improves on each other one and, with tasks, each one's
performance profile; the trials table is ``sweep.csv`` itself. A sweep with tasks is drawn and ranked by
normalized scores (:mod:`.tasks`), and a table gives each configuration's mean return on each task.
"""

from __future__ import annotations

import html
import json
import math
import os
from typing import Any

import numpy as np

from daskrl.errors import ConfigError
from daskrl.monitor.figures.plots import new_figure
from daskrl.monitor.figures.report import read_metrics
from daskrl.sweep.results import Ranked, curve_band, finals_by_task, performance_profile, probability_of_improvement, rank
from daskrl.sweep.spec import SweepSpec, load_spec
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
    spec = load_spec(os.path.join(sweep_dir, "sweep.json"))
    ranked = rank(rows)
    name = os.path.basename(os.path.normpath(sweep_dir))
    curve = _curves(sweep_dir, rows, ranked[:MAX_CURVES], spec)
    what = ("score (0: a random policy's return, 1: the task's reference) over each configuration's tasks and seeds"
            if spec.tasks else "return over each configuration's seeds")
    header = (f"<h2>daskrl sweep {html.escape(name)}</h2><p>{len(rows)} trials of {len(ranked)} configurations in "
              f"{html.escape(os.path.abspath(sweep_dir))}. Curves: the mean {what}, with a 95% bootstrap band; IQM: "
              "the interquartile mean of the trials' final values, with its 95% bootstrap interval (as rliable "
              "reports them).</p>")
    tables = [ranking_html(ranked, scored=bool(spec.tasks)), comparison_html(rows, ranked, bool(spec.tasks))]
    if spec.tasks:
        tables.append(per_task_html(rows, ranked, spec))
    tables.append(trials_html(rows, scored=bool(spec.tasks)))
    parts = [Div(text=header, sizing_mode="stretch_width"), curve,
             *(Div(text=t, sizing_mode="stretch_width") for t in tables)]
    page = file_html(column(*parts, sizing_mode="stretch_width"), resources=INLINE, title=f"daskrl sweep: {name}")
    output = output or os.path.join(sweep_dir, "report.html")
    with open(output, "w", encoding="utf-8") as f:
        f.write(page)
    return output


def _curves(sweep_dir: str, rows: list[dict[str, Any]], ranked: list[Ranked], spec: SweepSpec) -> Any:
    value = "score" if spec.tasks else "return"
    fig = new_figure(f"Learning curves: mean {value} over {'tasks and ' if spec.tasks else ''}seeds (95% bootstrap "
                     "band)", value, "env steps")
    fig.xaxis.formatter.use_scientific = False
    for i, config in enumerate(ranked):
        curves = _configuration_curves(sweep_dir, [r for r in rows if r["configuration"] == config.configuration],
                                       spec)
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


def _configuration_curves(sweep_dir: str, rows: list[dict[str, Any]], spec: SweepSpec
                          ) -> list[tuple[np.ndarray, np.ndarray]]:
    """The curves of one configuration's trials, each on the sweep's scale (scores with tasks, else returns)."""
    curves = []
    for row in rows:
        curve = _trial_curve(os.path.join(sweep_dir, row["trial"]))
        if curve is not None:
            steps, returns = curve
            curves.append((steps, np.array([spec.score(row["task"], v) for v in returns])))
    return curves


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


def ranking_html(ranked: list[Ranked], scored: bool = False) -> str:
    head = ("rank", "configuration", "values", "status", "trials", "env steps",
            "mean score" if scored else "mean return", "IQM", "IQM 95% CI")
    num = _score if scored else _num
    body = []
    for i, r in enumerate(ranked, 1):
        cells = (i, f"c{r.configuration:03d}", _values(r.params), r.status, r.seeds, f"{r.env_steps:,}",
                 num(r.mean), num(r.iqm), f"[{num(r.ci[0])}, {num(r.ci[1])}]")
        body.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    return _table("Configurations, best first", head, body, "ranking")


#: the scores a performance profile is read at (0: a random policy, 1: the task's reference)
PROFILE_TAUS = (0.25, 0.5, 0.75, 1.0)


def comparison_html(rows: list[dict[str, Any]], ranked: list[Ranked], scored: bool) -> str:
    """Beside the IQM, what rliable reports as well: each configuration's chance to be improved on by the best one
    (P(best > c), over its runs task by task) and, with tasks, its performance profile (the share of its runs above
    each normalized score)."""
    if not ranked:
        return ""
    by_config = {r.configuration: finals_by_task([row for row in rows if row["configuration"] == r.configuration])
                 for r in ranked}
    top = by_config[ranked[0].configuration]
    head = ("configuration", f"P(c{ranked[0].configuration:03d} > c)",
            *((f"runs above {tau:g}" for tau in PROFILE_TAUS) if scored else ()))
    body = []
    for r in ranked[1:] if not scored else ranked:
        mine = by_config[r.configuration]
        tasks = sorted(set(top) & set(mine))
        chance = probability_of_improvement([top[t] for t in tasks], [mine[t] for t in tasks])
        cells = [f"c{r.configuration:03d}", "-" if math.isnan(chance) else f"{chance:.2f}"]
        if scored:
            runs = np.concatenate(list(mine.values())) if mine else np.array([])
            cells += [f"{share:.0%}" for share in performance_profile(runs, np.array(PROFILE_TAUS))] if len(runs) \
                else ["-"] * len(PROFILE_TAUS)
        body.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    return _table("Probability of improvement" + (" and performance profiles" if scored else ""), head, body,
                  "comparison")


def per_task_html(rows: list[dict[str, Any]], ranked: list[Ranked], spec: SweepSpec) -> str:
    """Each configuration's mean final return on each task (over its seeds), in the ranking's order."""
    head = ("configuration", *(f"{t.env} (reference {t.reference:g})" for t in spec.tasks))
    body = []
    for r in ranked:
        cells = [f"c{r.configuration:03d}"]
        for task in spec.tasks:
            finals = [row["final_return"] for row in rows if row["configuration"] == r.configuration
                      and row["task"] == task.env and not math.isnan(row["final_return"])]
            cells.append(_num(float(np.mean(finals))) if finals else "-")
        body.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    return _table("Mean final return per task", head, body, "tasks")


def trials_html(rows: list[dict[str, Any]], scored: bool = False) -> str:
    head = ("trial", "values", *(("task",) if scored else ()), "seed", "status", "env steps", "final return",
            *(("final score",) if scored else ()), "best return", "wall time", "note")
    body = []
    for r in rows:
        task = (r["task"],) if scored else ()
        score = (_score(r["final_score"]),) if scored else ()
        cells = (r["trial"], _values(r["params"]), *task, r["seed"], r["status"], f"{r['env_steps']:,}",
                 _num(r["final_return"]), *score, _num(r["best_return"]), f"{r['wall_time_s']:.0f} s",
                 r.get("note", ""))
        body.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    return _table("Trials (sweep.csv)", head, body, "trials")


def _table(title: str, head: tuple[str, ...], body: list[str], css_id: str) -> str:
    th = "".join(f"<th style='text-align:left;padding-right:1em'>{h}</th>" for h in head)
    return f"<h3>{title}</h3><table id='{css_id}'><tr>{th}</tr>{''.join(body)}</table>"


def _values(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={json.dumps(v)}" for k, v in params.items())


def _num(x: float) -> str:
    return "-" if x is None or math.isnan(x) else f"{x:.1f}"


def _score(x: float) -> str:
    return "-" if x is None or math.isnan(x) else f"{x:.3f}"
