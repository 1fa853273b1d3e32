"""The batcher: turns full trajectory slots into training batches, in a thread of the learner's process.

It copies each slot out of the rollout worker's shared memory (in place on the same host, over comms from
another host), hands the slot straight back to its owner (so sampling goes on while the learner trains), and
joins slots into one :class:`TrajectoryBatch` of at least ``samples_per_batch`` samples. At most
``max_ready`` batches wait for the learner: when it falls behind the batcher stops taking slots, the slots stay
full, and rollout workers wait for free ones. That chain is the back-pressure.

In a data-parallel learner group (``--num-learners K``) the leader's batcher collects a batch's slots without
copying them, splits them into K equal shares (:func:`~daskrl.learning.group.shares.split_slots`), copies its own
share and sends each member the indices of its share (``assign``); a member's batcher copies the slots it was given
(:meth:`Batcher.add_share`). Only the leader hands slots back: its own share when copied, the members' shares once
the step that trained on them is over (every member copied its share before that step's first collective).

What varies is chosen once: what the batcher takes of each slot (a :class:`~daskrl.learning.slot_reader.SlotReader`:
whole slots or one policy's columns, with or without recurrent start states), when slots go back
(:class:`ReturnWhenCopied`, or :class:`HoldUntilTrained` with ``--sync``), and, each time the group changes, how a
batch is formed (:class:`OwnBatch` alone, :class:`SplitBatch` as a group's leader).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from daskrl.algo.appo.trajectory_batch import TrajectoryBatch
from daskrl.learning.group.shares import split_slots
from daskrl.learning.slot_reader import WHOLE_SLOTS, LocalSlots, SlotReader, SlotReadError, slot_source
from daskrl.protocol import FreeSlots, free_queue
from daskrl.runtime.memory.remote_reads import RemoteReads
from daskrl.sampling.slots.trajectories import attach_live_pools

#: a slot as the batcher tracks it: (rollout worker, slot index, the worker's incarnation)
SlotId = tuple[str, int, str]
#: at most this many bytes of other hosts' slots are read ahead of the batcher's turn (memory of the learner's process)
READ_AHEAD_BYTES = 256 * 2**20


@dataclass
class Delivery:
    """A batch for the learner, with the slots it still holds (``--sync``), the slots of the members' shares (a
    group leader frees them after the step) and the learner group generation it was formed for."""

    batch: TrajectoryBatch | None  # None: every slot of this share was lost mid-read (nothing to train on)
    held: list[SlotId]
    member_slots: list[SlotId]
    generation: int
    #: the slots joined into ``batch``, in its order (what --record-schedule writes down)
    slots: list[SlotId] = field(default_factory=list)


class ReturnWhenCopied:
    """Slots go back to their rollout workers as soon as they are copied: sampling goes on while the learner trains."""

    #: a batch keeps its slots in arrival order (which slots a batch takes depends on timing anyway)
    in_slot_order = False

    def copied(self, slot: SlotId, held: list[SlotId], free: Callable[[list[SlotId]], None]) -> None:
        free([slot])

    def refill_version(self, version: int) -> int | None:
        """Slots freed after a step may be filled by any version."""
        return None


class HoldUntilTrained:
    """``--sync``: copied slots are held (``Delivery.held``) until the learner trained on them and published the next
    version, and nobody fills them before taking that version."""

    #: a step takes every slot, so joined in (worker, slot) order it trains on the same rows whatever the timing
    #: (``--deterministic`` relies on it)
    in_slot_order = True

    def copied(self, slot: SlotId, held: list[SlotId], free: Callable[[list[SlotId]], None]) -> None:
        held.append(slot)

    def refill_version(self, version: int) -> int | None:
        return version


class Batcher:
    def __init__(self, learner, samples_per_batch: int, deliver: Callable[[Delivery], None],
                 hold_slots: bool, max_ready: int = 1,
                 group: Callable[[], tuple[int, int]] = lambda: (0, 1),
                 assign: Callable[[int, list[list]], None] | None = None, reader: SlotReader = WHOLE_SLOTS) -> None:
        """``deliver(delivery)`` hands a batch to the learner; with ``hold_slots`` (``--sync``) the slots are not
        handed back when copied but listed in ``delivery.held`` as ``(worker, slot, incarnation)``, for the learner
        to free (:meth:`release`) once it has trained on them and published the new version. ``group()`` is the
        learner group's ``(generation, size)`` now; ``assign(generation, shares)`` sends members 1.. their shares (a
        leader's). ``reader``: what is taken of each slot (whole feed-forward slots unless told otherwise)."""
        self.learner = learner
        self.reader = reader
        self.group = group
        self.assign = assign
        self.samples_per_batch = samples_per_batch
        self.deliver = deliver
        self.holding = HoldUntilTrained() if hold_slots else ReturnWhenCopied()
        self.workers: dict[str, LocalSlots] = {}  # the slots of each attached rollout worker
        self.incarnations: dict[str, str] = {}  # worker -> incarnation whose arrays are attached
        self.incoming: queue.SimpleQueue = queue.SimpleQueue()
        self.capacity = threading.Semaphore(max_ready)
        self.stopping = False
        self.wait_s = 0.0  # time spent blocked because the learner had not taken the previous batch
        self.batches = 0
        self.slots = 0
        self.dropped_slots = 0
        self.lost_reads = 0  # slots of another host whose read failed (their rollout worker was lost mid-read)
        #: slots copied in place from shared memory ("shm": rollout worker on this host) or fetched over Dask comms
        #: ("comms": another host), and the seconds spent copying them each way (the scale model's input)
        self.copies = {"shm": 0, "comms": 0}
        self.copy_s = {"shm": 0.0, "comms": 0.0}
        self.slots_by_worker: dict[str, int] = {}  # slots copied, per rollout worker (slot accounting)
        self.thread = threading.Thread(target=self._run, name=f"daskrl-{learner.name}-batcher", daemon=True)

    def attach(self, buffers: dict[str, dict]) -> None:
        """Read these rollout workers' slots ({name: buffers()}); one lost meanwhile is left out until its
        successor's arrays come (:func:`~daskrl.sampling.slots.trajectories.attach_live_pools`)."""
        for name, (arrays, incarnation) in attach_live_pools(self.learner, buffers).items():
            self.attach_arrays(name, arrays, incarnation, self.learner.remote_reads)

    def attach_arrays(self, name: str, arrays: dict[str, Any], incarnation: str,
                      reads: RemoteReads | None = None) -> None:
        """Read rollout worker ``name``'s slots from ``arrays`` (its incarnation ``incarnation``'s); another host's
        through ``reads``, ahead and in bulk (without: one blocking round trip per slot)."""
        self.workers[name] = slot_source(arrays, reads)
        self.incarnations[name] = incarnation

    def announce(self, worker: str, slot: int, incarnation: str) -> None:
        """A full slot was announced (any thread: the learner calls it as the message arrives, on the worker's
        event loop, before the slot waits for the learner's thread): a slot of another host that this batcher will
        copy itself starts its read now, so it travels while the learner trains (a group leader's slots may be a
        member's to copy: not read ahead)."""
        source = self.workers.get(worker)
        if source is not None and self.incarnations.get(worker) == incarnation and self.group()[1] == 1 \
                and self._room_to_read_ahead():
            self.reader.prefetch(source, slot)

    def add(self, worker: str, slot: int, incarnation: str) -> None:
        """A full slot, queued for the batcher's thread in arrival order."""
        self.incoming.put((worker, slot, incarnation))

    def _room_to_read_ahead(self) -> bool:
        """Whether the remote slots read ahead and not taken yet hold less than :data:`READ_AHEAD_BYTES` (past it,
        a slot is read when its turn comes: a learner far behind many hosts keeps their slots where they are)."""
        return sum(source.ahead_bytes() for source in list(self.workers.values())) < READ_AHEAD_BYTES

    def add_share(self, generation: int, slots: list[list]) -> None:
        """A group member: the leader's share of a batch for this learner, to copy and deliver as one batch."""
        self.incoming.put(("share", generation, slots))

    def taken(self) -> None:
        """The learner took a batch: room for the next one."""
        self.capacity.release()

    def release(self, delivery: Delivery, version: int) -> None:
        """The learner is done with ``delivery`` (trained on it at ``version``, or dropped it): free the slots it
        held and its members' shares."""
        self.free(delivery.held + delivery.member_slots, self.holding.refill_version(version))

    def free(self, slots: list[SlotId], version: int | None = None) -> None:
        """Hand ``slots`` back to their rollout workers, one message each (with ``version``: to be filled by that
        version or newer)."""
        by_owner: dict[tuple[str, str], list[int]] = {}
        for worker, slot_index, incarnation in slots:
            by_owner.setdefault((worker, incarnation), []).append(slot_index)
        for (worker, incarnation), indices in by_owner.items():
            freed: FreeSlots = {"slots": indices, "inc": incarnation}
            if version is not None:
                freed["version"] = version
            self.learner.put(free_queue(worker), self.reader.label(freed))

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping = True
        self.incoming.put(None)
        self.capacity.release()

    def _run(self) -> None:
        formed_for = self.group()
        forming = self._new_batch(formed_for)
        while not self.stopping:
            item = self.incoming.get()
            if item is None:
                break
            if item[0] == "share":  # a member: copy what the leader assigned, deliver it as one batch
                self._hand_over(self._share(*item[1:]))
                continue
            worker, slot, incarnation = item
            if self.incarnations.get(worker) != incarnation:
                self.dropped_slots += 1  # from a rollout worker that was replaced: its memory is gone
                continue
            group = self.group()
            if group != formed_for:  # the group was formed again (or broke): start this batch afresh
                self.free(forming.abandon())
                formed_for, forming = group, self._new_batch(group)
            self.slots += 1
            forming.add((worker, slot, incarnation))
            if not forming.full():
                continue
            delivery = forming.close()
            forming = self._new_batch(formed_for)
            if not self._hand_over(delivery):
                break

    def _new_batch(self, group: tuple[int, int]) -> OwnBatch | SplitBatch:
        """How the next batch is formed: by this learner alone, or split over its group (size > 1)."""
        generation, world = group
        return OwnBatch(self, generation) if world == 1 else SplitBatch(self, generation, world)

    def _hand_over(self, delivery: Delivery) -> bool:
        """Wait until the learner took the previous batch, then deliver this one; False when stopping."""
        t0 = time.perf_counter()
        self.capacity.acquire()
        self.wait_s += time.perf_counter() - t0
        if self.stopping:
            return False
        self.batches += 1
        self.deliver(delivery)
        return True

    def _share(self, generation: int, slots: list[list]) -> Delivery:
        """A member's share, copied (the remote ones read together) and joined into one batch."""
        for worker, slot, _ in slots:
            self.reader.prefetch(self.workers[worker], slot)
        parts = [self._copy_slot(worker, slot) for worker, slot, _ in slots]
        return Delivery(self.join_read(parts), [], [], generation)

    def join_read(self, parts: list[dict[str, np.ndarray] | None]) -> TrajectoryBatch | None:
        """The slots that could be read, joined into one batch; None when none could (all lost mid-read)."""
        read = [part for part in parts if part is not None]
        return self.reader.join(read) if read else None

    def _take(self, slot: SlotId, held: list[SlotId]) -> dict[str, np.ndarray] | None:
        """Copy a slot, then hand it back to its owner (or, with ``--sync``, list it in ``held``); None: it could
        not be read (see :meth:`_copy_slot`)."""
        part = self._copy_slot(slot[0], slot[1])
        if part is None:
            self.free([slot])  # no one is left to take it, or it goes back unread (its samples are lost)
        else:
            self.holding.copied(slot, held, self.free)
        return part

    def _copy_slot(self, worker: str, slot: int) -> dict[str, np.ndarray] | None:
        """Slot ``slot`` of ``worker``, copied; None when it was another host's whose read failed (its worker was
        lost mid-read): dropped and counted, and the batch goes on without it."""
        source = self.workers[worker]
        self.slots_by_worker[worker] = self.slots_by_worker.get(worker, 0) + 1
        t0 = time.perf_counter()
        try:
            part = self.reader.read(source, slot)
        except SlotReadError as exc:
            self.lost_reads += 1
            self.learner.incidents.note("slot-read-failed", exc)
            part = None
        self.copy_s[source.way] += time.perf_counter() - t0
        self.copies[source.way] += part is not None
        return part


class OwnBatch:
    """A batch of one learner (or of a leader whose group broke): each slot is copied as it arrives."""

    def __init__(self, batcher: Batcher, generation: int) -> None:
        self.batcher = batcher
        self.generation = generation
        self.parts: list[dict[str, np.ndarray]] = []
        self.slots: list[SlotId] = []  # the slot of each part
        self.held: list[SlotId] = []
        self.samples = 0

    def add(self, slot: SlotId) -> None:
        part = self.batcher._take(slot, self.held)
        if part is not None:
            self.parts.append(part)
            self.slots.append(slot)
            self.samples += part["rewards"].size

    def full(self) -> bool:
        return self.samples >= self.batcher.samples_per_batch

    def close(self) -> Delivery:
        """The batch, its slots in (worker, slot) order where the holding asks for it (``--sync``)."""
        if self.batcher.holding.in_slot_order:
            ordered = sorted(zip(self.slots, self.parts, strict=True), key=lambda pair: pair[0][:2])
            self.slots, self.parts = [slot for slot, _ in ordered], [part for _, part in ordered]
            self.held.sort(key=lambda slot: slot[:2])
        return Delivery(self.batcher.reader.join(self.parts), self.held, [], self.generation, self.slots)

    def abandon(self) -> list[SlotId]:
        """The slots to hand back when the batch is given up."""
        return self.held


class SplitBatch:
    """A group leader's batch: slots are collected uncopied, then split into ``world`` equal shares; the leader
    copies its own and assigns the others to the members."""

    def __init__(self, batcher: Batcher, generation: int, world: int) -> None:
        self.batcher = batcher
        self.generation = generation
        self.world = world
        self.pending: list[SlotId] = []
        self.samples = 0

    def add(self, slot: SlotId) -> None:
        self.pending.append(slot)
        self.samples += self.batcher.workers[slot[0]].samples_per_slot()

    def full(self) -> bool:
        """Enough samples, in a number of slots every member gets as many of."""
        return self.samples >= self.batcher.samples_per_batch and len(self.pending) % self.world == 0

    def close(self) -> Delivery:
        shares = split_slots(self.pending, self.world)
        assert self.batcher.assign is not None, "a group leader's batcher assigns shares"
        self.batcher.assign(self.generation, [[list(s) for s in share] for share in shares[1:]])
        held: list[SlotId] = []
        for worker, slot, _ in shares[0]:  # the leader's own share: the remote ones read together
            self.batcher.reader.prefetch(self.batcher.workers[worker], slot)
        parts = [self.batcher._take(slot, held) for slot in shares[0]]
        members = [slot for share in shares[1:] for slot in share]
        return Delivery(self.batcher.join_read(parts), held, members, self.generation)

    def abandon(self) -> list[SlotId]:
        return self.pending
