"""The daskrl page of the Dask dashboard: live plots, a JSON API and Prometheus gauges of the runs on a cluster.

The runner publishes one event per report on the scheduler's event topic ``daskrl-metrics``
(:data:`~daskrl.protocol.METRICS_TOPIC`). :class:`DashboardPlugin` lives in the scheduler, keeps a bounded history
per run from those events (:mod:`daskrl.monitor.history`), and serves it from the scheduler's own HTTP server, so
the same page works for an embedded ``LocalCluster`` and for a ``dask scheduler`` started from the command line
(with daskrl importable there):

- ``<dashboard>/daskrl``: a Bokeh page (frames/s, episode return with its spread, policy lag, losses and KL,
  where each component's time goes), refreshed every second; with several policies, one line per policy of each
  per-policy quantity, and the PBT replacements (``daskrl-pbt`` events, :data:`~daskrl.protocol.PBT_TOPIC`) as
  markers on the return plot and a table;
- ``<dashboard>/daskrl/api/latest`` and ``<dashboard>/daskrl/api/history``: JSON (``?run=NAME`` picks a run;
  the default is the run that started last), with each policy's rows and the PBT replacements;
- ``<dashboard>/metrics``: ``daskrl_*`` gauges labelled by run, next to Dask's own.

It reaches the scheduler's dashboard through :mod:`daskrl.runtime.dask_internals` only. Importing this module is
cheap (Bokeh is imported when the page is added).
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

from tornado import web

from daskrl.monitor.history import MetricsStore, RunHistory, history_payload, json_safe, latest_payload
from daskrl.monitor.plots import series, share_bars, shares_figure, time_figures
from daskrl.monitor.policy_plots import pbt_series, pbt_table_html, policy_figures, policy_series, split_policies
from daskrl.monitor.stats import as_number
from daskrl.protocol import METRICS_TOPIC, PBT_TOPIC
from daskrl.runtime import dask_internals
from daskrl.runtime.dask_internals import SchedulerPlugin

logger = logging.getLogger(__name__)

PLUGIN_NAME = "daskrl-dashboard"
PAGE = "daskrl"

# Gauges on /metrics: row key -> help text (each one ``daskrl_<key>``, labelled by run and env).
GAUGES = {
    "env_steps": "environment steps sampled so far (frames, before frame skip)",
    "fps": "environment frames per second over the last 10 s",
    "episode_return_mean": "mean return of the last 100 finished episodes",
    "episode_return_std": "standard deviation of the return of the last 100 finished episodes",
    "episode_length_mean": "mean length of the last 100 finished episodes",
    "episodes": "episodes finished so far",
    "policy_version": "version of the learner's policy (one per training step)",
    "policy_lag": "mean policy versions between acting and training on a sample",
    "loss": "total APPO loss of the last training step",
    "value_loss": "value loss of the last training step",
    "entropy": "policy entropy of the last training step",
    "approx_kl": "approximate KL divergence between behaviour and trained policy",
    "clip_fraction": "fraction of samples whose policy ratio was clipped",
    "time_s": "seconds the run has trained (resumed runs included)",
    "incidents": "failures survived on purpose so far (counted and logged by kind)",
    "messages_dropped": "topic-bus messages that found no receiver, over all workers",
}


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


# ---- the plugin ----


class DashboardPlugin(SchedulerPlugin):
    """Adds the daskrl page, JSON routes and Prometheus gauges to the scheduler's running dashboard."""

    name = PLUGIN_NAME
    idempotent = True  # one page per scheduler, shared by every run on it

    def __init__(self) -> None:
        self.store = MetricsStore()
        self.installed = False

    async def start(self, scheduler) -> None:
        # no await in here: no event can slip between reading the log and receiving log_event() calls; both
        # topics in the order they came (a run started again drops the PBT events of its previous life)
        logged = [(stamp, topic, msg) for topic in (METRICS_TOPIC, PBT_TOPIC)
                  for stamp, msg in scheduler.get_events(topic)]
        for stamp, topic, msg in sorted(logged, key=lambda event: event[0]):
            self.log_event(topic, msg, stamp)
        dask_app = dask_internals.dashboard_bokeh_app(scheduler)
        if dask_app is None:
            logger.info("daskrl dashboard: the scheduler serves no Dask dashboard; no daskrl page either")
            return
        try:
            prefix = dask_app.prefix.rstrip("/") + "/"
            store = self.store

            def document(_scheduler: Any, template_variables: dict | None, doc: Any) -> None:
                _page_doc(store, template_variables, doc)

            dask_internals.add_dashboard_page(scheduler, f"/{PAGE}", document, prefix)
            dask_internals.add_http_routes(scheduler, [
                (re.escape(f"{prefix}{PAGE}/api/latest"), _JsonHandler, {"store": self.store, "what": "latest"}),
                (re.escape(f"{prefix}{PAGE}/api/history"), _JsonHandler, {"store": self.store, "what": "history"}),
            ])
            self.installed = True
        except Exception:  # a view must never stop the scheduler
            logger.warning("daskrl dashboard: could not add the daskrl page", exc_info=True)
            return
        try:
            _collector().plugins.add(self)
        except Exception:  # e.g. prometheus_client missing, or daskrl_* names taken by another collector
            logger.warning("daskrl dashboard: no daskrl gauges on /metrics", exc_info=True)

    def log_event(self, topic: str, msg: Any, stamp: float | None = None) -> None:
        if topic == METRICS_TOPIC:
            self.store.add(msg, stamp)
        elif topic == PBT_TOPIC:
            self.store.add_pbt(msg, stamp)

    async def close(self) -> None:
        if _COLLECTOR is not None:
            _COLLECTOR.plugins.discard(self)


def _page_doc(store: MetricsStore, template_variables: dict | None, doc: Any) -> None:
    """Build one browser session's document (Bokeh calls this per page load)."""
    page = RunPage(store)
    doc.title = "daskrl"
    doc.add_root(page.root)
    doc.add_periodic_callback(page.update, 1000)
    if template_variables is not None:
        dask_internals.apply_dask_template(doc, template_variables)


class _JsonHandler(web.RequestHandler):
    """``/daskrl/api/latest`` and ``/daskrl/api/history`` (``?run=NAME``; default: the run that started last)."""

    def initialize(self, store: MetricsStore, what: str) -> None:
        self.store, self.what = store, what

    def get(self) -> None:
        run = self.get_argument("run", None)
        self.set_header("Content-Type", "application/json")
        if run and self.store.get(run) is None:
            self.set_status(404)
            self.write(json.dumps({"error": f"no run named {run!r}", "runs": self.store.names()}))
            return
        payload = latest_payload(self.store, run) if self.what == "latest" else history_payload(self.store, run)
        self.write(json.dumps(json_safe(payload), allow_nan=False))


# ---- the page ----


class RunPage:
    """One browser session of ``/daskrl``: a run chooser, a summary line, the live plots and, with PBT, a table of
    its latest replacements. The plots are rebuilt when the chosen run's policies change (another run chosen, or
    the first report of a run with several): each policy has a source of its own and a line in each plot."""

    LATEST = "(latest run)"

    def __init__(self, store: MetricsStore) -> None:
        from bokeh.layouts import column, row
        from bokeh.models import ColumnDataSource, Div, Select

        self.store = store
        self.source = ColumnDataSource(series([]), name="daskrl-series")
        self.share_source = ColumnDataSource(share_bars({}))
        self.pbt_source = ColumnDataSource(pbt_series([]), name="daskrl-pbt")
        self.policy_sources: dict[int, Any] = {}
        self.chooser = Select(title="run", value=self.LATEST, options=[self.LATEST], width=320)
        self.summary = Div(text="waiting for the first report of a daskrl run…", sizing_mode="stretch_width")
        self.pbt_table = Div(text="", visible=False, sizing_mode="stretch_width", name="daskrl-pbt-table")
        self.body = column(sizing_mode="stretch_width")
        self.layout_for: tuple[int, ...] | None = None
        self.key: tuple | None = None
        self.pbt_key: tuple | None = None
        self.seen = 0
        self.layout(())
        self.root = column(row(self.chooser, self.summary, sizing_mode="stretch_width"), self.body, self.pbt_table,
                           sizing_mode="stretch_width")
        self.update()

    def layout(self, policies: tuple[int, ...]) -> None:
        """The plots for a run with these policies (none: a one-policy run), with empty policy sources."""
        from bokeh.layouts import gridplot
        from bokeh.models import ColumnDataSource

        self.policy_sources = {k: ColumnDataSource(policy_series([]), name=f"daskrl-policy-{k}") for k in policies}
        self.shares = shares_figure(self.share_source, [])
        if policies:
            f = self.figures = policy_figures(self.source, self.policy_sources, self.pbt_source)
            rows = [[f["fps"], f["return"]], [f["length"], f["policy_lag"]], [f["losses"], f["entropy"]],
                    [f["kl"], f["learning_rate"]], [f["policy_version"], self.shares]]
        else:
            f = self.figures = time_figures(self.source)
            rows = [[f["fps"], f["return"]], [f["policy_lag"], f["losses"]], [f["kl"], self.shares]]
        self.body.children = [gridplot(rows, sizing_mode="stretch_width", merge_tools=False,
                                       toolbar_options={"logo": None})]
        self.layout_for, self.key = policies, None

    def update(self) -> None:
        names = self.store.names()
        if self.chooser.options != [self.LATEST, *names]:
            self.chooser.options = [self.LATEST, *names]
        hist = self.store.get(None if self.chooser.value == self.LATEST else self.chooser.value)
        if hist is None:
            return
        policies = tuple(hist.policy_ids())
        if policies != self.layout_for:
            self.layout(policies)
        key = (hist.run, id(hist), hist.generation)
        if key != self.key:
            self.key, self.seen = key, len(hist.rows)
            self.source.data = series(hist.rows)
            by_policy = split_policies(hist.policy_rows())
            for k, source in self.policy_sources.items():
                source.data = policy_series(by_policy.get(k, []))
        elif len(hist.rows) > self.seen:
            self.source.stream(series(hist.rows[self.seen:]))
            for k, rows in split_policies(hist.policy_rows(self.seen)).items():
                self.policy_sources[k].stream(policy_series(rows))
            self.seen = len(hist.rows)
        if (key, hist.pbt_count) != self.pbt_key:
            self.pbt_key = (key, hist.pbt_count)
            self.pbt_source.data = pbt_series(hist.pbt)
            self.pbt_table.text = pbt_table_html(hist.pbt)
            self.pbt_table.visible = bool(hist.pbt)
        bars = share_bars(hist.shares)
        components = sorted(hist.shares)
        if list(self.shares.y_range.factors) != components:
            self.shares.y_range.factors = components
            self.shares.height = max(230, 90 + 30 * len(components))
        self.share_source.data = bars
        self.summary.text = summary_html(hist)


def summary_html(hist: RunHistory) -> str:
    import html

    row = hist.latest_row() or {}
    ret, std = as_number(row.get("episode_return_mean")), as_number(row.get("episode_return_std"))
    lag = as_number(row.get("policy_lag"))
    parts = [f"<b>{html.escape(hist.run)}</b> ({html.escape(hist.env)})",
             f"{int(as_number(row.get('env_steps'), 0)):,} env steps", f"{as_number(row.get('fps'), 0):,.0f} frames/s",
             "return n/a" if math.isnan(ret) else f"return {ret:.1f} ± {std:.1f}",
             f"version {row.get('policy_version', 0)}", "" if math.isnan(lag) else f"lag {lag:.1f}",
             f"{as_number(row.get('time_s'), 0):,.0f} s"]
    evaluated = next((r for r in reversed(hist.rows) if not math.isnan(as_number(r.get("eval_return_mean")))), None)
    if evaluated is not None:
        parts.append(f"evaluation return {as_number(evaluated['eval_return_mean']):.1f}")
    parts += [f"{html.escape(k)} {as_number(v):.3g}" for k, v in sorted(row.items()) if k.startswith("info/")]
    parts += policies_summary(hist)
    incidents = int(as_number(row.get("incidents"), 0))
    if incidents:
        parts.append(f"<span title='failures survived on purpose; see the run log'>{incidents} incidents</span>")
    progress = budget_fraction(row, hist.stop_at)
    if progress is not None:
        parts.append(f"{100 * progress:.0f}% of the budget")
    if time.time() - hist.updated > 30:
        parts.append(f"last report {time.time() - hist.updated:,.0f} s ago")
    return "<p style='font-size:14px'>" + " &nbsp;|&nbsp; ".join(p for p in parts if p) + "</p>"


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


def budget_fraction(row: dict[str, Any], stop_at: dict[str, Any]) -> float | None:
    """How far the run is toward its step or time budget (whichever comes first), or None without one."""
    fractions = []
    if stop_at.get("env_steps"):
        fractions.append(as_number(row.get("env_steps"), 0) / stop_at["env_steps"])
    if stop_at.get("seconds"):
        fractions.append(as_number(row.get("time_s"), 0) / stop_at["seconds"])
    return min(1.0, max(fractions)) if fractions else None


# ---- Prometheus ----


class _Collector:
    """``daskrl_*`` gauges of every running plugin's runs, registered once per process on prometheus_client's
    default REGISTRY (which the scheduler's ``/metrics`` handler serves)."""

    def __init__(self) -> None:
        self.plugins: weakref.WeakSet[DashboardPlugin] = weakref.WeakSet()

    def collect(self) -> Iterator:
        from prometheus_client.core import GaugeMetricFamily

        gauges = {k: GaugeMetricFamily(f"daskrl_{k}", text, labels=["run", "env"]) for k, text in GAUGES.items()}
        reported = GaugeMetricFamily("daskrl_last_report_timestamp_seconds",
                                     "wall time of the run's last report (a stalled run stops moving it)",
                                     labels=["run", "env"])
        shares = GaugeMetricFamily("daskrl_time_share", "share of a component's wall time spent on an activity",
                                   labels=["run", "component", "activity"])
        for plugin in list(self.plugins):
            for hist in list(plugin.store.runs.values()):
                row = hist.latest_row() or {}
                labels = [hist.run, hist.env]
                for key, gauge in gauges.items():
                    value = as_number(row.get(key))
                    if not math.isnan(value):
                        gauge.add_metric(labels, value)
                reported.add_metric(labels, hist.updated)
                for component, parts in hist.shares.items():
                    for activity, share in parts.items():
                        shares.add_metric([hist.run, component, activity], float(share))
        yield from gauges.values()
        yield reported
        yield shares


_COLLECTOR: _Collector | None = None
_COLLECTOR_LOCK = threading.Lock()


def _collector() -> _Collector:
    global _COLLECTOR
    with _COLLECTOR_LOCK:
        if _COLLECTOR is None:
            import prometheus_client

            collector = _Collector()
            prometheus_client.REGISTRY.register(collector)
            _COLLECTOR = collector
        return _COLLECTOR
