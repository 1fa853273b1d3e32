"""The learner component: APPO training steps on batches from the batcher, then parameters version v+1.

Full slots arrive on ``on_trajectory`` (only indices travel); the batcher thread copies and frees them and
delivers batches to this component's own thread, which trains (``APPOTrainer``) and publishes the new weights
through the parameter store (shared memory on this host, scattered futures for other hosts), announcing each
version with the ``params_updated`` signal.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from daskrl.algo.trainer import APPOTrainer, TrajectoryBatch
from daskrl.envs.spaces import EnvSpaces
from daskrl.learning.batcher import Batcher
from daskrl.runtime.component import Component, signal, slot
from daskrl.runtime.params import ParameterPublisher
from daskrl.sampling.policy import build_model


class Learner(Component):
    """See module docstring."""

    @signal
    def params_updated(self, payload: dict) -> None:
        """{"version": new policy version}"""

    def on_configure(self, *, spaces: dict, model: dict, learner: dict, samples_per_batch: int,
                     total_env_steps: int = 0, seed: int = 0, remote_params: bool = False, **_: Any) -> None:
        torch.set_num_threads(int(learner.get("learner_threads", 1)))
        self.spaces = EnvSpaces.from_dict(spaces)
        self.model = build_model(self.spaces, model, seed)
        self.trainer = APPOTrainer(self.model, learner, total_env_steps)
        self.publisher = ParameterPublisher(self, self.model.state_dict_numpy(), remote=remote_params)
        self.publisher.publish(self.model.state_dict_numpy())
        self.batcher = Batcher(self, samples_per_batch, self._deliver)
        self.metrics: dict[str, float] = {}
        self.env_steps_offset = 0  # env steps before this learner started (resume)
        self.bad_steps = 0  # training steps in a row whose every update was skipped (NaN/inf)
        self.nan_tolerance = int(learner.get("nan_tolerance", 10))

    async def params_desc(self) -> dict:
        return self.publisher.desc

    async def attach_workers(self, buffers: dict[str, dict]) -> list[str]:
        await self._run_in_thread(self.batcher.attach, buffers)
        return sorted(self.batcher.workers)

    async def load_state(self, state: dict, env_steps: int) -> int:
        """Continue from a checkpoint: weights, optimizer, normalizers, counters; republishes the weights."""

        def load() -> int:
            self.trainer.load_state_dict(state)
            self.env_steps_offset = env_steps
            self.publisher.version = int(state.get("policy_version", 0))
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
    def on_trajectory(self, payload: dict) -> None:
        self.batcher.add(payload["worker"], payload["slot"], payload.get("inc", ""))

    def _deliver(self, batch: TrajectoryBatch) -> None:
        """Called by the batcher thread: queue the batch for this component's thread and wake it."""
        self.enqueue("_on_batch", batch)

    def _on_batch(self, batch: TrajectoryBatch) -> None:
        self.batcher.taken()
        version = self.publisher.version
        env_steps = self.env_steps_offset + self.trainer.samples_trained
        with self.timing("train"):
            metrics = self.trainer.train(batch, version, env_steps, on_progress=self.beat)
        with self.timing("publish"):
            new_version = self.publisher.publish(self.model.state_dict_numpy())
        self.params_updated({"version": new_version})
        metrics["version_diff"] = float(version - batch.policy_version.mean())
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

    def extra_stats(self) -> dict:
        return {
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
