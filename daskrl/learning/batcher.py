"""The batcher: turns full trajectory slots into training batches, in a thread of the learner's process.

It copies each slot out of the rollout worker's shared memory (in place on the same host, over comms from
another host), hands the slot straight back to its owner (so sampling goes on while the learner trains), and
joins slots into one :class:`TrajectoryBatch` of at least ``samples_per_batch`` samples. At most
``max_ready`` batches wait for the learner: when it falls behind the batcher stops taking slots, the slots stay
full, and rollout workers wait for free ones. That chain is the back-pressure.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from daskrl.algo.trainer import TrajectoryBatch
from daskrl.protocol import FreeSlots, free_queue
from daskrl.sampling.trajectories import attach_slots


class Batcher:
    def __init__(self, learner, samples_per_batch: int, deliver: Callable[[TrajectoryBatch, list], None],
                 hold_slots: bool, max_ready: int = 1) -> None:
        """``deliver(batch, held)`` hands a batch to the learner; with ``hold_slots`` (``--sync``) the slots are not
        handed back when copied but listed in ``held`` as ``(worker, slot, incarnation)``, for the learner to free
        once it has trained on them and published the new version."""
        self.learner = learner
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
        self.thread = threading.Thread(target=self._run, name=f"daskrl-{learner.name}-batcher", daemon=True)

    def attach(self, buffers: dict[str, dict]) -> None:
        for name, descs in buffers.items():
            self.workers[name] = attach_slots(self.learner, descs)
            self.incarnations[name] = descs["_incarnation"]

    def add(self, worker: str, slot: int, incarnation: str) -> None:
        self.incoming.put((worker, slot, incarnation))

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
        samples = 0
        while not self.stopping:
            item = self.incoming.get()
            if item is None:
                break
            worker, slot, incarnation = item
            if self.incarnations.get(worker) != incarnation:
                self.dropped_slots += 1  # from a rollout worker that was replaced: its memory is gone
                continue
            part = self._copy_slot(worker, slot)
            if self.hold_slots:
                held.append((worker, slot, incarnation))
            else:
                freed: FreeSlots = {"slots": [slot], "inc": incarnation}
                self.learner.put(free_queue(worker), freed)
            parts.append(part)
            samples += part["rewards"].size
            self.slots += 1
            if samples < self.samples_per_batch:
                continue
            batch, taken = _join(parts), held
            parts, held, samples = [], [], 0
            t0 = time.perf_counter()
            self.capacity.acquire()
            self.wait_s += time.perf_counter() - t0
            if self.stopping:
                break
            self.batches += 1
            self.deliver(batch, taken)

    def _copy_slot(self, worker: str, slot: int) -> dict[str, np.ndarray]:
        arrays = self.workers[worker]
        if hasattr(arrays["rewards"], "read"):  # a RemoteArray: the owner is on another host
            self.slots_comms += 1
        else:
            self.slots_shm += 1
        out = {}
        for name in ("obs", "actions", "rewards", "terminated", "truncated", "log_probs", "policy_version", "final_at"):
            array = arrays[name]
            out[name] = array.read(slot) if hasattr(array, "read") else np.array(array[slot])
        used = int((out["final_at"] >= 0).sum())  # time-limit final observations fill the buffer from its start
        final_obs = arrays["final_obs"]
        out["final_obs"] = final_obs.read((slot, slice(0, used))) if hasattr(final_obs, "read") \
            else np.array(final_obs[slot, :used])
        out["final_at"] = out["final_at"][:used]
        return out


def _join(parts: list[dict[str, np.ndarray]]) -> TrajectoryBatch:
    """Concatenate slots along the env axis (time-major [T, N]); a final observation at ``t * B + b`` of a slot
    whose envs start at column ``offset`` is at ``t * N + offset + b`` of the batch."""
    T = parts[0]["rewards"].shape[0]
    N = sum(p["rewards"].shape[1] for p in parts)
    versions = [np.broadcast_to(p["policy_version"][:, None], p["rewards"].shape) for p in parts]
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
    )
