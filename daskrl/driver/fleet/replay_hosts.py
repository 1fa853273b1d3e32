"""Where an off-policy run's replay shards live, and which shard each rollout worker hands its slots to.

``--replay-shards auto`` (the default) keeps one shard per host that runs rollout workers, on the Dask worker of
the first rollout worker placed there, and routes each rollout worker to its own host's shard: every slot is then
copied through shared memory, never over comms. A host is the host part of a Dask worker's address
(:func:`~daskrl.runtime.memory.shm.host_of`), the same test that decides whether a segment can be mapped in place. An
elastic run adds a shard when a rollout worker lands on a host that has none (:class:`~daskrl.driver.fleet.fleet.Fleet`).

A number of shards keeps the fixed layout: shard ``j`` beside rollout worker ``j``, rollout worker ``i`` routed to
shard ``i mod N``; nothing is added as hosts join.
"""

from __future__ import annotations

from collections.abc import Sequence

from daskrl.runtime.memory.shm import host_of

AUTO = "auto"


def per_host(replay_shards: int | str) -> bool:
    """Whether ``--replay-shards`` asks for a shard per host."""
    return replay_shards == AUTO


def shard_workers(replay_shards: int | str, rollout: Sequence[str]) -> list[str]:
    """The Dask workers the run's shards start on, by shard index, given the rollout workers' addresses in index
    order: per host, the first rollout worker's (hosts in the order their first rollout worker comes); with a
    number N, rollout worker ``j``'s for shard ``j`` (wrapping when N exceeds the rollout workers)."""
    if not rollout:
        return []
    if not per_host(replay_shards):
        return [rollout[j % len(rollout)] for j in range(int(replay_shards))]
    first: dict[str, str] = {}
    for address in rollout:
        first.setdefault(host_of(address), address)
    return list(first.values())


def route(replay_shards: int | str, index: int, address: str, shard_addresses: Sequence[str]) -> int | None:
    """The shard rollout worker ``index`` on ``address`` hands its slots to: per host, the first shard on its
    host (None: its host has no shard yet); with a number N, shard ``index mod N``."""
    if not per_host(replay_shards):
        return index % len(shard_addresses)
    host = host_of(address)
    return next((j for j, where in enumerate(shard_addresses) if host_of(where) == host), None)
