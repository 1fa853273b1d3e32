"""The cluster a sweep runs on: an embedded ``LocalCluster`` sized for its trials, a scheduler's address, or the
caller's ``distributed.Client``; how many of its workers no run holds; its trials started as daskrl runs on it;
and the sweep's table sent to the dashboard page (the ``daskrl-sweeps`` topic)."""

from __future__ import annotations

import math
import time
from typing import Any

from daskrl.config import Config
from daskrl.monitor.dashboard import DashboardPlugin
from daskrl.protocol import SWEEPS_TOPIC
from daskrl.runtime import dask_internals
from daskrl.runtime.access.cluster import connect_cluster, default_n_workers
from daskrl.runtime.access.runs import list_runs
from daskrl.sweep.trials import Trial


class SweepCluster:
    def __init__(self, client: Any = None, scheduler: str = "", n_workers: int = 0, dashboard_address: str = ":0",
                 connect_timeout: float = 10.0) -> None:
        """``n_workers``: an embedded cluster's worker processes (ignored with ``client`` or ``scheduler``)."""
        self.session = connect_cluster(client if client is not None else (scheduler or None),
                                       n_workers=n_workers or default_n_workers(), dashboard_address=dashboard_address,
                                       timeout=connect_timeout, scheduler_plugins=(DashboardPlugin(),))
        self.client = self.session.client

    def start(self, config: Config) -> Any:
        """A trial's run, started on this cluster (see :func:`daskrl.start`)."""
        from daskrl.api import start

        return start(config, client=self.client)

    def total_workers(self) -> int:
        return len(dask_internals.cluster_workers(self.client))

    def free_workers(self) -> int:
        """Workers no live run holds."""
        table = list_runs(self.client)
        held = {w for run in table["runs"] for w in run["workers"]}
        return len(set(table["workers"]) - held)

    def publish(self, name: str, trials: list[Trial]) -> None:
        """The sweep's table for the dashboard page (a view: a failure here never stops the sweep)."""
        finished = [t.final_score for t in trials if t.status == "finished" and not math.isnan(t.final_score)]
        try:
            self.client.log_event(SWEEPS_TOPIC, {
                "sweep": name, "time": time.time(), "best": max(finished) if finished else None,
                "trials": [{k: v for k, v in t.row().items() if k != "note"} for t in trials]})
        except Exception:
            pass

    def close(self) -> None:
        self.session.close()


def embedded_workers(concurrent: int, need: int) -> int:
    """Worker processes of an embedded cluster for ``concurrent`` trials of ``need`` workers each (0 concurrent:
    as many trials as this machine's cores hold, and at least two)."""
    return need * (concurrent or max(2, default_n_workers() // need))
