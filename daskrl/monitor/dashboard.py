"""The daskrl page of the Dask dashboard: live plots, a JSON API and Prometheus gauges of the runs on a cluster.

The runner publishes one event per report on the scheduler's event topic ``daskrl-metrics`` (see
``daskrl.runner._Run.publish_metrics``). :class:`DashboardPlugin` lives in the scheduler, keeps a bounded history
per run from those events, and serves it from the scheduler's own HTTP server, so the same page works for an
embedded ``LocalCluster`` and for a ``dask scheduler`` started from the command line (with daskrl importable
there):

- ``<dashboard>/daskrl``: a Bokeh page (frames/s, episode return with its spread, policy lag, losses and KL,
  where each component's time goes), refreshed every second;
- ``<dashboard>/daskrl/api/latest`` and ``<dashboard>/daskrl/api/history``: JSON (``?run=NAME`` picks a run;
  the default is the run that started last);
- ``<dashboard>/metrics``: ``daskrl_*`` gauges labelled by run, next to Dask's own.

Importing this module is cheap (Bokeh is imported when the page is added): ``connect_cluster`` imports it.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import re
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin
from tornado import web

from daskrl.monitor.stats import as_number

logger = logging.getLogger(__name__)

PLUGIN_NAME = "daskrl-dashboard"
METRICS_TOPIC = "daskrl-metrics"  # the runner's topic (daskrl.runner.METRICS_TOPIC)
PAGE = "daskrl"
MAX_ROWS = 4000  # per run; older rows are thinned (every other one dropped), so a long run keeps its shape
MAX_RUNS = 20  # runs remembered by one scheduler; the oldest is forgotten first

# Colours of the time-share activities (components time "waiting", "env", ...; see docs/metrics.md).
ACTIVITY_COLORS = {
    "env": "#2ca02c", "inference": "#1f77b4", "train": "#d62728", "waiting": "#bdbdbd", "params": "#9467bd",
    "publish": "#8c564b", "gather": "#17becf", "scatter": "#bcbd22", "other": "#eeeeee",
}
# Colours of the fps and return curves: distinct from the activities' so a screenshot can tell them apart.
FPS_COLOR, RETURN_COLOR, LAG_COLOR = "#3949ab", "#00897b", "#8e24aa"
_SPARE_COLORS = ["#ff7f0e", "#e377c2", "#7f7f7f", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5"]

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


# ---- what the scheduler remembers ----


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


# ---- the plugin ----


class DashboardPlugin(SchedulerPlugin):
    """Adds the daskrl page, JSON routes and Prometheus gauges to the scheduler's running dashboard."""

    name = PLUGIN_NAME
    idempotent = True  # one page per scheduler, shared by every run on it

    def __init__(self) -> None:
        self.store = MetricsStore()
        self.installed = False

    async def start(self, scheduler) -> None:
        # no await in here: no event can slip between reading the log and receiving log_event() calls
        for stamp, msg in scheduler.get_events(METRICS_TOPIC):
            self.store.add(msg, stamp)
        app = getattr(scheduler, "http_application", None)
        dask_app = _dask_bokeh_app(app) if app is not None else None
        if dask_app is None:
            logger.info("daskrl dashboard: the scheduler serves no Dask dashboard; no daskrl page either")
            return
        try:
            prefix = dask_app.prefix.rstrip("/") + "/"
            _add_page(scheduler, app, prefix, self.store)
            app.add_handlers(r".*", [
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

    def log_event(self, topic: str, msg: Any) -> None:
        if topic == METRICS_TOPIC:
            self.store.add(msg)

    async def close(self) -> None:
        if _COLLECTOR is not None:
            _COLLECTOR.plugins.discard(self)


def _dask_bokeh_app(app):
    """Dask's own Bokeh application on this HTTP server, or None when the dashboard is off."""
    try:
        from bokeh.server.tornado import BokehTornado
    except ImportError:
        return None
    return next((a for a in getattr(app, "applications", []) if isinstance(a, BokehTornado)), None)


def _add_page(scheduler, app, prefix: str, store: MetricsStore) -> None:
    from distributed.dashboard.core import BokehApplication
    from tornado.ioloop import IOLoop

    variables: dict[str, Any] = {}
    try:  # the Dask navigation bar, with a link to this page added to every Dask page
        from distributed.dashboard.scheduler import template_variables

        variables = template_variables(scheduler)
        if PAGE not in variables["pages"]:
            variables["pages"].append(PAGE)
    except Exception:
        logger.debug("daskrl dashboard: no Dask navigation bar", exc_info=True)
    bokeh_app = BokehApplication({f"/{PAGE}": functools.partial(_page_doc, store, bool(variables))}, scheduler,
                                 prefix=prefix, template_variables=variables)
    app.add_application(bokeh_app)
    bokeh_app.initialize(IOLoop.current())
    bokeh_app.start()


def _page_doc(store: MetricsStore, dask_template: bool, scheduler, extra: dict, doc) -> None:
    """Build one browser session's document (Bokeh calls this per page load)."""
    page = RunPage(store)
    doc.title = "daskrl"
    doc.add_root(page.root)
    doc.add_periodic_callback(page.update, 1000)
    if dask_template:
        from distributed.dashboard.components.scheduler import BOKEH_THEME, env

        doc.template = env.get_template("simple.html")
        doc.template_variables.update(extra)
        doc.theme = BOKEH_THEME


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
        self.write(json.dumps(_json_safe(payload), allow_nan=False))


# ---- the page ----

_SERIES = ["time_s", "env_steps", "fps", "episode_return_mean", "episode_return_std", "policy_lag", "policy_version",
           "loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction"]


def series(rows: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Columns for a ColumnDataSource (missing values as NaN, which Bokeh draws as gaps), with the return band."""
    cols = {k: [as_number(r.get(k)) for r in rows] for k in _SERIES}
    pairs = list(zip(cols["episode_return_mean"], cols["episode_return_std"], strict=True))
    cols["return_low"] = [m - s for m, s in pairs]
    cols["return_high"] = [m + s for m, s in pairs]
    return cols


def share_bars(shares: dict[str, dict[str, float]]) -> dict[str, list]:
    """Stacked horizontal bars: one row per component, one segment per activity, "other" for untimed time."""
    cols: dict[str, list] = {"component": [], "activity": [], "left": [], "right": [], "share": [], "color": []}
    spare = iter(_SPARE_COLORS * 4)
    colors = dict(ACTIVITY_COLORS)
    for component in sorted(shares):
        parts = dict(sorted(shares[component].items(), key=lambda kv: (kv[0] == "waiting", kv[0])))
        parts["other"] = max(0.0, 1.0 - sum(parts.values()))
        left = 0.0
        for activity, share in parts.items():
            if activity not in colors:
                colors[activity] = next(spare, "#7f7f7f")
            cols["component"].append(component)
            cols["activity"].append(activity)
            cols["left"].append(left)
            cols["right"].append(left + share)
            cols["share"].append(share)
            cols["color"].append(colors[activity])
            left += share
    return cols


def time_figures(source, x: str = "time_s", x_label: str = "seconds", width_mode: str = "stretch_width"):
    """The time-series figures shared by the live page and the HTML report."""
    from bokeh.models import HoverTool
    from bokeh.plotting import figure

    def fig(title: str, y_label: str, x_range=None):
        f = figure(title=title, height=230, sizing_mode=width_mode, x_axis_label=x_label, y_axis_label=y_label,
                   tools="pan,wheel_zoom,box_zoom,reset,save", **({"x_range": x_range} if x_range else {}))
        f.toolbar.logo = None
        return f

    fps = fig("Environment frames per second", "frames/s")
    fps.line(x, "fps", source=source, line_width=2, color=FPS_COLOR)
    ret = fig("Episode return (mean ± std of the last 100 episodes)", "return", fps.x_range)
    ret.varea(x=x, y1="return_low", y2="return_high", source=source, fill_color=RETURN_COLOR, fill_alpha=0.2)
    ret.line(x, "episode_return_mean", source=source, line_width=2, color=RETURN_COLOR)
    lag = fig("Policy lag (versions between acting and training)", "versions", fps.x_range)
    lag.line(x, "policy_lag", source=source, line_width=2, color=LAG_COLOR)
    loss = fig("Learner losses and policy entropy", "value", fps.x_range)
    for key, color in (("loss", "#d62728"), ("policy_loss", "#ff7f0e"), ("value_loss", "#8c564b"),
                       ("entropy", "#e377c2")):
        loss.line(x, key, source=source, line_width=2, color=color, legend_label=key)
    kl = fig("Approximate KL and clip fraction", "value", fps.x_range)
    for key, color in (("approx_kl", "#17becf"), ("clip_fraction", "#bcbd22")):
        kl.line(x, key, source=source, line_width=2, color=color, legend_label=key)
    for f in (loss, kl):
        f.legend.location = "top_right"
        f.legend.click_policy = "hide"
    for f in (fps, ret, lag, loss, kl):
        f.add_tools(HoverTool(tooltips=[("env steps", "@env_steps{0,0}"), ("time", "@time_s{0.0} s"),
                                        ("value", "$y{0.000}")], mode="vline"))
    return {"fps": fps, "return": ret, "policy_lag": lag, "losses": loss, "kl": kl}


def shares_figure(source, components: list[str], width_mode: str = "stretch_width"):
    from bokeh.models import FactorRange, HoverTool
    from bokeh.plotting import figure

    f = figure(title="Where each component's time goes (share of wall time)", y_range=FactorRange(*components),
               x_range=(0, 1), height=max(230, 90 + 30 * len(components)), sizing_mode=width_mode,
               tools="save", x_axis_label="share of wall time")
    f.toolbar.logo = None
    f.hbar(y="component", left="left", right="right", height=0.7, color="color", line_color="white",
           legend_field="activity", source=source)
    f.add_tools(HoverTool(tooltips=[("component", "@component"), ("activity", "@activity"),
                                    ("share", "@share{0.0%}")]))
    f.legend.orientation = "horizontal"
    f.legend.location = "top_center"
    f.add_layout(f.legend[0], "below")
    return f


class RunPage:
    """One browser session of ``/daskrl``: a run chooser, a summary line and the live plots."""

    LATEST = "(latest run)"

    def __init__(self, store: MetricsStore) -> None:
        from bokeh.layouts import column, gridplot, row
        from bokeh.models import ColumnDataSource, Div, Select

        self.store = store
        self.source = ColumnDataSource(series([]), name="daskrl-series")
        self.share_source = ColumnDataSource(share_bars({}))
        self.chooser = Select(title="run", value=self.LATEST, options=[self.LATEST], width=320)
        self.summary = Div(text="waiting for the first report of a daskrl run…", sizing_mode="stretch_width")
        self.figures = time_figures(self.source)
        self.shares = shares_figure(self.share_source, [])
        self.key: tuple | None = None
        self.seen = 0
        f = self.figures
        grid = gridplot([[f["fps"], f["return"]], [f["policy_lag"], f["losses"]], [f["kl"], self.shares]],
                        sizing_mode="stretch_width", merge_tools=False, toolbar_options={"logo": None})
        self.root = column(row(self.chooser, self.summary, sizing_mode="stretch_width"), grid,
                           sizing_mode="stretch_width")
        self.update()

    def update(self) -> None:
        names = self.store.names()
        if self.chooser.options != [self.LATEST, *names]:
            self.chooser.options = [self.LATEST, *names]
        hist = self.store.get(None if self.chooser.value == self.LATEST else self.chooser.value)
        if hist is None:
            return
        key = (hist.run, id(hist), hist.generation)
        if key != self.key:
            self.key, self.seen = key, len(hist.rows)
            self.source.data = series(hist.rows)
        elif len(hist.rows) > self.seen:
            self.source.stream(series(hist.rows[self.seen:]))
            self.seen = len(hist.rows)
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
    progress = budget_fraction(row, hist.stop_at)
    if progress is not None:
        parts.append(f"{100 * progress:.0f}% of the budget")
    if time.time() - hist.updated > 30:
        parts.append(f"last report {time.time() - hist.updated:,.0f} s ago")
    return "<p style='font-size:14px'>" + " &nbsp;|&nbsp; ".join(p for p in parts if p) + "</p>"


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


# ---- helpers ----


def _json_safe(value: Any) -> Any:
    """NaN and infinities (not JSON) become None, at any depth."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _clean(row: dict[str, Any] | None) -> dict[str, Any] | None:
    """JSON-safe: NaN and infinities become None."""
    if row is None:
        return None
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
