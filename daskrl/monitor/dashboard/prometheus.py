"""The daskrl gauges on the scheduler's ``/metrics``: one collector per process, registered once on
prometheus_client's default REGISTRY (which the scheduler's ``/metrics`` handler serves), that reads the runs of
every dashboard plugin it watches at each scrape, so a gauge is never stale and never kept by hand."""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from daskrl.monitor.history import MetricsStore, RunHistory
from daskrl.monitor.stats import as_number

if TYPE_CHECKING:
    from prometheus_client.core import GaugeMetricFamily

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


class StoreOwner(Protocol):
    """What the collector watches: a dashboard plugin, held weakly so that a plugin gone takes its runs along."""

    store: MetricsStore


class Collector:
    """``daskrl_*`` gauges of the runs of every watched plugin."""

    def __init__(self) -> None:
        self.plugins: weakref.WeakSet[StoreOwner] = weakref.WeakSet()

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
                add_run(hist, gauges, reported, shares)
        yield from gauges.values()
        yield reported
        yield shares


def add_run(hist: RunHistory, gauges: dict[str, GaugeMetricFamily], reported: GaugeMetricFamily,
            shares: GaugeMetricFamily) -> None:
    """One run's samples: its last row's numbers, the time of its last report and its components' time shares."""
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


_COLLECTOR: Collector | None = None
_COLLECTOR_LOCK = threading.Lock()


def watch(plugin: StoreOwner) -> None:
    """Serve ``plugin``'s runs on /metrics (the collector is registered at the first call in this process)."""
    global _COLLECTOR
    with _COLLECTOR_LOCK:
        if _COLLECTOR is None:
            import prometheus_client

            collector = Collector()
            prometheus_client.REGISTRY.register(collector)
            _COLLECTOR = collector
        _COLLECTOR.plugins.add(plugin)


def unwatch(plugin: StoreOwner) -> None:
    """Stop serving ``plugin``'s runs (a scheduler that closes)."""
    if _COLLECTOR is not None:
        _COLLECTOR.plugins.discard(plugin)
