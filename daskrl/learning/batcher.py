"""The batcher: turns full trajectory slots into training batches, in a thread of the learner's process.

It copies each slot out of the rollout worker's shared memory (in place on the same host, over comms from
another host), hands the slot straight back to its owner (so sampling goes on while the learner trains), and
joins slots into one :class:`TrajectoryBatch` of at least ``samples_per_batch`` samples. At most
``max_ready`` batches wait for the learner: when it falls behind the batcher stops taking slots, the slots stay
full, and rollout workers wait for free ones. That chain is the back-pressure.

In a data-parallel learner group (``--num-learners K``) the leader's batcher collects a batch's slots without
copying them, splits them into K equal shares (:func:`~daskrl.learning.learner_group.split_slots`), copies its own
share and sends each member the indices of its share (``assign``); a member's batcher copies the slots it was given
(:meth:`Batcher.add_share`). Only the leader hands slots back: its own share when copied, the members' shares once
the step that trained on them is over (every member copied its share before that step's first collective).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from daskrl.algo.trainer import TrajectoryBatch
from daskrl.learning.learner_group import split_slots
from daskrl.learning.turns import compact_turns
from daskrl.protocol import FreeSlots, free_queue
from daskrl.runtime.shm import read_together
from daskrl.sampling.trajectories import attach_slots

#: the fields of a trajectory slot a training batch is made of
SLOT_FIELDS = ("obs", "actions", "rewards", "terminated", "truncated", "log_probs", "policy_version", "final_at",
               "final_obs")
#: and of a recurrent policy's slot: the state each env's first step was acted from (the learner starts there)
RNN_FIELDS = ("rnn_states",)
#: and of a tagged slot (several policies, multi-agent envs): who acted, per column and step
TAG_FIELDS = ("policy_id",)


class Batcher:
    def __init__(self, learner, samples_per_batch: int, deliver: Callable[[Delivery], None],
                 hold_slots: bool, max_ready: int = 1,
                 group: Callable[[], tuple[int, int]] = lambda: (0, 1),
                 assign: Callable[[int, list[list]], None] | None = None, policy: int | None = None,
                 cut: tuple[int, int] | None = None) -> None:
        """``deliver(delivery)`` hands a batch to the learner; with ``hold_slots`` (``--sync``) the slots are not
        handed back when copied but listed in ``delivery.held`` as ``(worker, slot, incarnation)``, for the learner
        to free once it has trained on them and published the new version. ``group()`` is the learner group's
        ``(generation, size)`` now; ``assign(generation, shares)`` sends members 1.. their shares (a leader's).
        ``policy``: tagged slots (several policies, multi-agent envs) are cut down to the columns that policy played
        in, with a mask of its own steps; None: every column and step is the learner's."""
        self.learner = learner
        self.policy = policy
        self.cut = cut  # agents with different spaces: this policy's part of the slot rows (EnvSpaces.cut_for)
        self.group = group
        self.assign = assign
        self.samples_per_batch = samples_per_batch
        self.deliver = deliver
        self.hold_slots = hold_slots
        self.workers: dict[str, dict[str, Any]] = {}
        self.incarnations: dict[str, str] = {}  # worker -> incarnation whose arrays are attached
        self.incoming: queue.SimpleQueue = queue.SimpleQueue()
        self.capacity = threading.Semaphore(max_ready)
        self.stopping = False
        self.wait_s = 0.0  # time spent blocked because the learner had not taken the previous batch
        self.batches = 0
        self.slots = 0
        self.dropped_slots = 0
        self.slots_shm = 0  # slots copied in place from shared memory (rollout worker on this host)
        self.slots_comms = 0  # slots fetched over Dask comms (rollout worker on another host)
        self.slots_by_worker: dict[str, int] = {}  # slots copied, per rollout worker (slot accounting)
        self.copy_s_shm = self.copy_s_comms = 0.0  # seconds spent copying slots each way (the scale model's input)
        self.thread = threading.Thread(target=self._run, name=f"daskrl-{learner.name}-batcher", daemon=True)

    def attach(self, buffers: dict[str, dict]) -> None:
        for name, descs in buffers.items():
            self.workers[name] = attach_slots(self.learner, descs)
            self.incarnations[name] = descs["_incarnation"]

    def add(self, worker: str, slot: int, incarnation: str) -> None:
        self.incoming.put((worker, slot, incarnation))

    def add_share(self, generation: int, slots: list[list]) -> None:
        """A group member: the leader's share of a batch for this learner, to copy and deliver as one batch."""
        self.incoming.put(("share", generation, slots))

    def taken(self) -> None:
        """The learner took a batch: room for the next one."""
        self.capacity.release()

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping = True
        self.incoming.put(None)
        self.capacity.release()

    def _run(self) -> None:
        parts: list[dict[str, np.ndarray]] = []
        held: list[tuple[str, int, str]] = []
        pending: list[tuple[str, int, str]] = []  # a group leader's slots, not copied until the batch is split
        samples = 0
        formed_for = self.group()
        while not self.stopping:
            item = self.incoming.get()
            if item is None:
                break
            if item[0] == "share":  # a member: copy what the leader assigned, deliver it as one batch
                _, generation, slots = item
                shares = [self._copy_slot(worker, slot) for worker, slot, _ in slots]
                self._hand_over(Delivery(_join(shares), [], [], generation))
                continue
            worker, slot, incarnation = item
            if self.incarnations.get(worker) != incarnation:
                self.dropped_slots += 1  # from a rollout worker that was replaced: its memory is gone
                continue
            group = self.group()
            if group != formed_for:  # the group was formed again (or broke): start this batch afresh
                self._return([(w, s, i) for w, s, i in pending] + held)
                parts, held, pending, samples, formed_for = [], [], [], 0, group
            generation, world = group
            self.slots += 1
            if world == 1:
                parts.append(self._take(worker, slot, incarnation, held))
                samples += parts[-1]["rewards"].size
            else:
                pending.append((worker, slot, incarnation))
                samples += self._slot_samples(worker)
            if samples < self.samples_per_batch or len(pending) % world:
                continue
            members: list = []
            if pending:
                shares = split_slots(pending, world)
                assert self.assign is not None, "a group leader's batcher assigns shares"
                self.assign(generation, [[list(s) for s in share] for share in shares[1:]])
                parts += [self._take(*s, held) for s in shares[0]]
                members = [s for share in shares[1:] for s in share]
            delivery = Delivery(_join(parts), held, members, generation)
            parts, held, pending, samples = [], [], [], 0
            if not self._hand_over(delivery):
                break

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

    def _take(self, worker: str, slot: int, incarnation: str, held: list) -> dict[str, np.ndarray]:
        """Copy a slot, then hand it back to its owner (or, with ``hold_slots``, list it in ``held``)."""
        part = self._copy_slot(worker, slot)
        if self.hold_slots:
            held.append((worker, slot, incarnation))
        else:
            self._return([(worker, slot, incarnation)])
        return part

    def _return(self, slots: list[tuple[str, int, str]]) -> None:
        for worker, slot, incarnation in slots:
            freed: FreeSlots = {"slots": [slot], "inc": incarnation}
            if self.policy is not None:
                freed["policy"] = self.policy
            self.learner.put(free_queue(worker), freed)

    def _slot_samples(self, worker: str) -> int:
        shape = self.workers[worker]["rewards"].shape  # [slots, T, B], local or remote
        return int(shape[1] * shape[2])

    def _copy_slot(self, worker: str, slot: int) -> dict[str, np.ndarray]:
        arrays = self.workers[worker]
        self.slots_by_worker[worker] = self.slots_by_worker.get(worker, 0) + 1
        remote = hasattr(arrays["rewards"], "read")  # a RemoteArray: the owner is on another host
        t0 = time.perf_counter()
        try:
            part = self._read_slot(arrays, slot)
            return part if self.policy is None else _policy_columns(part, self.policy, self.cut)
        finally:
            if remote:
                self.slots_comms += 1
                self.copy_s_comms += time.perf_counter() - t0
            else:
                self.slots_shm += 1
                self.copy_s_shm += time.perf_counter() - t0

    @staticmethod
    def _read_slot(arrays: dict[str, Any], slot: int) -> dict[str, np.ndarray]:
        fields = SLOT_FIELDS + (RNN_FIELDS if "rnn_states" in arrays else ()) \
            + (TAG_FIELDS if "policy_id" in arrays else ())
        if hasattr(arrays["rewards"], "read"):  # another host: every field in one round trip
            out = dict(zip(fields, read_together([arrays[name] for name in fields], slot), strict=True))
        else:
            out = {name: np.array(arrays[name][slot]) for name in fields}
        used = int((out["final_at"] >= 0).sum())  # time-limit final observations fill the buffer from its start
        out["final_obs"] = out["final_obs"][:used]
        out["final_at"] = out["final_at"][:used]
        return out


def _policy_columns(part: dict[str, np.ndarray], policy: int, cut: tuple[int, int] | None = None
                    ) -> dict[str, np.ndarray]:
    """The columns of a tagged slot that ``policy`` acted in at least once, with ``valid`` marking its own steps
    (the other steps of those columns belong to another policy's episode, or to an agent that sat out). A turn-based
    player's column has its own steps moved to the front, each with what the others' moves gave it
    (:func:`~daskrl.learning.turns.compact_turns`). ``cut``: the policy's part of the observation and Box action
    rows, where agents' spaces differ."""
    ids = part.pop("policy_id")  # [T + 1, B]: step T is who acts first in the next slot
    mine = ids == policy
    T = part["rewards"].shape[0]
    columns = np.flatnonzero(mine[:T].any(axis=0))
    width = ids.shape[1]
    out = {name: part[name][:, columns] for name in ("obs", "actions", "rewards", "terminated", "truncated",
                                                     "log_probs", "policy_version")}
    out["valid"] = mine[:T, columns]
    if "rnn_states" in part:
        out["rnn_states"] = part["rnn_states"][columns]
    t, b = np.divmod(part["final_at"].astype(np.int64), width)  # time-limit finals of the kept columns, renumbered
    keep = np.isin(b, columns)
    out["final_obs"] = part["final_obs"][keep]
    out["final_at"] = (t[keep] * len(columns) + np.searchsorted(columns, b[keep])).astype(np.int32)
    if cut is not None:
        out["obs"], out["final_obs"] = out["obs"][..., :cut[0]], out["final_obs"][..., :cut[0]]
        if cut[1]:
            out["actions"] = out["actions"][..., :cut[1]]
    return compact_turns(out, mine[T, columns])


@dataclass
class Delivery:
    """A batch for the learner, with the slots it still holds (``--sync``), the slots of the members' shares (a
    group leader frees them after the step) and the learner group generation it was formed for."""

    batch: TrajectoryBatch
    held: list[tuple[str, int, str]]
    member_slots: list[tuple[str, int, str]]
    generation: int


def _join(parts: list[dict[str, np.ndarray]]) -> TrajectoryBatch:
    """Concatenate slots along the env axis (time-major [T, N]; a recurrent policy's slot-start states [N, S]); a
    final observation at ``t * B + b`` of a slot whose envs start at column ``offset`` is at ``t * N + offset + b``
    of the batch."""
    T = parts[0]["rewards"].shape[0]
    N = sum(p["rewards"].shape[1] for p in parts)
    versions = [p["policy_version"] if p["policy_version"].ndim == 2 else
                np.broadcast_to(p["policy_version"][:, None], p["rewards"].shape) for p in parts]
    final_index, offset = [], 0
    for p in parts:
        width = p["rewards"].shape[1]
        t, b = np.divmod(p["final_at"].astype(np.int64), width)
        final_index.append(t * N + offset + b)
        offset += width
    return TrajectoryBatch(
        obs=np.concatenate([p["obs"] for p in parts], axis=1),
        actions=np.concatenate([p["actions"] for p in parts], axis=1),
        rewards=np.concatenate([p["rewards"] for p in parts], axis=1),
        dones=np.concatenate([p["terminated"] | p["truncated"] for p in parts], axis=1),
        log_probs=np.concatenate([p["log_probs"] for p in parts], axis=1),
        policy_version=np.concatenate(versions, axis=1).reshape(T, -1),
        final_obs=np.concatenate([p["final_obs"] for p in parts], axis=0),
        final_index=np.concatenate(final_index),
        rnn_states=np.concatenate([p["rnn_states"] for p in parts], axis=0) if "rnn_states" in parts[0] else None,
        valid=np.concatenate([p["valid"] for p in parts], axis=1) if "valid" in parts[0] else None,
    )
