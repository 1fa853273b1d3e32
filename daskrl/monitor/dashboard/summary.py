"""The summary line at the top of the daskrl page: one run's state in words (steps, speed, return, lag, budget,
incidents, and with several policies the best one and the PBT replacements), as HTML from its history."""

from __future__ import annotations

import html
import math
import time
from typing import Any

from daskrl.monitor.history import RunHistory
from daskrl.monitor.stats import as_number

#: a run silent this long gets "last report N s ago" in its summary
STALE_AFTER_S = 30


def summary_html(hist: RunHistory) -> str:
    """The run's state as one line of HTML, its parts joined by bars (a part with nothing to say is left out)."""
    row = hist.latest_row() or {}
    parts = [f"<b>{html.escape(hist.run)}</b> ({html.escape(hist.env)})", *progress_parts(row)]
    evaluated = next((r for r in reversed(hist.rows) if not math.isnan(as_number(r.get("eval_return_mean")))), None)
    if evaluated is not None:
        parts.append(f"evaluation return {as_number(evaluated['eval_return_mean']):.1f}")
    if row.get("curriculum_task") is not None:  # a curriculum's task now (its moves: the events below)
        parts.append(f"curriculum task {int(as_number(row['curriculum_task'], 0))}")
    parts += [f"{html.escape(k)} {as_number(v):.3g}" for k, v in sorted(row.items()) if k.startswith("info/")]
    parts += policies_summary(hist)
    parts += league_summary(hist)
    incidents = int(as_number(row.get("incidents"), 0))
    if incidents:
        parts.append(f"<span title='failures survived on purpose; see the run log'>{incidents} incidents</span>")
    progress = budget_fraction(row, hist.stop_at)
    if progress is not None:
        parts.append(f"{100 * progress:.0f}% of the budget")
    if hist.events:
        last = hist.events[-1]
        detail = " ".join(f"{k}={v}" for k, v in sorted((last.get("detail") or {}).items()))
        parts.append(f"last change at {as_number(last.get('env_steps'), 0):,.0f} env steps: "
                     f"{html.escape(str(last['event']))} {html.escape(detail)}")
    silent_s = time.time() - hist.updated
    if silent_s > STALE_AFTER_S:
        parts.append(f"last report {silent_s:,.0f} s ago")
    return "<p style='font-size:14px'>" + " &nbsp;|&nbsp; ".join(p for p in parts if p) + "</p>"


def progress_parts(row: dict[str, Any]) -> list[str]:
    """Steps, speed, return, version, lag and time of the latest report (an empty part where a number is n/a)."""
    ret = as_number(row.get("episode_return_mean"))
    std = as_number(row.get("episode_return_std"))
    lag = as_number(row.get("policy_lag"))
    return [
        f"{int(as_number(row.get('env_steps'), 0)):,} env steps",
        f"{as_number(row.get('fps'), 0):,.0f} frames/s",
        "return n/a" if math.isnan(ret) else f"return {ret:.1f} ± {std:.1f}",
        f"version {row.get('policy_version', 0)}",
        "" if math.isnan(lag) else f"lag {lag:.1f}",
        f"{as_number(row.get('time_s'), 0):,.0f} s",
    ]


def policies_summary(hist: RunHistory) -> list[str]:
    """With several policies: how many, the best one now, and the PBT replacements so far."""
    rows = hist.latest_policies()
    if not rows:
        return []
    parts = [f"{len(rows)} policies"]
    ranked = [(as_number(r.get("episode_return_mean")), r["policy"]) for r in rows]
    ranked = [(ret, k) for ret, k in ranked if not math.isnan(ret)]
    if ranked:
        ret, k = max(ranked)
        parts.append(f"best: policy {k} (return {ret:.1f})")
    if hist.pbt:
        n = len(hist.pbt)
        parts.append(f"{n} PBT replacement{'s' if n > 1 else ''} (last in round {hist.pbt[-1].get('round', '?')})")
    return parts


def league_summary(hist: RunHistory) -> list[str]:
    """With a league: its players now, and the member rated highest."""
    elo = hist.league.get("elo") or {}
    members = {name: as_number(rating) for name, rating in elo.items() if "@" not in name}
    if not members:
        return []
    best = max(members, key=members.__getitem__)
    return [f"league of {len(elo)} players, best Elo: {html.escape(best)} ({members[best]:.0f})"]


def budget_fraction(row: dict[str, Any], stop_at: dict[str, Any]) -> float | None:
    """How far the run is toward its step or time budget (whichever comes first), or None without one."""
    fractions = []
    if stop_at.get("env_steps"):
        fractions.append(as_number(row.get("env_steps"), 0) / stop_at["env_steps"])
    if stop_at.get("seconds"):
        fractions.append(as_number(row.get("time_s"), 0) / stop_at["seconds"])
    return min(1.0, max(fractions)) if fractions else None
