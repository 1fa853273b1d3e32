"""A host's parameter relay: each version fetched once over comms, then read in place by every sampler on the host.

Without it (``--param-relay off``), every sampler off the learner's host asks the scheduler for the newest version
20 times a second and pulls each version itself through the learner's link. The relay (``--param-relay auto``, one
per such host, beside a sampler) learns of each version from a :class:`~daskrl.protocol.ParamsPublished` bus message
the learner pushes, fetches the newest once from the learner's worker (one RPC, a consistent copy under the
learner's seqlock: :func:`~daskrl.runtime.memory.params.fetch`) and writes it into a
:class:`~daskrl.runtime.memory.params.RelayBlock` on its host. Messages that arrive while a fetch runs are taken together
after it, so a relay slower than the learner fetches only the newest version.

It writes a heartbeat into its blocks a few times a second; a reader whose relay missed
:data:`~daskrl.runtime.memory.params.RELAY_STALE_S` of them (the relay died with its worker) takes the direct path until a
new relay is handed to it. Once a second it also checks the learner's version without a message (one small RPC to
the learner's worker, never the scheduler): a message sent before it subscribed is not waited for.
"""

from __future__ import annotations

from typing import Any

from daskrl.protocol import ParamsPublished
from daskrl.runtime.actors.component import Component
from daskrl.runtime.actors.signals import slot
from daskrl.runtime.memory.params import RelayBlock, fetch
from daskrl.setups import RelaySetup


class ParamRelay(Component):
    """See the module docstring. ``relay_descs()`` gives its blocks (by acting policy) for the host's samplers."""

    #: seconds between two heartbeats in the relay's blocks (a reader presumes the relay dead after RELAY_STALE_S)
    beat_s = 0.2
    #: seconds between two checks of the learner's versions without a message
    check_s = 1.0

    def on_configure(self, setup: RelaySetup) -> None:
        self.blocks: list[RelayBlock | None] = [None if source is None else RelayBlock(self, source)
                                                for source in setup.blocks]
        self.pending: set[int] = set()  # blocks told of a newer version than they hold

    def on_start(self) -> None:
        self.pending.update(i for i, block in enumerate(self.blocks) if block is not None)
        self.add_timer(self.beat_s, self._heartbeat)
        self.add_timer(self.check_s, self._check_versions)

    @slot
    def on_published(self, payload: ParamsPublished) -> None:
        for i, block in enumerate(self.blocks):
            if block is not None and block.source["data"]["name"] == payload["block"] \
                    and payload["version"] != block.version:
                self.pending.add(i)

    def run_once(self) -> bool:
        """Fetch every block told of a newer version (after all messages queued meanwhile: the newest only)."""
        if not self.pending:
            return False
        pending, self.pending = self.pending, set()
        for i in sorted(pending):
            self._fetch(self.blocks[i])
        return True

    def _fetch(self, block: RelayBlock) -> None:
        try:
            with self.timing("fetch"):
                got = fetch(self.rpc, block.source, block.fetched)
        except Exception as exc:  # the learner's worker is gone (a restarting learner): the next message retries
            self.incidents.note("params-fetch-failed", exc)
            return
        if got is not None:
            block.write(*got)
            self.counters["params_relay_fetches"] += 1

    def _heartbeat(self) -> None:  # (Component keeps its own loop beat in ``_beat``)
        for block in self.blocks:
            if block is not None:
                block.beat()

    def _check_versions(self) -> None:
        self.pending.update(i for i, block in enumerate(self.blocks) if block is not None)

    async def relay_descs(self) -> list[dict | None]:
        """The relay's blocks by acting policy, as the host's samplers attach them (None: not relayed)."""
        return [None if block is None else block.desc for block in self.blocks]

    async def follow(self, index: int, source: dict) -> dict:
        """Relay a new block for acting policy ``index`` (its learner restarted, or a self-play snapshot appeared):
        the same relay block, filled from ``source`` from now on; returns the relay block's description."""

        def take() -> dict:
            block = self.blocks[index]
            if block is None or block.data.shape[0] != int(source["data"]["shape"][0]):
                block = self.blocks[index] = RelayBlock(self, source)
            block.follow(source)
            self.pending.add(index)
            return block.desc

        return await self.on_own_thread(take)

    def extra_stats(self) -> dict[str, Any]:
        return {"relay_versions": [None if block is None else block.version for block in self.blocks]}
