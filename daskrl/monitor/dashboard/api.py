"""The daskrl JSON API on the scheduler's HTTP server: ``<prefix>daskrl/api/latest`` (each run's last report),
``<prefix>daskrl/api/history`` (its kept history), ``<prefix>daskrl/api/league`` (its league's payoff table, joined
over the member runs of a league of runs) and ``<prefix>daskrl/api/runs`` (the runs training on the cluster now), for
scripts and tests that want numbers rather than a page."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from tornado import web

from daskrl.monitor.dashboard.league_view import league_payload
from daskrl.monitor.history import MetricsStore, history_payload, json_safe, latest_payload, sweeps_payload

#: route name -> the payload it serves, from the store and a run's name (None: the run that started last)
PAYLOADS: dict[str, Callable[[MetricsStore, str | None], dict[str, Any]]] = {
    "latest": latest_payload,
    "history": history_payload,
    "sweeps": sweeps_payload,
    "league": league_payload,
}


class JsonHandler(web.RequestHandler):
    """One route of the API (``?run=NAME`` picks a run; the default is the run that started last; an unknown
    name answers 404 with the names it knows)."""

    def initialize(self, store: MetricsStore, payload: Callable[[MetricsStore, str | None], dict[str, Any]]) -> None:
        self.store = store
        self.payload = payload

    def get(self) -> None:
        run = self.get_argument("run", None)
        self.set_header("Content-Type", "application/json")
        if run and self.store.get(run) is None:
            self.set_status(404)
            self.write(json.dumps({"error": f"no run named {run!r}", "runs": self.store.names()}))
            return
        self.write(json.dumps(json_safe(self.payload(self.store, run)), allow_nan=False))


class RunsHandler(web.RequestHandler):
    """``api/runs``: the runs training on the cluster now (see :mod:`daskrl.monitor.dashboard.runs`)."""

    def initialize(self, runs: Callable[[], list[dict[str, Any]]]) -> None:
        self.runs = runs

    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.write(json.dumps(json_safe({"runs": self.runs()}), allow_nan=False))


def api_routes(page_path: str, store: MetricsStore,
               runs: Callable[[], list[dict[str, Any]]]) -> list[tuple[str, type, dict[str, Any]]]:
    """Tornado routes ``(pattern, handler, kwargs)`` for each API under ``page_path`` (``<prefix>daskrl``);
    ``runs()`` lists the live runs."""
    routes = [(re.escape(f"{page_path}/api/{name}"), JsonHandler, {"store": store, "payload": payload})
              for name, payload in PAYLOADS.items()]
    return [*routes, (re.escape(f"{page_path}/api/runs"), RunsHandler, {"runs": runs})]
