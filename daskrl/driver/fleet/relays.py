"""Where a run's parameter relays live, and which relay block each sampler reads (``--param-relay auto``).

One :class:`~daskrl.sampling.policies.param_relay.ParamRelay` per host that has parameter readers (rollout workers acting
inline, or remote inference workers) but no learner, on the Dask worker of the first reader placed there (as
:mod:`~daskrl.driver.fleet.replay_hosts` places a shard per host; a host is :func:`~daskrl.runtime.memory.shm.host_of` a
worker's address). Samplers get each acting policy's block description with ``relays`` ({host: relay block}) added,
and read their own host's in place (:class:`~daskrl.runtime.memory.params.ParameterReader`). One host (the learner's
alone) has none: nothing changes there, and nothing costs more.

A relay lost with its worker is recreated on its host (the recovery's worker, if it is there; else a worker of
the run's samplers there); the host's samplers read over comms meanwhile, then are handed the new relay's blocks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from daskrl.config import Config
from daskrl.driver.fleet.placement import Placement, Role
from daskrl.errors import ComponentError
from daskrl.protocol import wire_relay
from daskrl.runtime.actors.handles import ComponentHandle
from daskrl.runtime.memory.shm import host_of
from daskrl.sampling.policies.param_relay import ParamRelay
from daskrl.setups import RelaySetup

AUTO = "auto"

#: spawns a component: (class, name, worker, setup, role) -> its handle (the fleet's, which files its role)
Spawn = Callable[[type, str, str, Any, Role], ComponentHandle]


class Relays:
    """The run's relays by host (see the module docstring); empty under ``--param-relay off``."""

    def __init__(self, config: Config, client: Any, spawn: Spawn, warn: Callable[[str], None]) -> None:
        self.enabled = config.sampler.param_relay == AUTO and not config.run.sampling_only
        #: the role whose components read parameters (the others have no policy of their own)
        self.readers = Role.INFERENCE if config.sampler.inference == "remote" else Role.ROLLOUT
        self.client, self.spawn, self.warn = client, spawn, warn
        self.by_host: dict[str, ComponentHandle] = {}
        self.blocks: dict[str, list[dict | None]] = {}  # host -> its relay's blocks, by acting policy
        self.started = 0  # relays named so far (relay_0, relay_1, ...; a recreated one keeps its name)

    def handles(self) -> list[ComponentHandle]:
        return list(self.by_host.values())

    def create(self, placement: Placement, learners: Sequence[ComponentHandle], acting: Sequence[dict | None]) -> None:
        """A relay on each host where the placement puts parameter readers and no learner."""
        for worker in placement.inference if self.readers is Role.INFERENCE else placement.rollout:
            self.reach(worker, self.readers, learners, acting)

    def reach(self, worker: str, role: Role, learners: Sequence[ComponentHandle], acting: Sequence[dict | None]) -> None:
        """A component of ``role`` is about to run on ``worker``: give its host a relay if it reads parameters there
        and the host has neither a relay nor a learner (an elastic run grew onto a new host)."""
        host = host_of(worker)
        if not self.enabled or role is not self.readers or not learners or host in self.by_host \
                or any(host_of(h.address) == host for h in learners):
            return
        self.started += 1
        self._start(host, f"relay_{self.started - 1}", worker, learners, acting)

    def _start(self, host: str, name: str, worker: str, learners: Sequence[ComponentHandle],
               acting: Sequence[dict | None]) -> ComponentHandle:
        """Relay ``name`` for ``host`` on ``worker``, filed first (stopped with the rest if a later step fails),
        wired to the learners and started."""
        relay = self.by_host[host] = self.spawn(ParamRelay, name, worker, RelaySetup(tuple(acting)), Role.RELAY)
        wire_relay(self.client, list(learners), relay)
        relay.call("start")
        self.blocks[host] = relay.call("relay_descs")
        return relay

    def with_relays(self, acting: Sequence[dict | None]) -> list[dict | None]:
        """Each acting policy's block as samplers attach it: with every host's relay block for it (unchanged where
        the run has no relay)."""
        out = list(acting)
        for k, desc in enumerate(acting):
            relayed = {host: blocks[k] for host, blocks in self.blocks.items() if k < len(blocks) and blocks[k]}
            if desc is not None and relayed:
                out[k] = {**desc, "relays": relayed}
        return out

    def recreate(self, lost: ComponentHandle, worker: str, learners: Sequence[ComponentHandle],
                 acting: Sequence[dict | None], samplers: Sequence[ComponentHandle]) -> ComponentHandle | None:
        """A lost relay again, on its own host: on ``worker`` if it is there, else beside one of the run's
        ``samplers`` there (None: the host has none left, and its samplers keep reading over comms). The host's
        samplers are then handed the new relay's blocks."""
        host = next((h for h, handle in self.by_host.items() if handle.name == lost.name), None)
        if host is None:  # replaced already
            return None
        here = [h.address for h in samplers if host_of(h.address) == host and h.address != lost.address]
        where = worker if host_of(worker) == host else (here[0] if here else None)
        if where is None:
            del self.by_host[host], self.blocks[host]
            return None
        new = self._start(host, lost.name, where, learners, acting)
        for sampler in samplers:
            if host_of(sampler.address) == host:
                self._hand_over(sampler, self.with_relays(acting))
        return new

    def follow(self, index: int, source: dict) -> None:
        """Acting policy ``index`` has a new block (its learner restarted, or a new self-play snapshot): every relay
        copies from it from now on."""
        for host, relay in self.by_host.items():
            try:
                self.blocks[host][index] = relay.call("follow", index, source)
            except ComponentError as exc:  # lost at the same time: it is recreated from the new block
                self.warn(f"{relay.name} did not take the new parameter block: {exc}")

    def _hand_over(self, sampler: ComponentHandle, acting: Sequence[dict | None]) -> None:
        for k, desc in enumerate(acting):
            if desc is not None:
                try:
                    sampler.call("set_params", desc, k)
                except ComponentError as exc:  # lost at the same time: it is recreated with these blocks
                    self.warn(f"{sampler.name} did not take its host's new relay: {exc}")
