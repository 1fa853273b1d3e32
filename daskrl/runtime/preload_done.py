"""Imported last in the worker forkserver's preload list: moves everything imported so far out of the garbage
collector's reach (``gc.freeze``), so the collector never writes to those objects in forked workers and their
pages stay shared with the forkserver (copy-on-write) instead of being copied into every worker over time; then
resumes the collector that :mod:`daskrl.runtime.preload_start` paused for the imports (forked workers inherit it
running)."""

import gc

gc.freeze()
gc.enable()
