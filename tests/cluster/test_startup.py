"""Workers of an embedded cluster (the ``session`` fixture), forked from daskrl's worker server: they collect garbage,
inherit the server's imports frozen (daskrl/runtime/workers/preload_start.py, preload_done.py) and find Dask's
package versions already cached."""

from __future__ import annotations


def _inherited_state() -> tuple[bool, int, int]:  # the collector, its frozen objects, version-cache hits
    import gc

    from distributed.versions import _version_cached

    return gc.isenabled(), gc.get_freeze_count(), _version_cached.cache_info().hits


def test_workers_forked_from_the_server_collect_garbage_and_inherit_its_imports_frozen_and_caches_filled(session):
    """The server pauses the garbage collector for its imports (daskrl/runtime/workers/preload_start.py: 0.15-0.2 s of
    start-up) and resumes it after freezing them (preload_done.py): a worker that inherited it paused would never
    free a reference cycle. Dask's package versions, which each worker reports as it registers, were cached in the
    server: the registration found them there (without: 9 misses, no hit)."""
    states = session.client.run(_inherited_state)
    assert len(states) == 2
    for enabled, frozen, versions in states.values():
        assert enabled and frozen > 100_000, states  # torch's, distributed's and daskrl's objects: about 300,000
        assert versions > 0, states  # hits
