"""Real components around trajectory slots for the tests of remote slot reads (importable on every worker).

:class:`SlotPool` owns a pool of slots, as a rollout worker does, filled with distinct random data in every field
(recurrent start states and policy tags included); :class:`SlotCopier` reads them as the learner's batcher does: one
blocking round trip per slot, or started ahead and sent in bulk (:class:`~daskrl.runtime.memory.remote_reads.RemoteReads`).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from daskrl.learning.slot_reader import SLOT_FIELDS, STATE_FIELDS, TAG_FIELDS, reader_for, slot_source
from daskrl.runtime.actors.component import Component
from daskrl.sampling.slots.trajectories import SlotLayout, attach_slots, create_slots

#: every field a learner may read of a slot: a recurrent, tagged pool has them all
ALL_FIELDS = SLOT_FIELDS + STATE_FIELDS + TAG_FIELDS


class SlotPool(Component):
    """A pool of trajectory slots in shared memory owned by this component (see the module docstring)."""

    def on_configure(self, setup: None) -> None:
        self.arrays: dict[str, Any] = {}

    async def create(self, num_slots: int, rollout: int, envs: int, seed: int, tagged: bool = True) -> dict:
        """Allocate and fill the pool (CartPole-like observations, a 3-float state, two policies' tags unless not
        ``tagged``); returns the descriptors a reader attaches, as a rollout worker hands them to the learner."""
        layout = SlotLayout(num_slots, rollout, envs, (4,), "float32", (), "int64", rnn_state_size=3, tagged=tagged)
        self.arrays = create_slots(self, layout)
        rng = np.random.default_rng(seed)
        for name, array in self.arrays.items():
            view = array.array
            if name == "final_at":  # some time-limit finals at flat indices t * B + b, the rest unused (-1)
                view[:] = -1
                view[:, :2] = rng.integers(0, rollout * envs, size=(num_slots, 2))
            elif name == "policy_id":
                view[:] = rng.integers(0, 2, size=view.shape)
            elif view.dtype.kind == "f":
                view[:] = rng.standard_normal(view.shape)
            else:
                view[:] = rng.integers(0, 100, size=view.shape)
        descs = {name: array.desc for name, array in self.arrays.items()}
        return {**descs, "_incarnation": "pool"}

    async def busy(self, seconds: float) -> None:
        """Keep this component's thread stepping Python code for ``seconds`` (as a rollout worker stepping cheap
        envs does: it holds the GIL its worker's event loop needs to answer reads)."""
        self.deliver("_spin", seconds)

    def _spin(self, seconds: float) -> None:
        end, x = time.perf_counter() + seconds, 0
        while time.perf_counter() < end:
            x += 1

    async def truth(self, slots: list[int], fields: list[str]) -> list[dict]:
        """The slots' fields as they are in place (what every reader must get)."""
        return [{name: np.array(self.arrays[name].array[slot]) for name in fields} for slot in slots]


class SlotCopier(Component):
    """Reads another component's slots the ways the learner's batcher can."""

    def on_configure(self, setup: None) -> None:
        self.sources: dict[bool, Any] = {}

    async def attach(self, descs: dict, bulk_bytes: int | None = None) -> str:
        """Attach a pool (in place on this host, over comms from another one or with DASKRL_FORCE_COMMS=1); returns
        the kind of source the batcher would read it through. ``bulk_bytes``: the bulk reads' cap per RPC."""
        if bulk_bytes is not None:
            self.remote_reads.bulk_bytes = bulk_bytes

        def attach_both() -> str:
            arrays = attach_slots(self, descs)
            self.sources = {False: slot_source(arrays), True: slot_source(arrays, self.remote_reads)}
            return type(self.sources[True]).__name__
        return await self.on_own_thread(attach_both)

    async def read(self, slots: list[int], bulk: bool, fields: list[str] | None = None) -> list[dict]:
        """Raw fields of ``slots``: with ``bulk``, every read started first, here on the worker's event loop (as the
        learner does when announcements arrive: reads asked for in one turn of the loop go in one RPC), then taken
        in order on the component's thread; without, one blocking round trip per slot."""
        source, wanted = self.sources[bulk], tuple(fields or ALL_FIELDS)
        for slot in slots:
            source.prefetch(slot, wanted)
        return await self.on_own_thread(lambda: [source.read(slot, wanted) for slot in slots])

    async def take(self, slots: list[int], bulk: bool, policy: int, tagged: bool) -> list[dict]:
        """What a recurrent learner of ``policy`` takes of each slot (its columns of tagged slots, or whole slots),
        through the batcher's reader (reads started as :meth:`read` does)."""
        reader, source = reader_for(policy, tagged, None, recurrent=True), self.sources[bulk]
        for slot in slots:
            reader.prefetch(source, slot)
        return await self.on_own_thread(lambda: [reader.read(source, slot) for slot in slots])

    async def read_stats(self) -> dict:
        """RPCs this component's bulk reads took, and the reads they carried."""
        return self.remote_reads.stats()
