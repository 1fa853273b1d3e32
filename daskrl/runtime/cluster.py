"""Cluster access: one function that returns a ready ``Client``, embedded or existing.

``connect_cluster()`` starts an embedded ``LocalCluster`` sized to the machine (worker processes with one
thread each); ``connect_cluster("tcp://host:8786")`` or ``connect_cluster(client)`` uses an existing cluster.
Either way the daskrl plugins are installed (bus registry on the scheduler, bus + shared memory on every
worker, which also imports daskrl and torch at start), and :meth:`ClusterSession.close` closes only what
this call opened: never a cluster or client the user brought.
"""

from __future__ import annotations

import logging
import os
import uuid
from dataclasses import dataclass, field

from distributed import Client, LocalCluster

from daskrl.runtime import shm
from daskrl.runtime.bus import BusPlugin
from daskrl.runtime.registry import BusRegistry


def default_n_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


@dataclass
class ClusterSession:
    """A client plus what must be closed with it."""

    client: Client
    cluster: LocalCluster | None = None
    owns_client: bool = False
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])

    @property
    def embedded(self) -> bool:
        return self.cluster is not None

    @property
    def dashboard_link(self) -> str | None:
        try:
            return self.client.dashboard_link
        except Exception:
            return None

    def close(self) -> None:
        if self.owns_client:
            self.client.close()
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None
        # every process of an embedded cluster is gone now: remove anything a killed one left behind
        shm.sweep(self.run_id, dead_only=True)

    def __enter__(self) -> ClusterSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def connect_cluster(
    scheduler: str | Client | None = None,
    n_workers: int | None = None,
    security=None,
    dashboard_address: str | None = ":8787",
    memory_limit: str | float | None = "auto",
    run_id: str | None = None,
    preload_torch: bool = True,
    timeout: float = 60.0,
) -> ClusterSession:
    """Return a ready :class:`ClusterSession` (see module docstring)."""
    cluster = None
    if isinstance(scheduler, Client):
        client, owns = scheduler, False
    elif isinstance(scheduler, str):
        client = Client(scheduler, security=security, direct_to_workers=True, timeout=timeout)
        owns = True
    elif scheduler is None:
        cluster = LocalCluster(
            n_workers=n_workers or default_n_workers(),
            threads_per_worker=1,
            processes=True,
            dashboard_address=dashboard_address,
            memory_limit=memory_limit,
            silence_logs=logging.WARNING,
            security=security,
        )
        client = Client(cluster, direct_to_workers=True, security=security)
        owns = True
    else:
        raise TypeError(f"scheduler must be an address, a distributed.Client or None, not {type(scheduler).__name__}")
    try:
        client.register_plugin(BusRegistry())
        client.register_plugin(BusPlugin(preload_torch=preload_torch))
    except Exception:
        if owns:
            client.close()
        if cluster is not None:
            cluster.close()
        raise
    return ClusterSession(client, cluster, owns, run_id or uuid.uuid4().hex[:8])
