"""Off-policy (``--algo dqn``, ``sac``): the replay shards, where rollout workers' full slots go instead of the
learner, and which rollout worker hands its slots to which shard (:func:`~daskrl.driver.fleet.replay_hosts.route`:
its host's under ``--replay-shards auto``, a new shard when its host has none). With ``--dataset`` the shards the run
starts with each preload their part of the dataset (:func:`~daskrl.replay.dataset_share.dataset_shares`: split by
episode); one added later holds none.

The fleet holds one :class:`ReplayTier` (empty under an on-policy algorithm) and hands it what it needs of the rest
of the fleet at each call: the learner the shards serve and the rollout workers' slot arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from daskrl.config import Config
from daskrl.driver.fleet.algorithms import algorithm_of
from daskrl.driver.fleet.placement import Role
from daskrl.driver.fleet.replay_hosts import route, shard_workers
from daskrl.driver.fleet.role_setups import replay_setup
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.protocol import wire_replay
from daskrl.replay.dataset_share import dataset_shares
from daskrl.replay.shard import ReplayShard
from daskrl.runtime.actors.handles import ComponentHandle
from daskrl.setups import DatasetShare

#: how the fleet creates a component and files it under its role: (class, name, worker, setup, role) -> handle
Spawn = Callable[[type, str, str, Any, Role], ComponentHandle]


class ReplayTier:
    """See the module docstring."""

    def __init__(self, config: Config, spaces: EnvSpaces, client: Any, spawn: Spawn) -> None:
        self.config, self.spaces, self.client, self._spawn = config, spaces, client, spawn
        self.shards: list[ComponentHandle] = []
        self.shard_of: dict[str, int] = {}  # rollout worker name -> the shard its slots go to
        self.initial = 0  # shards the run started with: each keeps --replay-capacity / this many
        self.datasets: list[DatasetShare] = []  # each first shard's part of --dataset (by index; empty: none)
        #: called with each shard added while the run goes on (a host joined), before any slot reaches it
        self.on_added: list[Callable[[ComponentHandle], None]] = []
        #: whether the shards draw from the dataset alone: an offline algorithm's throughout, --online-after's until
        #: the run starts sampling (:meth:`go_online`); a shard recreated meanwhile starts the same way
        self.dataset_only = algorithm_of(config).offline or config.algo.online_after > 0

    def create(self, rollout_workers: Sequence[str], spawn_all: Callable[[list], list[ComponentHandle]]) -> None:
        """The run's first shards, each on a rollout worker's Dask worker (one per host, or shard j beside rollout
        worker j: :func:`~daskrl.driver.fleet.replay_hosts.shard_workers`); none for an on-policy algorithm.
        ``spawn_all`` creates them at once and files them as replay shards."""
        if replay_setup(self.config, self.spaces, 0, 1) is None:
            return
        where = shard_workers(self.config.algo.replay_shards, list(rollout_workers))
        self.initial = len(where)
        a = self.config.algo
        # the fraction a shard draws once it samples; while it draws from the dataset alone (an offline run
        # throughout, --online-after until then) the shard takes every row from it (ReplaySetup.offline)
        self.datasets = dataset_shares(a.dataset, a.dataset_fraction, self.initial) if a.dataset else []
        self.shards = spawn_all([(ReplayShard, f"replay_{j}", worker, self._setup(j)) for j, worker in
                                 enumerate(where)])

    def consumer(self, name: str, index: int, address: str, learner: ComponentHandle,
                 buffers: dict[str, dict]) -> list:
        """The slot rollout worker ``name`` (index ``index``, on ``address``) announces its full slots to: its
        shard's, a new one added on ``address`` when the route names none."""
        j = route(self.config.algo.replay_shards, index, address, [h.address for h in self.shards])
        self.shard_of[name] = self._add(address, learner, buffers) if j is None else j
        return [self.shards[self.shard_of[name]].on_trajectory]

    def of(self, name: str) -> list[ComponentHandle]:
        """The shard rollout worker ``name`` hands its slots to (none under an on-policy algorithm)."""
        return [self.shards[self.shard_of[name]]] if name in self.shard_of else []

    def rollout_of(self, shard: ComponentHandle) -> list[str]:
        """The rollout workers that hand ``shard`` their slots."""
        j = self.shards.index(shard)
        return [name for name, k in self.shard_of.items() if k == j]

    def connect(self, shards: Sequence[ComponentHandle], learner: ComponentHandle, buffers: dict[str, dict]) -> None:
        """The shards read their rollout workers' slots and serve ``learner``, which reads their batch blocks."""
        if not shards:
            return
        for shard in shards:
            j = self.shards.index(shard)
            shard.call("attach_workers", {w: b for w, b in buffers.items() if self.shard_of.get(w) == j})
            wire_replay(self.client, shard, learner)
        learner.call("attach_replay", {shard.name: shard.call("batch_descs") for shard in shards})

    def batch_descs(self) -> dict[str, dict]:
        """Every shard's batch block, as a (re)started learner attaches them."""
        return {shard.name: shard.call("batch_descs") for shard in self.shards}

    def recreate(self, handle: ComponentHandle, worker: str, learner: ComponentHandle,
                 buffers: dict[str, dict]) -> ComponentHandle:
        """A lost shard comes back empty under its name (its rollout workers' announcements find it again)."""
        index = self.shards.index(handle)
        new = self._spawn(handle.cls, handle.name, worker, self._setup(index), Role.REPLAY)
        self.shards[index] = new
        self.connect([new], learner, buffers)
        return new

    def _add(self, worker: str, learner: ComponentHandle, buffers: dict[str, dict]) -> int:
        """A new shard on ``worker`` (a rollout worker joined a host with none), with the share of capacity the
        first ones got, wired to the learner and started; returns its index. No rollout worker is routed to it
        yet: the caller routes the one it is for."""
        j = len(self.shards)
        shard = self._spawn(ReplayShard, f"replay_{j}", worker, self._setup(j), Role.REPLAY)
        self.shards.append(shard)
        for hook in self.on_added:
            hook(shard)
        self.connect([shard], learner, buffers)
        shard.call("start")
        return j

    def _setup(self, index: int) -> Any:
        dataset = self.datasets[index] if index < len(self.datasets) else None
        return replay_setup(self.config, self.spaces, index, self.initial, dataset, self.dataset_only)

    def go_online(self) -> None:
        """--online-after's moment: every shard serves by the update-to-data ratio from now on, drawing
        --dataset-fraction of each minibatch from the dataset and the rest from what the samplers now add."""
        self.dataset_only = False
        for shard in self.shards:
            shard.call("go_online")
