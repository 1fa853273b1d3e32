"""Imported last in the worker forkserver's preload list, after the imports:

- fills the caches every worker would otherwise fill for itself as it registers (Dask's package and system versions:
  9 ms a worker, a ``uname -p`` among them; 0.4 ms in a worker forked after);
- moves everything imported out of the garbage collector's reach (``gc.freeze``), so the collector never writes to
  those objects in forked workers and their pages stay shared with the forkserver (copy-on-write) instead of being
  copied into every worker over time;
- resumes the collector that :mod:`daskrl.runtime.workers.preload_start` paused for the imports (forked workers inherit it
  running)."""

import gc

try:
    from distributed.versions import get_versions

    get_versions()
finally:  # whatever happened above (the forkserver skips a preload module that raises ImportError), the collector
    gc.freeze()  # must run again in the workers: one forked with it paused would never free a reference cycle
    gc.enable()
