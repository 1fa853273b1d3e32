"""Shared fixtures: real clusters. ``session`` has worker processes and lives for a test module; ``inproc`` is a
fresh cluster per test whose workers are threads of the test process (as distributed's own ``gen_cluster``), for
the tests where processes are not the point: nothing one test leaves behind can reach the next."""

from __future__ import annotations

import os
import time

import pytest

from daskrl.runtime import connect_cluster
from daskrl.runtime.shm import list_segments


def _embedded(n_workers: int):
    """An embedded cluster of ``n_workers`` worker processes with the daskrl plugins, closed after; checks nothing of
    its run is left in /dev/shm."""
    s = connect_cluster(n_workers=n_workers, dashboard_address=None)
    yield s
    run_id = s.run_id
    s.close()
    assert list_segments(run_id) == [], "daskrl shared-memory segments left after the cluster closed"


@pytest.fixture(scope="module")
def session():
    """A 2-worker embedded cluster (see _embedded)."""
    yield from _embedded(2)


@pytest.fixture(scope="module")
def workers(session):
    return sorted(session.client.scheduler_info()["workers"])


@pytest.fixture(scope="module")
def cluster():
    """A 3-worker embedded cluster of worker processes (what this process registers does not reach them by
    itself; see _embedded)."""
    yield from _embedded(3)


@pytest.fixture(scope="module")
def hosts(cluster):
    return sorted(cluster.client.scheduler_info()["workers"])


@pytest.fixture
def inproc():
    """A fresh 2-worker cluster in this process (see the module docstring); checks its segments are gone after."""
    s = connect_cluster(n_workers=2, dashboard_address=None, processes=False, preload_torch=False)
    try:
        yield s
    finally:
        s.close()
    assert list_segments(s.run_id) == [], "daskrl shared-memory segments left after the cluster closed"


def set_worker_env(client, name: str, value: str | None) -> None:
    """Set or clear an environment variable in every worker process."""

    def apply(name=name, value=value):
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value

    client.run(apply)


def run_watching_children(cmd: list[str]) -> tuple[int, str, set[int]]:
    """Run ``cmd`` to its end, watching its process tree: (exit status, stderr, pids of every descendant seen)."""
    import subprocess

    import psutil

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started: set[int] = set()
    while proc.poll() is None:
        try:
            started |= {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
        except psutil.Error:  # exiting
            pass
        time.sleep(0.005)
    err = proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    return proc.returncode, err, started


def wait_for(fn, timeout=30.0, interval=0.05, what="condition"):
    """Poll ``fn`` until it returns something true (and return that), or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"{what} not met within {timeout} s")
