"""The learner component: APPO training steps on batches from the batcher, then parameters version v+1.

Full slots arrive on ``on_trajectory`` (only indices travel); the batcher thread copies and frees them and
delivers batches to this component's own thread, which trains (``APPOTrainer``) and publishes the new weights
through the parameter store (shared memory on this host, scattered futures for other hosts), announcing each
version with the ``params_updated`` signal. A learner restarted after a fault continues from a checkpoint
(:meth:`Learner.load_state`) or, before the first one, from the weights the samplers act with
(:meth:`Learner.load_weights`).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from daskrl.algo.trainer import APPOTrainer, TrajectoryBatch
from daskrl.learning.batcher import Batcher
from daskrl.models.actor_critic import build_model
from daskrl.protocol import FreeSlots, ParamsUpdated, TrajectoryReady, free_queue
from daskrl.runtime.component import Component
from daskrl.runtime.params import ParameterPublisher
from daskrl.runtime.signals import signal, slot
from daskrl.setups import LearnerSetup


class Learner(Component):
    """See module docstring."""

    @signal
    def params_updated(self, payload: ParamsUpdated) -> None:
        """A new policy version is published (see :class:`~daskrl.protocol.ParamsUpdated`)."""

    def on_configure(self, setup: LearnerSetup) -> None:
        torch.set_num_threads(setup.learner.learner_threads)
        self.model = build_model(setup.spaces, setup.model, setup.seed)
        self.trainer = APPOTrainer(self.model, setup.learner, setup.total_env_steps)
        self.publisher = ParameterPublisher(self, self.model.state_dict_numpy(), remote=setup.remote_params)
        self.publisher.publish(self.model.state_dict_numpy())
        self.batcher = Batcher(self, setup.samples_per_batch, self._deliver, hold_slots=setup.learner.sync)
        self.metrics: dict[str, float] = {}
        self.env_steps_offset = 0  # env steps before this learner started (resume)
        self.bad_steps = 0  # training steps in a row whose every update was skipped (NaN/inf)
        self.nan_tolerance = setup.learner.nan_tolerance
        self.max_lag_seen = 0.0  # the oldest sample trained on, in policy versions (0 throughout with --sync)

    async def params_desc(self) -> dict:
        return self.publisher.desc

    async def attach_workers(self, buffers: dict[str, dict]) -> list[str]:
        """Attach the slot arrays of these rollout workers ({name: buffers()}); may be called while running."""

        def attach() -> list[str]:
            self.batcher.attach(buffers)
            return sorted(self.batcher.workers)

        return await self.on_own_thread(attach)

    async def load_state(self, state: dict, env_steps: int) -> int:
        """Continue from a checkpoint: weights, optimizer, normalizers, counters; republishes the weights."""

        def load() -> int:
            self.trainer.load_state_dict(state)
            self.env_steps_offset = env_steps
            self.publisher.version = int(state.get("policy_version", 0))
            return self.publisher.publish(self.model.state_dict_numpy())

        return await self.on_own_thread(load)

    async def load_weights(self, version: int, weights: dict, env_steps: int) -> int:
        """Continue from published weights alone (a restart before the first checkpoint): the model and its
        normalizer statistics, a fresh optimizer; republishes them as the version after ``version``."""

        def load() -> int:
            self.trainer.load_weights({k: torch.as_tensor(np.array(v)) for k, v in weights.items()})
            self.env_steps_offset = env_steps
            self.publisher.version = max(version, 0)
            return self.publisher.publish(self.model.state_dict_numpy())

        return await self.on_own_thread(load)

    async def checkpoint_state(self) -> dict:
        """A consistent snapshot (between two training steps) for the runner to write to disk."""

        def snapshot() -> dict:
            state = self.trainer.state_dict()
            state["policy_version"] = self.publisher.version
            return state

        return await self.on_own_thread(snapshot)

    # ---- the loop ----

    def on_start(self) -> None:
        self.batcher.start()

    @slot
    def on_trajectory(self, payload: TrajectoryReady) -> None:
        self.batcher.add(payload["worker"], payload["slot"], payload["inc"])

    def _deliver(self, batch: TrajectoryBatch, held: list[tuple[str, int, str]]) -> None:
        """Called by the batcher thread: queue the batch for this component's thread and wake it."""
        self.deliver("_on_batch", (batch, held))

    def _on_batch(self, delivered: tuple[TrajectoryBatch, list[tuple[str, int, str]]]) -> None:
        batch, held = delivered
        self.batcher.taken()
        version = self.publisher.version
        env_steps = self.env_steps_offset + self.trainer.samples_trained
        with self.timing("train"):
            metrics = self.trainer.train(batch, version, env_steps, on_progress=self.beat)
        with self.timing("publish"):
            new_version = self.publisher.publish(self.model.state_dict_numpy())
        updated: ParamsUpdated = {"version": new_version}
        self.params_updated(updated)
        if held:  # --sync: the slots go back only now, and nobody fills them before taking this version
            self._free(held, new_version)
        metrics["version_diff"] = float(version - batch.policy_version.mean())
        self.max_lag_seen = max(self.max_lag_seen, metrics["policy_lag_max"])
        metrics["train_step_ms"] = self.timing.totals["train"] / max(self.trainer.train_steps, 1) * 1e3
        self.metrics = metrics
        self.counters["samples_trained"] = self.trainer.samples_trained
        self.counters["skipped_updates"] += metrics["skipped_updates"]
        if metrics["updates"] == 0 and metrics["skipped_updates"] > 0:
            self.bad_steps += 1
            if self.bad_steps >= self.nan_tolerance:
                self.fail("training", FloatingPointError(
                    f"the loss or gradients were NaN/inf in {self.bad_steps} training steps in a row, so no update "
                    "was applied; the run stops and the last good checkpoint stays the newest. Check the env's "
                    "rewards and observations for NaN/inf, or lower --learning-rate"))
        else:
            self.bad_steps = 0

    def _free(self, held: list[tuple[str, int, str]], version: int) -> None:
        by_owner: dict[tuple[str, str], list[int]] = {}
        for worker, slot_index, incarnation in held:
            by_owner.setdefault((worker, incarnation), []).append(slot_index)
        for (worker, incarnation), slots in by_owner.items():
            freed: FreeSlots = {"slots": slots, "inc": incarnation, "version": version}
            self.put(free_queue(worker), freed)

    def extra_stats(self) -> dict:
        return {
            "max_policy_lag_seen": self.max_lag_seen,
            "policy_version": self.publisher.version, "train_steps": self.trainer.train_steps,
            "remote_params": self.publisher.remote,  # also scattered for readers on other hosts
            "samples_trained": self.trainer.samples_trained, "metrics": dict(self.metrics),
            "batcher": {"batches": self.batcher.batches, "slots": self.batcher.slots,
                        "dropped_slots": self.batcher.dropped_slots, "slots_shm": self.batcher.slots_shm,
                        "slots_comms": self.batcher.slots_comms,
                        "blocked_s": self.batcher.wait_s, "pending_slots": self.batcher.incoming.qsize()},
            "obs_mean": np.asarray(self.trainer.obs_rms.mean).tolist() if self.trainer.obs_rms else None,
            "time": time.time(),
        }

    def on_stop(self) -> None:
        self.batcher.stop()
