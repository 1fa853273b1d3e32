"""Cluster access: one function that returns a ready ``Client``, embedded or existing.

``connect_cluster()`` starts an embedded ``LocalCluster`` sized to the machine (worker processes with one
thread each; with ``processes=False`` the workers run as threads of this process, for debugging with pdb and for
tests where processes are not the point); ``connect_cluster("tcp://host:8786")`` or ``connect_cluster(client)``
uses an existing cluster.
Either way the daskrl plugins are installed (bus registry and dashboard page on the scheduler, bus + shared
memory on every worker; an embedded cluster's workers are forked from a server that imported daskrl and torch
once), and :meth:`ClusterSession.close` closes only what this call opened: never a cluster or client the user
brought.

Security: a cluster that uses TLS (``tls://`` addresses) needs a ``distributed.security.Security`` with the CA
and a certificate/key pair it trusts (``existing_cluster.tls_security`` builds one from PEM files, as ``dask
scheduler --tls-ca-file/--tls-cert/--tls-key`` does). An embedded cluster given one uses TLS on every connection.
Reaching an existing cluster, and what goes wrong there in one line each, is :mod:`daskrl.runtime.access.existing_cluster`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dask
from distributed import Client, LocalCluster

from daskrl.errors import ClusterAccessError
from daskrl.runtime import dask_internals
from daskrl.runtime.access.existing_cluster import open_client
from daskrl.runtime.access.runs import RunRegistry
from daskrl.runtime.memory import shm
from daskrl.runtime.messaging.registry import BusRegistry
from daskrl.runtime.workers import worker_server
from daskrl.runtime.workers.worker_plugin import WorkerPlugin


@contextlib.contextmanager
def _fast_worker_start(preload_torch: bool):
    """Embedded workers come from the forkserver that imported daskrl and torch once (:mod:`daskrl.runtime.
    worker_server`, started here unless the ``daskrl`` command did first thing): workers start and close much faster
    than with 'spawn' (where each worker imports torch itself: see docs/performance.md), and forked workers share
    those pages, which lowers the run's summed PSS. Their nannies notice a started worker within 5 ms, not Dask's 50
    (:func:`~daskrl.runtime.dask_internals.poll_worker_starts_often`).

    The setting stays for the rest of this (driver) process: a nanny reads it again whenever it restarts a
    killed worker, and a restart from the forkserver does not import torch again."""
    if preload_torch and worker_server.available():
        worker_server.start()
        worker_server.use()
        dask_internals.keep_forkserver_preload()
        dask_internals.poll_worker_starts_often()
        dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"})
    yield


@contextlib.contextmanager
def _workers_that_did_not_start():
    """An embedded worker process that died as it started is one line naming the likeliest cause, not Dask's chain
    of tracebacks: a script that starts the run at its top level (each worker process imports it again and ends
    there, saying so: :func:`worker_server.refuse_a_run_while_a_worker_imports_the_script`)."""
    try:
        yield
    except RuntimeError as exc:
        if "failed to start" not in str(exc):
            raise
        script = getattr(sys.modules.get("__main__"), "__file__", None)
        cause = f"if {script} starts the run at its top level, {worker_server.MAIN_GUARD}" if script else \
            "the first lines of the log say why"
        raise ClusterAccessError(f"the embedded cluster's worker processes did not start ({exc}); {cause}") from None


#: Dask's housekeeping timers an embedded cluster runs less often: setting -> (Dask's default, daskrl's). Every worker
#: process and the driver (scheduler, nannies) woke for them about 160 times a second; in a Breakout run on two cores
#: the worker processes' event loops took 0.116 of a core and the driver 0.076, with these 0.053 and 0.048, and the
#: components' threads got 5% more of the cores (docs/performance.md). What they trade: Dask's worker profiles (they
#: sample threads that run tasks, and daskrl's components run in threads of their own, so they were empty), the
#: system plots every 2 s, the memory limit checked every second, the event loop's delays measured every 200 ms.
QUIET_HOUSEKEEPING = {
    "distributed.worker.profile.enabled": (True, False),
    "distributed.admin.system-monitor.interval": ("500ms", "2s"),
    "distributed.worker.memory.monitor-interval": ("100ms", "1s"),
    "distributed.admin.tick.interval": ("20ms", "200ms"),
}


def _quiet_housekeeping() -> None:
    """Apply :data:`QUIET_HOUSEKEEPING` where the setting is still Dask's default (a user's own value stays). It stays
    for the rest of this process, as the forkserver does: nannies made later (``--adapt``) read it then, and give it
    to their workers."""
    for key, (dask_default, ours) in QUIET_HOUSEKEEPING.items():
        if dask.config.get(key, None) == dask_default:
            dask.config.set({key: ours})


#: the reaper's file (daskrl/runtime/cleanup/reaper.py), started by path
REAPER = Path(__file__).resolve().parents[1] / "cleanup" / "reaper.py"


def _start_reaper(run_id: str) -> subprocess.Popen | None:
    """A process that removes this run's shared memory if the driver is killed (see reaper.py: started by path
    so that it imports only the standard library)."""
    try:
        return subprocess.Popen([sys.executable, str(REAPER), str(os.getpid()), run_id],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
    except OSError:
        return None


def default_n_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


@dataclass
class ClusterSession:
    """A client plus what must be closed with it."""

    client: Client
    cluster: LocalCluster | None = None
    owns_client: bool = False
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    reaper: subprocess.Popen | None = None
    #: a cluster started for this run alone (``--deploy slurm|ssh``: daskrl/runtime/deploy/), closed with the session
    deployment: Any = None

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
        if self.deployment is not None:  # its jobs are cancelled, its SSH processes end
            self.deployment.close()
            self.deployment = None
        # every process of an embedded cluster is gone now: remove anything a killed one left behind
        shm.sweep(self.run_id, dead_only=True)
        if self.reaper is not None:
            self.reaper.terminate()
            self.reaper.wait(timeout=10)
            self.reaper = None

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
    processes: bool = True,
    scheduler_plugins: tuple = (),
    log_path: str | None = None,
    silence_logs: int | bool = logging.WARNING,
) -> ClusterSession:
    """Return a ready :class:`ClusterSession` (see module docstring).

    ``security``: a ``distributed.security.Security`` (see :func:`tls_security`) for a TLS cluster, or for an
    embedded cluster whose every connection should use TLS. ``scheduler_plugins`` are installed after daskrl's
    own (the runner adds the dashboard page this way). ``log_path``: the worker processes of an embedded cluster
    write their log lines there (see :mod:`daskrl.runtime.logs`) instead of to the terminal. ``silence_logs``: the
    level below which an embedded cluster keeps Dask's lines of this process (its scheduler's, its nannies') from
    their handlers, or False for none (``--log-level debug``).
    """
    cluster = None
    if isinstance(scheduler, Client):
        client, owns = scheduler, False
    elif isinstance(scheduler, str):
        client = open_client(scheduler, security, timeout)
        owns = True
    elif scheduler is None:
        worker_server.refuse_a_run_while_a_worker_imports_the_script()
        _quiet_housekeeping()
        with _fast_worker_start(preload_torch and processes), _workers_that_did_not_start():
            cluster = LocalCluster(
                n_workers=n_workers or default_n_workers(),
                threads_per_worker=1,
                processes=processes,
                dashboard_address=dashboard_address,
                memory_limit=memory_limit,
                silence_logs=silence_logs,
                security=security,
            )
        client = Client(cluster, direct_to_workers=True, security=security)
        owns = True
    else:
        raise TypeError(f"scheduler must be an address, a distributed.Client or None, not {type(scheduler).__name__}")
    try:
        for plugin in (BusRegistry(), RunRegistry(), *scheduler_plugins):
            client.register_plugin(plugin)
        client.register_plugin(WorkerPlugin(owner_pid=os.getpid() if cluster is not None else None,
                                            log_path=log_path if cluster is not None else None))
    except Exception:
        if owns:
            client.close()
        if cluster is not None:
            cluster.close()
        raise
    run_id = run_id or uuid.uuid4().hex[:8]
    return ClusterSession(client, cluster, owns, run_id, _start_reaper(run_id) if cluster is not None else None)
