"""The daskrl page of the Dask dashboard: live plots, a JSON API and Prometheus gauges of the runs on a cluster.

The runner publishes one event per report on the scheduler's event topic ``daskrl-metrics``
(:data:`~daskrl.protocol.METRICS_TOPIC`). :class:`DashboardPlugin` lives in the scheduler, keeps a bounded history
per run from those events (:mod:`daskrl.monitor.history`), and serves it from the scheduler's own HTTP server, so
the same page works for an embedded ``LocalCluster`` and for a ``dask scheduler`` started from the command line
(with daskrl importable there). One module per job:

- :mod:`.plugin`: the scheduler plugin that keeps the history and wires the other three into the dashboard;
- :mod:`.page` (with :mod:`.summary`, its summary line): ``<dashboard>/daskrl``, a Bokeh page (frames/s, episode
  return with its spread, policy lag, losses and KL, where each component's time goes), refreshed every second;
  with several policies, one line per policy of each per-policy quantity, and the PBT replacements (``daskrl-pbt``
  events, :data:`~daskrl.protocol.PBT_TOPIC`) as markers on the return plot and a table;
- :mod:`.api`: ``<dashboard>/daskrl/api/latest`` and ``<dashboard>/daskrl/api/history``, JSON (``?run=NAME``
  picks a run; the default is the run that started last), with each policy's rows and the PBT replacements;
- :mod:`.prometheus`: ``<dashboard>/metrics``, ``daskrl_*`` gauges labelled by run, next to Dask's own.

It reaches the scheduler's dashboard through :mod:`daskrl.runtime.dask_internals` only. Importing this package is
cheap (Bokeh is imported when the page is added).
"""

from daskrl.monitor.dashboard.page import RunPage
from daskrl.monitor.dashboard.plugin import PAGE, PLUGIN_NAME, DashboardPlugin, dashboard_page, page_url
from daskrl.monitor.dashboard.summary import summary_html

__all__ = ["PAGE", "PLUGIN_NAME", "DashboardPlugin", "RunPage", "dashboard_page", "page_url", "summary_html"]
