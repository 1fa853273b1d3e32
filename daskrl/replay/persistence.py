"""A replay shard's contents on disk (``--checkpoint-replay``): its transitions, priorities and counters.

One ``.npz`` file per shard, written beside its final name and renamed, so a kill during the write leaves the
previous file whole. Loading puts the transitions back at their positions in the ring, gives each its saved priority
and restores the counters, the draws served included: a resumed learner owes no burst of updates for data it
already trained on.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from daskrl.replay.store import FIELDS


def save_shard(shard: Any, path: str) -> int:
    """Write ``shard``'s store (its first ``size`` positions), priorities and counters to ``path``."""
    store, sampler = shard.store, shard.sampler
    size = store.size
    extra: dict[str, np.ndarray] = {}
    if sampler.prioritized:
        extra = {"priorities": sampler.tree.get(np.arange(size)), "max_priority": np.array(sampler.max_priority)}
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    partial = path + ".partial"
    with open(partial, "wb") as f:
        np.savez(f, **{name: store.arrays[name][:size] for name in FIELDS}, **extra, stamps=store.stamps[:size],
                 counters=np.array([store.next, size, store.added, shard.served], np.int64))
    os.replace(partial, path)
    return size


def load_shard(shard: Any, path: str) -> int:
    """Refill ``shard`` from ``path`` (nothing there: 0). A file from a larger shard keeps its first positions."""
    if not os.path.exists(path):
        return 0
    store, sampler = shard.store, shard.sampler
    with np.load(path) as saved:
        nxt, size, added, served = (int(x) for x in saved["counters"])
        size = min(size, store.capacity)
        for name in FIELDS:
            store.arrays[name][:size] = saved[name][:size]
        store.next, store.size, store.added = nxt % store.capacity, size, added
        if "stamps" in saved:
            store.stamps[:size] = saved["stamps"][:size]
        shard.served = served
        if sampler.prioritized:
            priorities = saved["priorities"][:size] if "priorities" in saved else np.ones(size)
            sampler.tree.update(np.arange(size), priorities)
            sampler.max_priority = float(saved["max_priority"]) if "max_priority" in saved else 1.0
    return size
