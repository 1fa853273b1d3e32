"""The daskrl Bokeh page, ``<dashboard>/daskrl``: the runs training on the cluster now, a run chooser, a summary
line, the chosen run's live plots, with PBT a table of the latest replacements and with a league its payoff heat
map, refreshed every second from the plugin's store. Bokeh is imported when a page is built, not when this module is."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from daskrl.monitor.dashboard.league_view import league_view
from daskrl.monitor.dashboard.replay_table import replay_table_html
from daskrl.monitor.dashboard.runs import runs_table_html, sweeps_table_html
from daskrl.monitor.dashboard.summary import summary_html
from daskrl.monitor.figures.league_plots import payoff_cells, payoff_figure
from daskrl.monitor.figures.plots import series, share_bars, shares_figure, time_figures
from daskrl.monitor.figures.policy_plots import pbt_series, pbt_table_html, policy_figures, policy_series, split_policies
from daskrl.monitor.history import MetricsStore, RunHistory
from daskrl.runtime import dask_internals

REFRESH_MS = 1000


def page_document(store: MetricsStore, runs: Callable[[], list[dict[str, Any]]] = list
                  ) -> Callable[[Any, dict | None, Any], None]:
    """What :func:`~daskrl.runtime.dask_internals.add_dashboard_page` calls to build one browser session's
    document (once per page load), with Dask's navigation bar when it gives template variables; ``runs()`` lists
    the runs training on the cluster now."""

    def document(_scheduler: Any, template_variables: dict | None, doc: Any) -> None:
        page = RunPage(store, runs)
        doc.title = "daskrl"
        doc.add_root(page.root)
        doc.add_periodic_callback(page.update, REFRESH_MS)
        if template_variables is not None:
            dask_internals.apply_dask_template(doc, template_variables)

    return document


class RunPage:
    """One browser session of ``/daskrl``. The plots are rebuilt when the chosen run's policies change (another
    run chosen, or the first report of a run with several): each policy has a source of its own and a line in each
    plot."""

    LATEST = "(latest run)"

    def __init__(self, store: MetricsStore, runs: Callable[[], list[dict[str, Any]]] = list) -> None:
        from bokeh.layouts import column, row
        from bokeh.models import ColumnDataSource, Div, Select

        self.store = store
        self.runs = runs
        self.runs_table = Div(text="", sizing_mode="stretch_width", name="daskrl-runs")
        self.source = ColumnDataSource(series([]), name="daskrl-series")
        self.share_source = ColumnDataSource(share_bars({}))
        self.pbt_source = ColumnDataSource(pbt_series([]), name="daskrl-pbt")
        self.policy_sources: dict[int, Any] = {}
        self.chooser = Select(title="run", value=self.LATEST, options=[self.LATEST], width=320)
        self.summary = Div(text="waiting for the first report of a daskrl run…", sizing_mode="stretch_width")
        self.pbt_table = Div(text="", visible=False, sizing_mode="stretch_width", name="daskrl-pbt-table")
        self.replay_table = Div(text="", visible=False, sizing_mode="stretch_width", name="daskrl-replay-table")
        self.body = column(sizing_mode="stretch_width")
        self.payoff_source = ColumnDataSource(payoff_cells([], []), name="daskrl-payoff-cells")
        self.payoff_box = column(visible=False)  # a league's heat map, built for its players
        self.league_key: tuple | None = None  # the run and report the heat map shows
        self.layout_for: tuple[int, ...] | None = None
        self.key: tuple | None = None  # the run whose rows the sources hold: (name, history object, generation)
        self.pbt_key: tuple | None = None
        self.seen = 0  # rows of that run already in the sources
        self.layout(())
        self.root = column(self.runs_table, row(self.chooser, self.summary, sizing_mode="stretch_width"), self.body,
                           self.replay_table, self.pbt_table, self.payoff_box, sizing_mode="stretch_width")
        self.update()

    def layout(self, policies: tuple[int, ...]) -> None:
        """The plots for a run with these policies (none: a one-policy run), with empty policy sources."""
        from bokeh.layouts import gridplot
        from bokeh.models import ColumnDataSource

        self.policy_sources = {k: ColumnDataSource(policy_series([]), name=f"daskrl-policy-{k}") for k in policies}
        self.shares = shares_figure(self.share_source, [])
        if policies:
            self.figures = policy_figures(self.source, self.policy_sources, self.pbt_source)
            f = self.figures
            rows = [[f["fps"], f["return"]], [f["length"], f["policy_lag"]], [f["losses"], f["entropy"]],
                    [f["kl"], f["learning_rate"]], [f["policy_version"], self.shares]]
        else:
            self.figures = time_figures(self.source)
            f = self.figures
            rows = [[f["fps"], f["return"]], [f["policy_lag"], f["losses"]], [f["kl"], self.shares]]
        self.body.children = [gridplot(rows, sizing_mode="stretch_width", merge_tools=False,
                                       toolbar_options={"logo": None})]
        self.layout_for = policies
        self.key = None

    def update(self) -> None:
        """Bokeh's periodic callback: list the live runs, offer the runs seen so far and follow the chosen one's new
        reports."""
        self.runs_table.text = runs_table_html(self.runs()) + sweeps_table_html(self.store.sweeps)
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
            self._reload_series(hist, key)
        elif len(hist.rows) > self.seen:
            self._stream_series(hist)
        if (key, hist.pbt_count) != self.pbt_key:
            self._show_pbt(hist, key)
        self._show_shares(hist)
        self._show_replay(hist)
        self._show_league(hist)
        self.summary.text = summary_html(hist)

    def _reload_series(self, hist: RunHistory, key: tuple) -> None:
        """Another run (or the same one started again): replace every source's data."""
        self.key = key
        self.seen = len(hist.rows)
        self.source.data = series(hist.rows)
        by_policy = split_policies(hist.policy_rows())
        for k, source in self.policy_sources.items():
            source.data = policy_series(by_policy.get(k, []))

    def _stream_series(self, hist: RunHistory) -> None:
        """New reports of the same run: send the browser only the new points."""
        self.source.stream(series(hist.rows[self.seen:]))
        for k, rows in split_policies(hist.policy_rows(self.seen)).items():
            self.policy_sources[k].stream(policy_series(rows))
        self.seen = len(hist.rows)

    def _show_pbt(self, hist: RunHistory, key: tuple) -> None:
        self.pbt_key = (key, hist.pbt_count)
        self.pbt_source.data = pbt_series(hist.pbt)
        self.pbt_table.text = pbt_table_html(hist.pbt)
        self.pbt_table.visible = bool(hist.pbt)

    def _show_replay(self, hist: RunHistory) -> None:
        """Off-policy runs: the replay shards' table (hidden for a run without shards)."""
        text = replay_table_html(hist.replay)
        if text != self.replay_table.text:
            self.replay_table.text = text
        self.replay_table.visible = bool(hist.replay)

    def _show_league(self, hist: RunHistory) -> None:
        """A league's payoff heat map (hidden for a run without one), built anew when its players change; a member
        of a league of runs shows the league's table joined from every member run's reports."""
        view = league_view(self.store, hist)
        if view is None:
            self.league_key = None
            self.payoff_box.visible = False
            return
        key = (hist.run, tuple(view.players), view.title, view.key(self.store))
        if key == self.league_key:
            return
        if key[:3] != (self.league_key or (None, (), None))[:3]:
            self.payoff_box.children = [payoff_figure(self.payoff_source, view.players, view.title)]
        self.league_key = key
        self.payoff_source.data = payoff_cells(view.rows, view.players)
        self.payoff_box.visible = True

    def _show_shares(self, hist: RunHistory) -> None:
        """Where each component's time goes: one bar per component, the plot as tall as they need."""
        bars = share_bars(hist.shares)
        components = sorted(hist.shares)
        if list(self.shares.y_range.factors) != components:
            self.shares.y_range.factors = components
            self.shares.height = max(230, 90 + 30 * len(components))
        self.share_source.data = bars
