"""Shared fixtures: a real LocalCluster with worker processes, started once per test module."""

from __future__ import annotations

import os

import pytest

from daskrl.runtime import connect_cluster
from daskrl.runtime.shm import list_segments


@pytest.fixture(scope="module")
def session():
    """A 2-worker embedded cluster with the daskrl plugins; checks nothing leaks in /dev/shm after close."""
    s = connect_cluster(n_workers=2, dashboard_address=None)
    yield s
    run_id = s.run_id
    s.close()
    assert list_segments(run_id) == [], "daskrl shared-memory segments left after the cluster closed"


@pytest.fixture(scope="module")
def workers(session):
    return sorted(session.client.scheduler_info()["workers"])


def set_worker_env(client, name: str, value: str | None) -> None:
    """Set or clear an environment variable in every worker process."""

    def apply(name=name, value=value):
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value

    client.run(apply)
