"""The replay shards of an off-policy run as the runner sees them: one entry per shard from its last statistics
(``ReplayShard.extra_stats``), and the run's totals for its rows (``replay_size``, ``replay_added``, ...).

The dashboard's shard table, the summary ``train()`` returns and the CSV columns all read these, so they agree.
An on-policy run has no shard: an empty list, and no replay columns in its rows.
"""

from __future__ import annotations

from typing import Any

from daskrl.runtime.memory.shm import host_of

#: the per-shard numbers, as ``ReplayShard.extra_stats()["replay"]`` names them (the dataset's: 0 without --dataset;
#: ``offline_served``: the draws served from the dataset alone before --online-after's switch)
SHARD_FIELDS = ("size", "capacity", "added", "served", "waiting_requests", "held_slots", "dataset_size",
                "dataset_episodes", "dataset_rows_drawn", "offline_served")


def _order(name: str) -> tuple[str, int]:
    """replay_2 before replay_10."""
    stem, _, number = name.rpartition("_")
    return (stem, int(number)) if number.isdigit() else (name, -1)


def replay_shards(last_stats: dict[str, dict]) -> list[dict[str, Any]]:
    """Each shard's numbers, in shard order: its host, the ``SHARD_FIELDS``, slots copied through shared memory and
    over comms, the rollout workers whose slots it took, and whether the learner has trained on its draws."""
    seen: set[str] = set()
    for s in last_stats.values():
        seen.update(s.get("replay_seen") or {})
    out = []
    for name in sorted((n for n, s in last_stats.items() if isinstance(s.get("replay"), dict)), key=_order):
        s = last_stats[name]
        replay, copies = s["replay"], s.get("batcher") or {}
        out.append({"shard": name, "host": host_of(s.get("address")),
                    **{k: int(replay.get(k, 0)) for k in SHARD_FIELDS},
                    "slots_shm": int(copies.get("slots_shm", 0)), "slots_comms": int(copies.get("slots_comms", 0)),
                    "rollout_workers": sorted(copies.get("slots_by_worker") or {}, key=_order),
                    "trained_on": name in seen})
    return out


def replay_totals(shards: list[dict[str, Any]]) -> dict[str, int]:
    """The run's row columns: shards, transitions held, capacity, transitions added and minibatches served, over
    every shard, and the dataset's transitions and episodes they hold with --dataset (none for a run without
    shards)."""
    if not shards:
        return {}
    totals = ("size", "capacity", "added", "served", "dataset_size", "dataset_episodes")
    return {"replay_shards": len(shards), **{f"replay_{k}": sum(s[k] for s in shards) for k in totals
                                             if not k.startswith("dataset") or any(s[k] for s in shards)}}
