"""The figures of a run that trains several policies: one line per policy (``policy 0``, ``policy 1``, ...) for
every per-policy quantity, and its PBT replacements (markers on the return plot and a table). Shared by the live
page and the HTML report; a one-policy run keeps the run's own figures (:func:`daskrl.monitor.figures.plots.time_figures`).

The run's row stays the run's totals (frames/s, policy lag), drawn from the run's source as with one policy; each
policy's rows (``policies`` of a metrics event, ``policies.csv``) go to a source of their own, so a live page
streams each policy's new points.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping
from typing import Any

from daskrl.monitor.figures.plots import add_hover, eval_points, new_figure, run_figures
from daskrl.monitor.stats import as_number

# Colours of the policies (distinct from the run's fps, lag and evaluation colours, so a screenshot can tell them
# apart); more policies than colours reuse them in order.
POLICY_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
                 "#17becf"]
PBT_MARKER = "inverted_triangle"

_POLICY_SERIES = ["time_s", "env_steps", "policy", "episode_return_mean", "episode_length_mean", "episodes",
                  "policy_version", "samples_trained", "loss", "entropy", "approx_kl", "learning_rate",
                  "valid_fraction"]


def policy_label(policy: int) -> str:
    return f"policy {policy}"


def policy_color(policy: int) -> str:
    return POLICY_COLORS[int(policy) % len(POLICY_COLORS)]


def split_policies(rows: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """Policy rows (each with a ``policy`` column) grouped by policy, in their order."""
    out: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        k = as_number(row.get("policy"))
        if not math.isnan(k):
            out.setdefault(int(k), []).append(row)
    return out


def policy_series(rows: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Columns of one policy's source (missing values as NaN: gaps)."""
    return {k: [as_number(r.get(k)) for r in rows] for k in _POLICY_SERIES}


def pbt_series(events: list[dict[str, Any]]) -> dict[str, list]:
    """Columns of the PBT markers: one per replacement, at the source's return (where the target goes on from),
    with a stem down to the target's return, in the target's colour."""
    def num(e: dict, key: str) -> float:
        return as_number(e.get(key))

    return {"time_s": [num(e, "time_s") for e in events], "env_steps": [num(e, "env_steps") for e in events],
            "round": [int(as_number(e.get("round"), 0)) for e in events],
            "target": [int(as_number(e.get("target"), 0)) for e in events],
            "source": [int(as_number(e.get("source"), 0)) for e in events],
            "target_return": [num(e, "target_return") for e in events],
            "source_return": [num(e, "source_return") for e in events],
            "color": [policy_color(int(as_number(e.get("target"), 0))) for e in events]}


def pbt_marks(fig, x: str, source) -> None:
    """The PBT replacements on a return plot: a stem from the target's return to the source's and a marker."""
    from bokeh.models import HoverTool

    fig.segment(x0=x, x1=x, y0="target_return", y1="source_return", source=source, color="color", line_width=2,
                line_dash="dotted")
    marks = fig.scatter(x, "source_return", source=source, marker=PBT_MARKER, size=11, color="color",
                        line_color="black", legend_label="PBT: target ← source")
    fig.add_tools(HoverTool(renderers=[marks], tooltips=[
        ("PBT round", "@round"), ("policy", "@target ← @source"),
        ("return", "@target_return{0.0} → @source_return{0.0}"), ("env steps", "@env_steps{0,0}")]))


def return_lines(fig, x: str, sources: Mapping[int, Any]) -> None:
    for k, source in sorted(sources.items()):
        fig.line(x, "episode_return_mean", source=source, line_width=2, color=policy_color(k),
                 legend_label=policy_label(k))


def policy_figures(source, sources: Mapping[int, Any], pbt_source, x: str = "time_s", x_label: str = "seconds",
                   width_mode: str = "stretch_width") -> dict[str, Any]:
    """The figures of a run with several policies: the run's frames/s and policy lag (from ``source``), and one
    line per policy (``sources``: policy -> its source) of return (with the evaluations and the PBT replacements
    of ``pbt_source``), episode length, loss, entropy, approximate KL, learning rate and policy version."""
    figs = run_figures(source, x, x_label, width_mode)

    def fig(title: str, y_label: str, **options: Any):
        return new_figure(title, y_label, x_label, width_mode, figs["fps"].x_range, **options)

    ret = fig("Episode return of each policy (mean of its last 100 episodes)", "return")
    return_lines(ret, x, sources)
    eval_points(ret, x, source)
    pbt_marks(ret, x, pbt_source)
    per_policy = {"return": ret,
                  "length": fig("Episode length of each policy (mean of its last 100 episodes)", "steps"),
                  "losses": fig("Learner loss of each policy", "loss"),
                  "entropy": fig("Policy entropy of each policy", "entropy"),
                  "kl": fig("Approximate KL of each policy", "KL"),
                  "learning_rate": fig("Learning rate of each policy (PBT moves it)", "learning rate",
                                       y_axis_type="log"),
                  "policy_version": fig("Policy version of each policy (one per training step)", "version")}
    columns = {"length": "episode_length_mean", "losses": "loss", "entropy": "entropy", "kl": "approx_kl",
               "learning_rate": "learning_rate", "policy_version": "policy_version"}
    for name, column in columns.items():
        for k, policy_source in sorted(sources.items()):
            per_policy[name].line(x, column, source=policy_source, line_width=2, color=policy_color(k),
                                  legend_label=policy_label(k))
    for f in per_policy.values():  # beside the plot: a legend of many policies would hide the lines
        f.legend.click_policy = "hide"
        f.legend.location = "top_left"
        f.add_layout(f.legend[0], "right")
    add_hover(per_policy.values(), [("policy", "@policy")])
    return {**figs, **per_policy}


def _value(value: Any, spec: str = ".4g") -> str:
    number = as_number(value)
    return "n/a" if math.isnan(number) else format(number, spec)


def _changed(before: Any, after: Any) -> bool:
    a, b = as_number(before), as_number(after)
    return not (math.isnan(a) and math.isnan(b)) and a != b


_TABLE_STYLE = ("<style>.daskrl-pbt table {border-collapse: collapse} .daskrl-pbt th, .daskrl-pbt td "
                "{padding: 2px 10px; text-align: left; border-bottom: 1px solid #ddd}</style>")


def pbt_table_html(events: list[dict[str, Any]], limit: int = 10) -> str:
    """The latest ``limit`` PBT replacements, newest first, as an HTML table (empty text: none yet). The
    hyperparameters that changed are listed; those PBT perturbed (``mutated``; the others are the source's, copied)
    are marked with * (events read back from ``pbt.csv`` do not say which)."""
    if not events:
        return ""
    head = "".join(f"<th>{h}</th>" for h in ("round", "env steps", "policy", "return",
                                              "hyperparameters that changed (before → after)"))
    lines = []
    for e in reversed(events[-limit:]):
        before, after = e.get("before") or {}, e.get("after") or {}
        mutated = set(e.get("mutated") or ())
        params = ", ".join(f"{html.escape(str(n))}{'*' if n in mutated else ''} {_value(before.get(n))} → "
                           f"{_value(after.get(n))}" for n in sorted(set(before) | set(after))
                           if _changed(before.get(n), after.get(n))) or "unchanged"
        values = [str(int(as_number(e.get("round"), 0))), f"{as_number(e.get('env_steps'), 0):,.0f}",
                  f"policy {int(as_number(e.get('target'), 0))} ← policy {int(as_number(e.get('source'), 0))}",
                  f"{_value(e.get('target_return'), '.1f')} → {_value(e.get('source_return'), '.1f')}", params]
        lines.append("<tr class='daskrl-pbt-event'>" + "".join(f"<td>{v}</td>" for v in values) + "</tr>")
    shown = f"the latest {limit} of {len(events)}" if len(events) > limit else f"{len(events)}"
    stars = "; * perturbed, the others copied from the source" if any("mutated" in e for e in events) else ""
    return (f"{_TABLE_STYLE}<div class='daskrl-pbt' style='font-size:13px'><b>PBT replacements</b> ({shown}, "
            f"newest first{stars})<table><tr>{head}</tr>{''.join(lines)}</table></div>")
