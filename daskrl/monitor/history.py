"""What a scheduler remembers of the runs on it: a bounded history of report rows per run (with each policy's rows
when the run trains several), from the runner's metrics events, its PBT replacements, from the PBT events, and the
JSON views of it that the dashboard serves."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from daskrl.monitor.stats import as_number

MAX_ROWS = 4000  # per run; older rows are thinned (every other one dropped), so a long run keeps its shape
MAX_RUNS = 20  # runs remembered by one scheduler; the oldest is forgotten first
MAX_PBT_EVENTS = 2000  # per run; the oldest are dropped first (a round every ~1e5 env steps: far more than a run has)
LATEST_PBT_EVENTS = 10  # PBT replacements in /daskrl/api/latest (the history has them all)


@dataclass
class RunHistory:
    """The reports of one run, oldest first, plus its latest time shares. ``policies[i]``: the policy rows of the
    report ``rows[i]`` (empty with one policy), so thinning keeps them together; ``pbt``: the PBT replacements."""

    run: str
    env: str = ""
    rows: list[dict[str, Any]] = field(default_factory=list)
    policies: list[list[dict[str, Any]]] = field(default_factory=list)
    pbt: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)  # changes made from outside (a handle's set, scale)
    pbt_count: int = 0  # PBT events ever added (grows when the oldest are dropped too): views compare it
    policy_set: set[int] = field(default_factory=set)  # the policies the run reported rows of
    shares: dict[str, dict[str, float]] = field(default_factory=dict)
    replay: list[dict[str, Any]] = field(default_factory=list)  # off-policy: each replay shard's latest numbers
    #: a league's newest payoff table among its current players (``players``, ``payoff``: payoff.csv's rows)
    league: dict[str, Any] = field(default_factory=dict)
    stop_at: dict[str, Any] = field(default_factory=dict)
    updated: float = 0.0  # wall time of the last report
    generation: int = 0  # bumped whenever rows are replaced, so views that stream increments reload

    def add(self, msg: dict[str, Any], stamp: float) -> None:
        row = dict(msg["row"])
        if self.rows and as_number(row.get("time_s")) < as_number(self.rows[-1].get("time_s")):
            self.rows, self.policies, self.pbt = [], [], []  # the same experiment name started again from scratch
            self.events = []
            self.policy_set = set()
            self.generation += 1
            self.pbt_count += 1
        self.rows.append(row)
        self.policies.append([{**r, "policy": k} for r in msg.get("policies") or [] if (k := _policy_id(r)) is not None])
        self.policy_set.update(r["policy"] for r in self.policies[-1])
        self.env = str(msg.get("env") or self.env)
        self.shares = msg.get("shares") or {}
        self.replay = [dict(s) for s in msg.get("replay") or [] if isinstance(s, dict)]
        self.stop_at = msg.get("stop_at") or {}
        self.updated = stamp
        if len(self.rows) > MAX_ROWS:
            self.rows, self.policies = self.rows[::2], self.policies[::2]
            self.generation += 1

    def add_pbt(self, msg: dict[str, Any]) -> None:
        """One PBT replacement (``Exploit.as_dict()`` plus ``run`` and ``time_s``)."""
        self.pbt.append(dict(msg))
        self.pbt_count += 1
        if len(self.pbt) > MAX_PBT_EVENTS:
            del self.pbt[: len(self.pbt) - MAX_PBT_EVENTS]

    def latest_row(self) -> dict[str, Any] | None:
        return self.rows[-1] if self.rows else None

    def latest_policies(self) -> list[dict[str, Any]]:
        """Each policy's row of the latest report (empty with one policy)."""
        return self.policies[-1] if self.policies else []

    def policy_rows(self, start: int = 0) -> list[dict[str, Any]]:
        """The policy rows of the reports from ``rows[start]`` on, oldest first (as ``policies.csv`` holds them)."""
        return [r for report in self.policies[start:] for r in report]

    def policy_ids(self) -> list[int]:
        """The policies the run reported rows of (empty with one policy)."""
        return sorted(self.policy_set)


class MetricsStore:
    """The histories of the runs seen on this scheduler, in the order they started."""

    def __init__(self, max_runs: int = MAX_RUNS) -> None:
        self.max_runs = max_runs
        self.runs: dict[str, RunHistory] = {}
        self.sweeps: dict[str, dict[str, Any]] = {}  # each sweep's newest table (the daskrl-sweeps topic)

    def add_sweep(self, msg: Any) -> bool:
        """Keep a sweep's newest table of trials; a malformed event is ignored."""
        if not isinstance(msg, dict) or not msg.get("sweep") or not isinstance(msg.get("trials"), list):
            return False
        self.sweeps[str(msg["sweep"])] = msg
        return True

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

    def add_pbt(self, msg: Any, stamp: float | None = None) -> bool:
        """Record one ``daskrl-pbt`` event (a malformed one is ignored). A run not seen yet is started with it."""
        if not isinstance(msg, dict) or not msg.get("run") or "target" not in msg or "source" not in msg:
            return False
        name = str(msg["run"])
        if name not in self.runs:
            self.runs[name] = RunHistory(name, updated=time.time() if stamp is None else stamp)
            while len(self.runs) > self.max_runs:
                del self.runs[next(iter(self.runs))]
        self.runs[name].add_pbt(msg)
        return True

    def add_league(self, msg: Any) -> bool:
        """Keep a league's newest payoff table (``daskrl-league``) for a run already seen; a malformed one is
        ignored. Lists may come as tuples (the scheduler's event log sends them through msgpack)."""
        if not isinstance(msg, dict) or str(msg.get("run")) not in self.runs \
                or not isinstance(msg.get("payoff"), (list, tuple)):
            return False
        self.runs[str(msg["run"])].league = {**msg, "players": list(msg.get("players") or []),
                                             "payoff": [dict(r) for r in msg["payoff"]]}
        return True

    def add_event(self, msg: Any) -> bool:
        """Record one ``daskrl-events`` event (a run handle's ``set`` or ``scale``) of a run already seen."""
        if not isinstance(msg, dict) or str(msg.get("run")) not in self.runs or not msg.get("event"):
            return False
        events = self.runs[str(msg["run"])].events
        events.append(dict(msg))
        del events[:-MAX_PBT_EVENTS]
        return True

    def get(self, run: str | None = None) -> RunHistory | None:
        """A run by name, or the one that started last."""
        if run:
            return self.runs.get(run)
        return next(reversed(self.runs.values()), None)

    def names(self) -> list[str]:
        return list(self.runs)


def latest_payload(store: MetricsStore, run: str | None = None) -> dict[str, Any]:
    """The latest report of a run: its row, each policy's row (``policies``) and the latest PBT replacements."""
    hist = store.get(run)
    return {"run": hist.run if hist else None, "env": hist.env if hist else None,
            "time": hist.updated if hist else None, "row": _clean(hist.latest_row()) if hist else None,
            "policies": [_clean(r) for r in hist.latest_policies()] if hist else [],
            "pbt": json_safe(hist.pbt[-LATEST_PBT_EVENTS:]) if hist else [],
            "shares": hist.shares if hist else {}, "replay": hist.replay if hist else [],
            "stop_at": hist.stop_at if hist else {}, "runs": store.names()}


def history_payload(store: MetricsStore, run: str | None = None) -> dict[str, Any]:
    """Every report of a run kept: its rows, the policy rows of all of them (``policies``, one list with a
    ``policy`` column, as ``policies.csv``) and its PBT replacements, oldest first."""
    hist = store.get(run)
    return {"run": hist.run if hist else None, "env": hist.env if hist else None,
            "rows": [_clean(r) for r in hist.rows] if hist else [],
            "policies": [_clean(r) for r in hist.policy_rows()] if hist else [],
            "pbt": json_safe(hist.pbt) if hist else [], "events": json_safe(hist.events) if hist else [],
            "shares": hist.shares if hist else {},
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


def _policy_id(row: Any) -> int | None:
    """The policy index of a policy row, or None for a row that names none."""
    k = as_number(row.get("policy")) if isinstance(row, dict) else math.nan
    return int(k) if math.isfinite(k) and k >= 0 and k == int(k) else None


def _clean(row: dict[str, Any] | None) -> dict[str, Any] | None:
    """JSON-safe: NaN and infinities become None."""
    if row is None:
        return None
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}


def sweeps_payload(store: MetricsStore, run: str | None = None) -> dict[str, Any]:
    """``api/sweeps``: every sweep's newest table of trials (status, env steps, returns) and best return so far."""
    return {"sweeps": list(store.sweeps.values())}
