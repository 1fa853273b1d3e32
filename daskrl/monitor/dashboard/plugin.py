"""The scheduler plugin behind the daskrl page: it keeps each run's history from the run's events and wires the
page (:mod:`.page`), the JSON API (:mod:`.api`) and the Prometheus gauges (:mod:`.prometheus`) into the scheduler's
running dashboard. It lives in the scheduler so that the history outlives any one client, and it reaches the
dashboard through :mod:`daskrl.runtime.dask_internals` only."""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from daskrl.monitor.dashboard import prometheus
from daskrl.monitor.dashboard.api import api_routes
from daskrl.monitor.dashboard.page import page_document
from daskrl.monitor.dashboard.runs import live_runs
from daskrl.monitor.history import MetricsStore, history_payload
from daskrl.protocol import EVENTS_TOPIC, LEAGUE_TOPIC, METRICS_TOPIC, PBT_TOPIC, SWEEPS_TOPIC
from daskrl.runtime import dask_internals
from daskrl.runtime.dask_internals import SchedulerPlugin

logger = logging.getLogger(__name__)

PLUGIN_NAME = "daskrl-dashboard"
PAGE = "daskrl"


def page_url(dashboard_link: str | None) -> str | None:
    """The daskrl page next to the Dask dashboard's status page (``http://h:8787/status`` -> ``.../daskrl``)."""
    if not dashboard_link:
        return None
    base = dashboard_link.rstrip("/")
    if base.endswith("/status"):
        base = base[: -len("/status")]
    return f"{base}/{PAGE}"


def dashboard_page(client) -> str | None:
    """The address of the daskrl page on ``client``'s cluster, or None when its scheduler serves no dashboard."""
    try:
        link = client.dashboard_link
    except Exception:
        return None
    if not link:
        return None
    try:
        installed = client.run_on_scheduler(_page_installed)
    except Exception:  # the scheduler cannot be asked (e.g. it refuses pickled functions): assume the page is there
        installed = True
    return page_url(link) if installed else None


def _page_installed(dask_scheduler) -> bool:
    plugin = dask_scheduler.plugins.get(PLUGIN_NAME)
    return bool(getattr(plugin, "installed", False))


class DashboardPlugin(SchedulerPlugin):
    """Adds the daskrl page, JSON routes and Prometheus gauges to the scheduler's running dashboard."""

    name = PLUGIN_NAME
    idempotent = True  # one page per scheduler, shared by every run on it

    def __init__(self) -> None:
        self.store = MetricsStore()
        self.installed = False

    async def start(self, scheduler) -> None:
        # no await in here: no event can slip between reading the log and receiving log_event() calls
        self._replay_logged_events(scheduler)
        dask_internals.add_scheduler_handlers(scheduler, {"daskrl_history": self.history})
        if self._add_page_and_api(scheduler):
            self._add_gauges()

    def _replay_logged_events(self, scheduler) -> None:
        """The events logged before this plugin started, both topics in the order they came (a run started again
        drops the PBT events of its previous life)."""
        logged = [(stamp, topic, msg) for topic in (METRICS_TOPIC, PBT_TOPIC, EVENTS_TOPIC, SWEEPS_TOPIC, LEAGUE_TOPIC)
                  for stamp, msg in scheduler.get_events(topic)]
        for stamp, topic, msg in sorted(logged, key=lambda event: event[0]):
            self.log_event(topic, msg, stamp)

    def _add_page_and_api(self, scheduler: Any) -> bool:
        """Serve the page and the JSON routes next to Dask's; False when there is no dashboard or it failed."""
        dask_app = dask_internals.dashboard_bokeh_app(scheduler)
        if dask_app is None:
            logger.info("daskrl dashboard: the scheduler serves no Dask dashboard; no daskrl page either")
            return False
        try:
            prefix = dask_app.prefix.rstrip("/") + "/"
            runs = partial(live_runs, scheduler)
            dask_internals.add_dashboard_page(scheduler, f"/{PAGE}", page_document(self.store, runs), prefix)
            dask_internals.add_http_routes(scheduler, api_routes(f"{prefix}{PAGE}", self.store, runs))
        except Exception:  # a view must never stop the scheduler
            logger.warning("daskrl dashboard: could not add the daskrl page", exc_info=True)
            return False
        self.installed = True
        return True

    def _add_gauges(self) -> None:
        try:
            prometheus.watch(self)
        except Exception:  # e.g. prometheus_client missing, or daskrl_* names taken by another collector
            logger.warning("daskrl dashboard: no daskrl gauges on /metrics", exc_info=True)

    def log_event(self, topic: str, msg: Any, stamp: float | None = None) -> None:
        if topic == METRICS_TOPIC:
            self.store.add(msg, stamp)
        elif topic == PBT_TOPIC:
            self.store.add_pbt(msg, stamp)
        elif topic == EVENTS_TOPIC:
            self.store.add_event(msg)
        elif topic == SWEEPS_TOPIC:
            self.store.add_sweep(msg)
        elif topic == LEAGUE_TOPIC:
            self.store.add_league(msg)

    async def history(self, run: str | None = None) -> dict[str, Any]:
        """Every report of a run the store kept (an attached handle's ``metrics()``)."""
        return history_payload(self.store, run)

    async def close(self) -> None:
        prometheus.unwatch(self)
