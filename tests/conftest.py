"""Shared fixtures: real clusters. ``session`` has worker processes and lives for a test module; ``inproc`` is a
fresh cluster per test whose workers are threads of the test process (as distributed's own ``gen_cluster``), for
the tests where processes are not the point: nothing one test leaves behind can reach the next. Helpers that are
not fixtures (a run's config, processes, fault drills, waiting) are in ``helpers.py``."""

from __future__ import annotations

import os

import pytest

# pytest-xdist runs two test processes on two cores: torch's default of a thread per core in each of them (and in the
# `daskrl` processes the drills start) oversubscribes the cores, and its threads spin waiting for each other (a test
# computing log-probs in this process took 27 s beside a busy core, 11 s with one thread). Dask's worker processes
# start with one thread already (distributed's pre-spawn environment).
os.environ.setdefault("OMP_NUM_THREADS", "1")

from daskrl.runtime import connect_cluster, dask_internals
from daskrl.runtime.memory.shm import list_segments


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
    return sorted(dask_internals.cluster_workers(session.client))


@pytest.fixture(scope="module")
def cluster():
    """A 3-worker embedded cluster of worker processes (what this process registers does not reach them by
    itself; see _embedded)."""
    yield from _embedded(3)


@pytest.fixture(scope="module")
def hosts(cluster):
    return sorted(dask_internals.cluster_workers(cluster.client))


@pytest.fixture
def inproc():
    """A fresh 2-worker cluster in this process (see the module docstring); checks its segments are gone after."""
    s = connect_cluster(n_workers=2, dashboard_address=None, processes=False, preload_torch=False)
    try:
        yield s
    finally:
        s.close()
    assert list_segments(s.run_id) == [], "daskrl shared-memory segments left after the cluster closed"
