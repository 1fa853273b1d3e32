"""The inference worker: one batched forward pass for whatever requests are waiting.

It consumes the policy's work queue (each :class:`~daskrl.protocol.InferenceRequest` goes to exactly one
inference worker), reads the observations from the requesters' shared-memory slots, writes actions, log-probs
and its policy version back into those slots, and answers each requester on its ``actions:<worker>``
queue. New parameter versions are picked up between batches. A recurrent policy's states are read from and
written back to the requester's slot too (``rnn_live``), so no state is kept here: any inference worker can answer
any request, and one that is recreated (or added by an elastic run) loses nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from daskrl.protocol import ActionsReady, InferenceRequest, actions_queue
from daskrl.runtime.actors.component import Component
from daskrl.runtime.actors.signals import slot
from daskrl.sampling.slots.row_cut import rows_for
from daskrl.sampling.slots.trajectories import attach_live_pools, read_slot, read_step, write_columns
from daskrl.setups import InferenceSetup


class InferenceWorker(Component):
    """See module docstring."""

    def on_configure(self, setup: InferenceSetup) -> None:
        from daskrl.sampling.policies.policy import SamplingPolicy  # torch: imported here, not by the driver

        self.policy = SamplingPolicy(self, setup.policy)
        self.policy_index = setup.policy_index  # with several policies: the one whose requests it takes
        self.rows = rows_for(setup.policy.cut)  # agents with different spaces: this policy's part of a slot row
        self.pending: list[InferenceRequest] = []
        self.workers: dict[str, dict[str, Any]] = {}
        self.requests = 0
        self.batches = 0

    async def attach_workers(self, buffers: dict[str, dict]) -> list[str]:
        """Attach the slot arrays of these rollout workers ({name: buffers()}); may be called while running (one lost
        meanwhile is left out until its successor's arrays come)."""

        def attach() -> list[str]:
            self.workers.update({name: arrays for name, (arrays, _) in attach_live_pools(self, buffers).items()})
            return sorted(self.workers)

        return await self.on_own_thread(attach)

    async def set_params(self, desc: dict, policy: int = 0) -> None:
        """Read ``policy``'s parameters from a new publisher (a restarted learner), if this worker serves it."""
        if policy == self.policy_index:
            await self.on_own_thread(self.policy.follow, self, desc)

    async def policy_weights(self, policy: int = 0) -> dict | None:
        """The version and weights this worker's policy acts with (None: it serves another policy)."""
        if policy != self.policy_index:
            return None
        return await self.on_own_thread(self.policy.weights)

    @slot
    def on_request(self, payload: InferenceRequest) -> None:
        self.pending.append(payload)

    def run_once(self) -> bool:
        if not self.pending:
            return False
        batch, self.pending = self.pending, []
        unknown = [r for r in batch if r["w"] not in self.workers]
        if unknown:  # a replacement rollout worker asks before its buffers were attached here: it will ask again
            self.counters["unknown_requests"] += len(unknown)
            batch = [r for r in batch if r["w"] in self.workers]
            if not batch:
                return True
        with self.timing("params"):
            self.policy.refresh()
        needed = max(r.get("v", 0) for r in batch)
        if self.policy.version < needed:  # --sync: the version these requests wait for is on its way
            self.pending = batch + self.pending
            return False
        with self.timing("gather"):
            views = [self.workers[r["w"]] for r in batch]
            # with several policies a request names its policy's columns ("c"); else it is for every column
            obs = np.concatenate([_columns(read_step(v["obs"], r["slot"], r["t"]), r)
                                  for v, r in zip(views, batch, strict=True)])
            states = np.concatenate([_columns(read_slot(v["rnn_live"], r["slot"]), r)
                                     for v, r in zip(views, batch, strict=True)]) \
                if self.policy.recurrent else None
        with self.timing("inference"):
            actions, log_probs, _ = self.policy.act(self.rows.narrow(obs), states)
        actions = self.rows.widen(actions, views[0]["actions"].shape[-1])  # a narrower Box action: zeros after
        with self.timing("scatter"):
            start = 0
            for v, r in zip(views, batch, strict=True):
                slot_index, t, columns = r["slot"], r["t"], r.get("c")
                end = start + (v["obs"].shape[2] if columns is None else len(columns))
                write_columns(v["actions"], (slot_index, t), columns, actions[start:end])
                write_columns(v["log_probs"], (slot_index, t), columns, log_probs[start:end])
                write_columns(v["policy_version"], (slot_index, t), columns, self.policy.version)
                if states is not None:
                    write_columns(v["rnn_live"], (slot_index,), columns, states[start:end])
                start = end
                answer: ActionsReady = {"s": r["s"], "slot": slot_index, "t": t, "p": self.policy_index}
                self.put(actions_queue(r["w"]), answer)
        self.requests += len(batch)
        self.batches += 1
        return True

    def extra_stats(self) -> dict:
        return {"requests": self.requests, "batches": self.batches,
                "mean_batch": self.requests / max(self.batches, 1), "policy_version": self.policy.version,
                "inference_precision": self.policy.precision}


def _columns(rows: np.ndarray, request: InferenceRequest) -> np.ndarray:
    """The rows of the columns a request names (all of them when it names none)."""
    return rows if "c" not in request else rows[np.asarray(request["c"], dtype=np.int64)]  # msgpack: a tuple
