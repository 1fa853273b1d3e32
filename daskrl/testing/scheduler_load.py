"""What a Dask scheduler is asked, counted per op: every request (``handlers``, one per RPC) and every message of
every batched stream (``stream_handlers``: workers' and clients' streams) the scheduler dispatches, by op name, so a
run's load on the scheduler can be read, such as the parameter polls of readers on other hosts (``variable_get``).

Run the functions on the scheduler with ``client.run_on_scheduler(install_op_counts)`` and
``client.run_on_scheduler(read_op_counts)``. The counting replaces the scheduler's two handler tables with dicts
that count each lookup by op: the scheduler looks a handler up once per message it dispatches (``Server.handle_comm``
and ``Server.handle_stream``), and handlers that plugins add later (daskrl's own) are counted too. Used by
``benchmarks/scale_simulation.py``; a real count on a real scheduler, not a model.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any


class CountingHandlers(dict):
    """A handler table that counts each lookup of an op (one per dispatched message) under ``prefix + op``."""

    def __init__(self, table: dict, counts: Counter, prefix: str) -> None:
        super().__init__(table)
        self.counts, self.prefix = counts, prefix

    def __getitem__(self, op: Any) -> Any:
        self.counts[f"{self.prefix}{op}"] += 1
        return super().__getitem__(op)


def install_op_counts(dask_scheduler: Any) -> dict[str, Any]:
    """Count what ``dask_scheduler`` receives from now on (installed once; a second call keeps the counts).
    Returns the scheduler's process id, for its CPU time."""
    counts = getattr(dask_scheduler, "_daskrl_op_counts", None)
    if counts is None:
        counts = Counter()
        dask_scheduler.handlers = CountingHandlers(dask_scheduler.handlers, counts, "")
        dask_scheduler.stream_handlers = CountingHandlers(dask_scheduler.stream_handlers, counts, "stream:")
        dask_scheduler._daskrl_op_counts = counts
    return {"pid": os.getpid()}


def read_op_counts(dask_scheduler: Any) -> dict[str, int]:
    """Messages the scheduler dispatched since :func:`install_op_counts`, by op (stream messages as ``stream:op``);
    raises when the counts were never installed (a reading of nothing would pass for an idle scheduler)."""
    counts = getattr(dask_scheduler, "_daskrl_op_counts", None)
    if counts is None:
        raise RuntimeError("the scheduler's op counts are not installed: run install_op_counts on it first")
    return dict(counts)
