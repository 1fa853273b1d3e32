"""The runs training on the cluster now, for the page's table and ``<prefix>daskrl/api/runs``: the scheduler's run
registry (:mod:`daskrl.runtime.access.runs`: name, state, workers, age, newest numbers), read on the scheduler itself."""

from __future__ import annotations

import html
import math
import time
from typing import Any

from daskrl.runtime.access.runs import PLUGIN_NAME as RUNS_PLUGIN


def live_runs(scheduler: Any) -> list[dict[str, Any]]:
    """Every live run, oldest first: name, experiment, state, workers, age and its newest numbers."""
    registry = scheduler.plugins.get(RUNS_PLUGIN)
    if registry is None:
        return []
    now = time.time()
    return [{"name": r["name"], "experiment": r["experiment"], "state": r["state"], "workers": list(r["workers"]),
             "age_s": now - r["started"], **dict(r.get("report") or {})}
            for r in sorted(registry.runs.values(), key=lambda r: r["started"])]


def runs_table_html(runs: list[dict[str, Any]]) -> str:
    """The live runs as a small HTML table (nothing while none trains)."""
    if not runs:
        return ""
    head = "".join(f"<th style='text-align:left;padding-right:1em'>{h}</th>"
                   for h in ("run", "state", "workers", "env steps", "frames/s", "return", "age"))
    rows = "".join(
        "<tr>" + "".join(f"<td style='padding-right:1em'>{html.escape(str(v))}</td>" for v in (
            r["name"], r["state"], len(r["workers"]), f"{int(r.get('env_steps') or 0):,}",
            f"{float(r.get('fps') or 0):,.0f}", _number(r.get("episode_return_mean")), f"{r['age_s']:.0f} s")) + "</tr>"
        for r in runs)
    return f"<b>runs on this cluster</b><table>{'<tr>' + head + '</tr>'}{rows}</table>"


def sweeps_table_html(sweeps: dict[str, dict[str, Any]]) -> str:
    """Each sweep's trials (status counts) and best finished return (score, with tasks) so far, newest sweep first."""
    if not sweeps:
        return ""
    rows = []
    for name, msg in sorted(sweeps.items(), key=lambda item: -float(item[1].get("time") or 0)):
        counts: dict[str, int] = {}
        for trial in msg["trials"]:
            counts[str(trial.get("status"))] = counts.get(str(trial.get("status")), 0) + 1
        status = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        rows.append("<tr>" + "".join(f"<td style='padding-right:1em'>{html.escape(str(v))}</td>" for v in (
            name, len(msg["trials"]), status, _number(msg.get("best")))) + "</tr>")
    head = "".join(f"<th style='text-align:left;padding-right:1em'>{h}</th>"
                   for h in ("sweep", "trials", "status", "best return (score) so far"))
    return f"<b>sweeps</b><table id='daskrl-sweeps'><tr>{head}</tr>{''.join(rows)}</table>"


def _number(x: Any) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{float(x):.1f}"
