"""A replay shard: a component that keeps the transitions of the rollout workers wired to it, and serves draws.

Rollout workers announce full slots to their shard (``trajectory_ready``, only indices travel) as they announce
them to the learner under APPO. The shard copies each slot out of the worker's shared memory (over comms from
another host), turns it into n-step transitions (:func:`~daskrl.replay.n_step.slot_transitions`) and writes them
into its ring (:class:`~daskrl.replay.store.TransitionStore`, in shared memory the shard owns).

A learner asks for up to ``k`` minibatches on the shard's work queue (:class:`~daskrl.protocol.SampleRequest`);
the shard draws as many as the update-to-data ratio allows now (uniform or prioritized, each minibatch stratified
on its own), copies them into one of the two halves of its batch block (shared memory on its host, read over comms from
another; each half holds ``batches_per_request`` minibatches) and answers with their positions and importance
weights (:class:`~daskrl.protocol.BatchReady`). One answer's minibatches are all drawn before the learner trains on
the first, so the later ones are drawn with priorities that do not yet reflect the earlier ones' TD errors: the
staleness Ape-X's learner accepts too, bounded by the request's depth. New priorities come back in one
:class:`~daskrl.protocol.PriorityUpdate` per answer; one that arrives after its transition was overwritten is
dropped (each position's stamp says which transition it holds).

The update-to-data ratio holds both ways. The shard holds a request while it has fewer than ``learning_starts``
transitions or while serving it would exceed the ratio: the learner waits for data instead of over-training a small
buffer. And it hands copied slots back only while the learner keeps up: the rollout workers then wait for free
slots (the batcher's back-pressure, here), so a run makes the gradient updates per env step it asked for.

A shard lost with its worker loses only its own transitions: the runner recreates it, empty, and it fills again.

With ``--dataset`` each shard also holds its part of a Minari dataset apart from the ring
(:class:`~daskrl.replay.dataset_share.DatasetPart`), and every minibatch takes ``--dataset-fraction`` of its rows from
it (RLPD's symmetric sampling). The ratio and ``learning_starts`` still count the ring's new transitions only: the
dataset does not let the learner run ahead of the fleet. A recreated shard reads its part of the dataset again. An
offline run's shard (``--algo bc|iql|cql``) has no rollout workers and no ring: it draws every row from its part
and serves as fast as the learner asks (:class:`~daskrl.replay.ratio.DatasetOnly`).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import deque
from typing import Any

import numpy as np

from daskrl.protocol import (
    BatchReady,
    FreeSlots,
    PriorityUpdate,
    SampleRequest,
    TrajectoryReady,
    batches_queue,
    free_queue,
    pack,
    unpack,
)
from daskrl.replay.dataset_share import DATASET_ROW, DatasetPart
from daskrl.replay.n_step import slot_transitions
from daskrl.replay.persistence import load_shard, save_shard
from daskrl.replay.ratio import DatasetOnly, ReplayRatio
from daskrl.replay.sampler import PrioritizedSampler, UniformSampler
from daskrl.replay.store import TransitionStore, store_shapes
from daskrl.runtime.actors.component import Component
from daskrl.runtime.actors.signals import slot
from daskrl.runtime.memory.shm import read_together
from daskrl.sampling.slots.trajectories import attach_live_pools
from daskrl.setups import ReplaySetup

#: the fields of a trajectory slot that its transitions are made of
SLOT_FIELDS = ("obs", "actions", "rewards", "terminated", "truncated", "final_obs", "final_at")
#: halves of a shard's batch block: the learner copies one while the shard may fill the other
BUFFERS = 2


class ReplayShard(Component):
    """See the module docstring."""

    def on_configure(self, setup: ReplaySetup) -> None:
        self.incarnation = uuid.uuid4().hex[:12]
        s, a = setup.spaces, setup.algo
        shapes = store_shapes(setup.capacity, tuple(s.obs_shape), s.obs_dtype, tuple(s.action_shape), s.action_dtype)
        self.arrays = {name: self.create_array(shape, dtype, f"replay_{name}_") for name, (shape, dtype)
                       in shapes.items()}
        self.store = TransitionStore({name: array.array for name, array in self.arrays.items()})
        self.depth = max(1, setup.algo.replay_batches_per_request)  # resolved by the setup (0: not resolved)
        self.batch = {name: self.create_array((BUFFERS, self.depth, setup.batch_size, *shape[1:]), dtype,
                                              f"rbatch_{name}_") for name, (shape, dtype) in shapes.items()}
        self.sampler = PrioritizedSampler(setup.capacity, a.priority_alpha, a.priority_beta, seed=setup.seed) \
            if a.prioritized_replay else UniformSampler(setup.capacity, seed=setup.seed)
        self.n_step, self.gamma, self.batch_size = a.n_step, setup.gamma, setup.batch_size
        self.reward_scale, self.reward_clip = setup.reward_scale, setup.reward_clip
        self.learning_starts, self.replay_ratio = max(setup.learning_starts, 1), a.replay_ratio
        self.ratio: ReplayRatio | DatasetOnly = ReplayRatio(self.learning_starts, a.replay_ratio)
        self.workers: dict[str, dict[str, Any]] = {}  # rollout worker -> its attached slot arrays
        self.worker_inc: dict[str, str] = {}
        self.pending: deque[SampleRequest] = deque()  # requests waiting for data
        self.held: deque[tuple[str, int, str]] = deque()  # slots copied but not yet handed back (back-pressure)
        self.served = 0
        self.offline_served = 0  # draws served from the dataset alone, before --online-after's switch
        #: slots copied in place from shared memory ("shm") or over Dask comms ("comms"), the seconds each way,
        #: and per rollout worker: the run's data-path accounting reads them as it reads the batcher's
        self.copies = {"shm": 0, "comms": 0}
        self.copy_s = {"shm": 0.0, "comms": 0.0}
        self.slots_by_worker: dict[str, int] = {}
        #: its part of --dataset, drawn beside the ring (None: no dataset)
        self.dataset = DatasetPart(setup.dataset, s, a.n_step, setup.gamma, setup.reward_scale, setup.reward_clip,
                                   setup.seed + 1) if setup.dataset is not None else None
        if setup.offline:
            self.ratio = DatasetOnly(self.dataset.store.size if self.dataset is not None else 0)
            if self.dataset is not None:
                self.dataset.fraction = 1.0  # nothing else to draw until go_online (an offline run: ever)

    async def go_online(self) -> int:
        """--online-after's switch: serve by the update-to-data ratio from now on, counting only the draws served
        from here on, with --dataset-fraction of each minibatch from the dataset; returns the draws served before."""

        def switch() -> int:
            self.ratio = ReplayRatio(self.learning_starts, self.replay_ratio)
            self.offline_served = self.served
            if self.dataset is not None:
                self.dataset.fraction = self.dataset.share.fraction
            return self.offline_served

        return await self.on_own_thread(switch)

    async def attach_workers(self, buffers: dict[str, dict]) -> list[str]:
        """Attach the slot arrays of these rollout workers ({name: buffers()}); may be called while running. A
        worker lost at the same time (its memory gone) is left out until its successor's arrays come."""

        def attach() -> list[str]:
            for name, (arrays, incarnation) in attach_live_pools(self, buffers).items():
                self.workers[name] = arrays
                self.worker_inc[name] = incarnation
            return sorted(self.workers)

        return await self.on_own_thread(attach)

    async def batch_descs(self) -> dict:
        """Where a learner reads the minibatches this shard draws: its batch block, and this incarnation."""
        return {"inc": self.incarnation, "arrays": {name: a.desc for name, a in self.batch.items()}}

    async def save(self, path: str) -> int:
        """Write this shard's transitions, priorities and counters to ``path`` (atomically: a file beside it, then
        renamed), between two slots; returns the transitions saved."""
        return await self.on_own_thread(save_shard, self, path)

    async def take_slots(self, filled: dict[str, int], timeout: float = 5.0) -> bool:
        """Wait until this shard took ``filled`` slots (or more) from each of those rollout workers: at a run's stop,
        their last slots' signals may still be on the way when the samplers have stopped, and the final checkpoint
        should hold every step sampled. True when it did; False after ``timeout`` (a signal lost with a dead worker)."""
        deadline = time.monotonic() + timeout
        while any(self.slots_by_worker.get(worker, 0) < n for worker, n in filled.items()):
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.005)
        return True

    async def load(self, path: str) -> int:
        """Refill from a :meth:`save` file (none there: nothing happens); returns the transitions loaded."""
        return await self.on_own_thread(load_shard, self, path)

    @slot
    def on_trajectory(self, payload: TrajectoryReady) -> None:
        worker, index = payload["worker"], payload["slot"]
        if self.worker_inc.get(worker) != payload["inc"]:  # a slot of an incarnation since recreated
            self.counters["dropped_slots"] += 1
            return
        t0 = time.perf_counter()
        part, way = self._read(self.workers[worker], index)
        self.copy_s[way] += time.perf_counter() - t0
        self.copies[way] += 1
        self.slots_by_worker[worker] = self.slots_by_worker.get(worker, 0) + 1
        with self.timing("insert"):
            part["rewards"] = part["rewards"] * self.reward_scale
            if self.reward_clip > 0:
                np.clip(part["rewards"], -self.reward_clip, self.reward_clip, out=part["rewards"])
            positions = self.store.add(slot_transitions(part, self.n_step, self.gamma))
            self.sampler.added(positions)
        self.held.append((worker, index, payload["inc"]))
        self.counters["slots"] += 1
        self._serve()

    @staticmethod
    def _read(arrays: dict[str, Any], index: int) -> tuple[dict[str, np.ndarray], str]:
        """One slot's fields, and how they came: copies from shared memory on this host ("shm"), or one round trip
        from another host ("comms")."""
        if all(isinstance(arrays[name], np.ndarray) for name in SLOT_FIELDS):
            part, way = {name: np.array(arrays[name][index]) for name in SLOT_FIELDS}, "shm"
        else:
            part = dict(zip(SLOT_FIELDS, read_together([arrays[name] for name in SLOT_FIELDS], index), strict=True))
            way = "comms"
        used = int((part["final_at"] >= 0).sum())  # time-limit final observations fill the buffer from its start
        part["final_obs"], part["final_at"] = part["final_obs"][:used], part["final_at"][:used]
        return part, way

    @slot
    def on_sample(self, payload: SampleRequest) -> None:
        """A learner's request; one asked again (no answer within its timeout, as while the shard fills) replaces
        that learner's older one, so no draw is served for a request nobody waits for."""
        stale = [r for r in self.pending if r["learner"] == payload["learner"]]
        for request in stale:
            self.pending.remove(request)
        self.pending.append(payload)
        self._serve()

    @slot
    def on_priorities(self, payload: PriorityUpdate) -> None:
        if payload["inc"] != self.incarnation:  # about an earlier incarnation's transitions
            return
        positions, stamps = unpack(payload["positions"], "int64"), unpack(payload["stamps"], "int64")
        ring = positions != DATASET_ROW  # the dataset's rows have no priority
        keep = ring.copy()
        keep[ring] = self.store.current(positions[ring], stamps[ring])  # not overwritten since
        self.counters["priorities_dropped"] += int((ring & ~keep).sum())
        self.counters["priorities_kept"] += int(keep.sum())
        with self.timing("priorities"):
            self.sampler.update(positions[keep], unpack(payload["td_errors"], "float32")[keep])

    def allowed(self, most: int = 1) -> int:
        """How many of ``most`` further draws may be served now: enough transitions, and the update-to-data ratio
        not exceeded (one draw at ``learning_starts`` transitions, then ``replay_ratio`` per transition added)."""
        return self.ratio.draws_allowed(self.store.size, self.store.added, self.served - self.offline_served, most)

    def behind(self) -> bool:
        """Whether the learner has drawn fewer minibatches than the update-to-data ratio asks for the transitions
        added so far (while the shard fills up to ``learning_starts``, never)."""
        return self.ratio.behind(self.store.size, self.store.added, self.served - self.offline_served)

    def _release(self) -> None:
        """Hand copied slots back unless the learner is behind: the rollout workers then wait for free slots, so
        sampling never runs ahead of the ratio (the batcher's back-pressure, here)."""
        while self.held and not self.behind():
            worker, index, inc = self.held.popleft()
            freed: FreeSlots = {"slots": [index], "inc": inc}
            self.put(free_queue(worker), freed)

    def _serve(self) -> None:
        self._release()
        while self.pending and (count := self.allowed(min(self.pending[0].get("k", 1), self.depth))):
            request = self.pending.popleft()
            with self.timing("sample"):
                answer = self._draw(request, count)
            self.put(batches_queue(request["learner"]), answer)
            self.served += count
            self.counters["answers"] += 1
        self._release()

    def _draw(self, request: SampleRequest, count: int) -> BatchReady:
        """Draw ``count`` minibatches (each stratified on its own) into half ``id % 2`` of the batch block; the
        answer that says where they are."""
        buffer = request["id"] % BUFFERS
        if self.dataset is not None and self.dataset.rows(self.batch_size):
            half = {name: block.array[buffer, :count] for name, block in self.batch.items()}
            positions, stamps, weights = self.dataset.draw_beside(self.store, self.sampler, count, half)
        else:
            draw = self.sampler.draw(self.store.size, self.batch_size, count)
            rows = count * self.batch_size
            self.store.read_into(draw.positions, {name: block.array[buffer, :count].reshape(rows, *block.shape[3:])
                                                  for name, block in self.batch.items()})
            positions, stamps, weights = draw.positions, self.store.stamps[draw.positions], draw.weights
        return {"shard": self.name, "inc": self.incarnation, "id": request["id"], "buffer": buffer,
                "count": count, "batch": self.batch_size, "positions": pack(positions, "int64"),
                "stamps": pack(stamps, "int64"), "weights": pack(weights, "float32"),
                "size": self.store.size, "added": self.store.added}

    def extra_stats(self) -> dict:
        served = self.served  # read before the counts it depends on: a draw served needs transitions added first
        return {"replay": {"served": served, "size": self.store.size, "capacity": self.store.capacity,
                           "added": self.store.added, "waiting_requests": len(self.pending), "held_slots": len(self.held),
                           "answers": int(self.counters.get("answers", 0)), "batches_per_request": self.depth,
                           "offline_served": self.offline_served,
                           "prioritized": self.sampler.prioritized, "incarnation": self.incarnation,
                           **(self.dataset.stats() if self.dataset is not None else {})},
                "batcher": {"slots_shm": self.copies["shm"], "slots_comms": self.copies["comms"],
                            "copy_s_shm": self.copy_s["shm"], "copy_s_comms": self.copy_s["comms"],
                            "slots_by_worker": dict(self.slots_by_worker),
                            "dropped_slots": int(self.counters.get("dropped_slots", 0))}}

