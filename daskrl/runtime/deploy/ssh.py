"""``--deploy ssh``: distributed's ``SSHCluster`` on the hosts given, logged in to with the user's own SSH setup
(asyncssh reads ``~/.ssh``: keys, ``known_hosts``, ``config``). The first host also runs the scheduler, and the
run's worker processes (one thread each) are spread evenly over every host, the first included.
"""

from __future__ import annotations

import math
from typing import Any

from daskrl.errors import ClusterAccessError, ConfigError


def _cluster_class() -> Any:
    try:
        import asyncssh  # noqa: F401  (SSHCluster logs in with it)
        from distributed import SSHCluster
    except ImportError:
        raise ConfigError(["--deploy ssh needs asyncssh: pip install 'daskrl[ssh]'"]) from None
    return SSHCluster


def prepare() -> None:
    _cluster_class()


def _host(text: str) -> tuple[str, str | None]:
    """``user@host`` -> (host, user); ``host`` -> (host, None)."""
    user, at, host = text.rpartition("@")
    return (host, user) if at else (text, None)


def workers_per_host(spec: Any) -> int:
    return math.ceil(spec.workers / len(spec.hosts))


def cluster_options(spec: Any) -> dict[str, Any]:
    """``SSHCluster``'s arguments: the scheduler's host first, then every host for workers."""
    hosts = [spec.hosts[0], *spec.hosts]
    first, _ = _host(spec.hosts[0])
    return {"hosts": [_host(h)[0] for h in hosts],
            "connect_options": [{"username": user} if (user := _host(h)[1]) else {} for h in hosts],
            "worker_options": {"nthreads": 1, "n_workers": workers_per_host(spec)},
            "scheduler_options": {"host": first, "port": 0, "dashboard_address": spec.dashboard_address}}


def start(spec: Any) -> Any:
    cls = _cluster_class()
    try:
        return cls(**cluster_options(spec))
    except Exception as exc:  # a host that refuses the login, a Python that is not there, a port closed
        cause = exc.__cause__ or exc
        raise ClusterAccessError(f"--deploy ssh: the cluster on {', '.join(spec.hosts)} did not start: "
                                 f"{type(cause).__name__}: {cause} (each host must accept an SSH login with your "
                                 "key, have the same Python and daskrl as here, and reach the first host)") from exc


def describe(spec: Any) -> str:
    options = cluster_options(spec)
    lines = [f"# --deploy ssh: the scheduler on {spec.hosts[0]}, {workers_per_host(spec)} worker process(es) of one "
             f"thread on each host, for a run of {spec.workers} worker processes"]
    lines += [f"{host}: dask worker --nthreads 1 --nworkers {workers_per_host(spec)}" for host in spec.hosts]
    lines.append(f"(SSHCluster arguments: {options})")
    return "\n".join(lines)


def pending(cluster: Any) -> str:
    return "SSHCluster is starting the workers"
