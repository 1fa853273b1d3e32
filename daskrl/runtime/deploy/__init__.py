"""Clusters a run starts for itself and closes at its end (``--deploy slurm``, ``--deploy ssh``), built the way Dask
users build them: dask-jobqueue's ``SLURMCluster`` from Dask's own configuration (``jobqueue.yaml``, ``dask.config``)
plus the few sizes a run decides, ``distributed.SSHCluster`` on the hosts given. Either is a ``SpecCluster``: the
run gets a ``Client`` on it like on any cluster, and the cluster's ``close`` ends what it started (the jobs are
cancelled, the SSH processes end).

:func:`open_deployment` starts one and waits for its workers: all of them for a minute, then only those the run
cannot start without (an elastic run takes the rest as their jobs start); :func:`describe_deployment` is
``--show``'s dry run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from daskrl.errors import ClusterAccessError, ConfigError


@dataclass(frozen=True)
class DeploySpec:
    """What a run asks of its deployment (daskrl/driver fills it from the run's options)."""

    kind: str  # "slurm" or "ssh"
    workers: int  # worker processes the whole run uses
    start_with: int  # worker processes it cannot start without (an elastic run grows into the rest)
    jobs: int = 0
    job_cores: int = 0
    job_memory: str = ""
    walltime: str = ""
    hosts: tuple[str, ...] = ()
    dashboard_address: str = ":8787"
    wait_s: float = 600.0  # how long the jobs or hosts get to bring up ``start_with`` workers
    grace_s: float = 60.0  # how long the run waits for all of its workers before it starts with ``start_with``


def _builder(kind: str) -> Any:
    if kind == "slurm":
        from daskrl.runtime.deploy import slurm

        return slurm
    if kind == "ssh":
        from daskrl.runtime.deploy import ssh

        return ssh
    raise ConfigError([f"--deploy {kind}: no such deployment (local, slurm or ssh)"])


def prepare_deployment(kind: str) -> None:
    """Import what deployment ``kind`` needs, in the calling (main) thread, before it starts in the background: a
    missing package is refused here in one line, and imports that must run on the main thread do."""
    _builder(kind).prepare()


def describe_deployment(spec: DeploySpec) -> str:
    """What ``spec`` would start, as text (the SLURM job script with its job count; the SSH hosts' workers)."""
    return _builder(spec.kind).describe(spec)


def open_deployment(spec: DeploySpec, say: Callable[[str], None] = print) -> Any:
    """Start the cluster and its workers; return it once they are up (see :func:`_wait_for_workers`). A cluster
    that does not get the ones the run needs within ``spec.wait_s`` is closed (its jobs cancelled) and refused in
    one line."""
    builder = _builder(spec.kind)
    cluster = builder.start(spec)
    try:
        _wait_for_workers(cluster, spec, builder.pending, say)
    except BaseException:
        cluster.close()
        raise
    return cluster


def _wait_for_workers(cluster: Any, spec: DeploySpec, pending: Callable[[Any], str],
                      say: Callable[[str], None]) -> None:
    """Wait for every worker the run uses, for ``spec.grace_s`` at most; after that, start with ``start_with`` as
    soon as they are up (an elastic run takes the rest as their jobs start). Every 10 s, say what is missing."""
    start = time.monotonic()
    told = start
    while True:
        up = len(cluster.scheduler_info.get("workers", {}))
        waited = time.monotonic() - start
        if up >= spec.workers:
            return
        if up >= spec.start_with and waited >= spec.grace_s:
            say(f"daskrl: --deploy {spec.kind}: {up} of {spec.workers} worker processes up after {waited:.0f} s "
                f"({pending(cluster)}): the run starts with them, the rest join as they come")
            return
        if waited > spec.wait_s:
            raise ClusterAccessError(
                f"--deploy {spec.kind}: {up} of the {spec.start_with} worker processes the run needs to start came up "
                f"within {spec.wait_s:g} s ({pending(cluster)}); what was started is stopped again "
                "(--wait-for-workers gives them longer)")
        if time.monotonic() - told >= 10:
            say(f"daskrl: waiting for --deploy {spec.kind} workers: {up} of {spec.workers} up ({pending(cluster)})")
            told = time.monotonic()
        time.sleep(0.5)


def connect_deployment(spec: DeploySpec, say: Callable[[str], None] = print, **connect: Any) -> Any:
    """A :class:`~daskrl.runtime.access.cluster.ClusterSession` on a deployment started for the run: its client and the
    cluster are closed with the session. ``connect``: :func:`~daskrl.runtime.access.cluster.connect_cluster`'s options."""
    from distributed import Client

    from daskrl.runtime.access.cluster import connect_cluster

    cluster = open_deployment(spec, say)
    try:
        session = connect_cluster(Client(cluster, direct_to_workers=True), **connect)
    except BaseException:
        cluster.close()
        raise
    session.owns_client = True
    session.deployment = cluster
    return session
