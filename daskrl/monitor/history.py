"""What a scheduler remembers of the runs on it: a bounded history of report rows per run, from the runner's
metrics events, and the JSON views of it that the dashboard serves."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from daskrl.monitor.stats import as_number

MAX_ROWS = 4000  # per run; older rows are thinned (every other one dropped), so a long run keeps its shape
MAX_RUNS = 20  # runs remembered by one scheduler; the oldest is forgotten first


@dataclass
class RunHistory:
    """The reports of one run, oldest first, plus its latest time shares."""

    run: str
    env: str = ""
    rows: list[dict[str, Any]] = field(default_factory=list)
    shares: dict[str, dict[str, float]] = field(default_factory=dict)
    stop_at: dict[str, Any] = field(default_factory=dict)
    updated: float = 0.0  # wall time of the last report
    generation: int = 0  # bumped whenever rows are replaced, so views that stream increments reload

    def add(self, msg: dict[str, Any], stamp: float) -> None:
        row = dict(msg["row"])
        if self.rows and as_number(row.get("time_s")) < as_number(self.rows[-1].get("time_s")):
            self.rows = []  # the same experiment name started again from scratch
            self.generation += 1
        self.rows.append(row)
        self.env = str(msg.get("env") or self.env)
        self.shares = msg.get("shares") or {}
        self.stop_at = msg.get("stop_at") or {}
        self.updated = stamp
        if len(self.rows) > MAX_ROWS:
            self.rows = self.rows[::2]
            self.generation += 1

    def latest_row(self) -> dict[str, Any] | None:
        return self.rows[-1] if self.rows else None


class MetricsStore:
    """The histories of the runs seen on this scheduler, in the order they started."""

    def __init__(self, max_runs: int = MAX_RUNS) -> None:
        self.max_runs = max_runs
        self.runs: dict[str, RunHistory] = {}

    def add(self, msg: Any, stamp: float | None = None) -> bool:
        """Record one ``daskrl-metrics`` event; a malformed one is ignored (it is a view, not a contract)."""
        if not isinstance(msg, dict) or not isinstance(msg.get("row"), dict) or not msg.get("run"):
            return False
        name = str(msg["run"])
        hist = self.runs.get(name)
        if hist is None:
            hist = self.runs[name] = RunHistory(name)
            while len(self.runs) > self.max_runs:
                del self.runs[next(iter(self.runs))]
        hist.add(msg, time.time() if stamp is None else stamp)
        return True

    def get(self, run: str | None = None) -> RunHistory | None:
        """A run by name, or the one that started last."""
        if run:
            return self.runs.get(run)
        return next(reversed(self.runs.values()), None)

    def names(self) -> list[str]:
        return list(self.runs)


def latest_payload(store: MetricsStore, run: str | None = None) -> dict[str, Any]:
    hist = store.get(run)
    return {"run": hist.run if hist else None, "env": hist.env if hist else None,
            "time": hist.updated if hist else None, "row": _clean(hist.latest_row()) if hist else None,
            "shares": hist.shares if hist else {}, "stop_at": hist.stop_at if hist else {}, "runs": store.names()}


def history_payload(store: MetricsStore, run: str | None = None) -> dict[str, Any]:
    hist = store.get(run)
    return {"run": hist.run if hist else None, "env": hist.env if hist else None,
            "rows": [_clean(r) for r in hist.rows] if hist else [], "shares": hist.shares if hist else {},
            "stop_at": hist.stop_at if hist else {}, "runs": store.names()}


def json_safe(value: Any) -> Any:
    """NaN and infinities (not JSON) become None, at any depth."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def _clean(row: dict[str, Any] | None) -> dict[str, Any] | None:
    """JSON-safe: NaN and infinities become None."""
    if row is None:
        return None
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
