"""What every learner component does, whatever its data source: the model and its trainer, publishing parameters,
checkpoints and restarts, PBT's training states and hyperparameters, NaN accounting and the statistics every
learner reports.

The learners are siblings over this base: :class:`~daskrl.learning.learner.Learner` trains on fresh slots from its
batcher (APPO, alone or in a learner group), :class:`~daskrl.learning.replay_learner.ReplayLearner` on minibatches
drawn from replay shards (DQN, SAC). A learner builds its trainer from the setup's ``trainer`` path and never asks
which algorithm it trains (:func:`build_trainer`).
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import numpy as np

from daskrl import devices
from daskrl.lazy_names import class_at
from daskrl.models.registry import install_components
from daskrl.protocol import ParamsPublished
from daskrl.runtime.actors.component import Component
from daskrl.runtime.actors.signals import signal
from daskrl.runtime.memory import heap
from daskrl.setups import LearnerSetup

__all__ = ["LearnerBase", "build_learning", "build_trainer"]

#: training steps whose hyperparameters the learner's statistics show
STEP_HYPERPARAMS_KEPT = 64


class LearnerBase(Component):
    """See the module docstring. A learner's ``on_configure`` calls :meth:`configure_learner` first."""

    @signal
    def params_published(self, payload: ParamsPublished) -> None:
        """A version is in a parameter block: host relays fetch it (the block's publisher emits this itself)."""

    def configure_learner(self, setup: LearnerSetup, rank: int, world: int, snapshots: int,
                          snapshot_every: int) -> None:
        """The model, its trainer and what publishes it: ``rank`` of ``world`` learners in a group (0 of 1 alone),
        keeping ``snapshots`` self-play snapshots every ``snapshot_every`` versions."""
        # torch and the trainer are imported here, in the learner's worker: the driver imports this module for the
        # class (its signals, slots and methods) and needs no torch
        import torch

        from daskrl.learning.group.group_member import role_for
        from daskrl.learning.snapshots import snapshots_for

        torch.set_num_threads(setup.learner.learner_threads)
        heap.keep_freed_memory()  # a step's large tensors stay mapped for the next step (daskrl/runtime/memory/heap.py)
        self.device = devices.resolve(setup.learner.learner_device, f"worker {self.worker.name} ({self.worker.address})",
                                      "--learner-device")
        self.model, self.trainer = build_learning(setup, self.device)
        self.role = role_for(rank, world)
        self.publication = self.role.publication(self, self.model, setup.remote_params)
        self.snapshots = snapshots_for(self, self.model, snapshots, snapshot_every, setup.remote_params,
                                       setup.frozen_opponent)
        self.policy_index = setup.policy_index
        self.metrics: dict[str, float] = {}
        #: the hyperparameters each recent training step trained with (train step, values): a change made between
        #: two steps shows from the next one on, never half-way through a step
        self.step_hyperparams: deque = deque(maxlen=STEP_HYPERPARAMS_KEPT)
        self.env_steps_offset = 0  # env steps before this learner started (resume)
        self.bad_steps = 0  # training steps in a row whose every update was skipped (NaN/inf)
        self.nan_tolerance = setup.learner.nan_tolerance
        self.max_lag_seen = 0.0  # the oldest sample trained on, in policy versions (0 throughout with --sync)
        self.first_step_at: float | None = None  # wall clock at the end of this learner's first training step

    @property
    def version(self) -> int:
        """The policy version of this learner's weights (the leader published it; a member holds the same)."""
        return self.publication.version

    # ---- parameters, checkpoints and restarts ----

    async def params_desc(self) -> dict:
        return self.publication.desc

    async def snapshot_descs(self) -> list[dict]:
        """The self-play snapshots' parameter blocks, as samplers attach them (empty without self-play)."""
        return self.snapshots.descs()

    async def take_snapshot(self) -> None:
        """Keep the next version published as a self-play snapshot (a league member that beats its opponents joins
        the league's past players now rather than at its next --self-play-snapshot-every)."""
        self.snapshots.take_next()

    async def snapshot_and_start_afresh(self) -> int:
        """Keep the current weights as a self-play snapshot now, then train on from fresh weights (the run's initial
        ones) with a fresh optimizer, published as the next version: a league exploiter that beat its opponents
        starts over (AlphaStar's reset). Returns the snapshot's policy version. Between two training steps."""

        def reset() -> int:
            held = self.snapshots.take(self.version, self.model)
            _, fresh = build_learning(self.setup, self.device)
            self.trainer.start_afresh(fresh)
            self.publication.publish(self.model)
            return held

        return await self.on_own_thread(reset)

    async def enable_remote_params(self) -> dict:
        """Also publish every version over Dask comms from now on (a reader joined on another host: an elastic run
        grew there, or a component was recreated there); returns the new parameter block description."""

        def enable() -> dict:
            self.publication.go_remote(self.model, self.snapshots)
            return self.publication.desc

        return await self.on_own_thread(enable)

    async def load_state(self, state: dict, env_steps: int) -> int:
        """Continue from a checkpoint: weights, optimizer, normalizers, counters; republishes the weights."""

        def load() -> int:
            self.trainer.load_state_dict(state)
            self.env_steps_offset = env_steps
            return self.publication.publish_after(int(state.get("policy_version", 0)), self.model)

        return await self.on_own_thread(load)

    async def load_checkpoint_bytes(self, data: bytes) -> int:
        """:meth:`load_state` from a checkpoint's bytes as :meth:`checkpoint_bytes` made them (a learner moving off
        a retiring worker hands its state over this way: the driver never loads it, and needs no torch)."""
        from daskrl.learning.checkpoints import deserialize

        state = deserialize(data)
        return await self.load_state(state, int(state.get("env_steps", 0)))

    async def load_weights(self, version: int, weights: dict, env_steps: int) -> int:
        """Continue from published weights alone (a restart before the first checkpoint): the model and its
        normalizer statistics, a fresh optimizer; republishes them as the version after ``version``."""

        def load() -> int:
            import torch

            self.trainer.load_weights({k: torch.as_tensor(np.array(v)) for k, v in weights.items()})
            self.env_steps_offset = env_steps
            return self.publication.publish_after(max(version, 0), self.model)

        return await self.on_own_thread(load)

    async def checkpoint_state(self) -> dict:
        """A consistent snapshot (between two training steps) for the runner to write to disk."""

        return await self.on_own_thread(self._snapshot)

    async def checkpoint_bytes(self, meta: dict) -> bytes:
        """:meth:`checkpoint_state` with the driver's ``meta`` (env steps, scores, config) added, serialized as a
        checkpoint file's bytes here: the driver writes them as they are and needs no torch."""
        from daskrl.learning.checkpoints import serialize

        state = await self.on_own_thread(self._snapshot)
        state.update(meta)
        return serialize(state)

    def _snapshot(self) -> dict:
        """The training state, copied: it is serialized after this thread has gone back to training, so live
        tensors would mix the next steps into the checkpoint (a model ahead of its return statistics, say)."""
        from daskrl.learning.training_state import export_state

        state = export_state(self.trainer, self.version)
        state.update(self.snapshots.saved())  # self-play: the frozen opponents, for enjoy and evaluation to seat
        return state

    # ---- population-based training: another policy's state, other hyperparameters ----

    async def hyperparams(self) -> dict[str, float]:
        """The learning rate, entropy coefficient, clip ratio and gamma this policy trains with now."""
        return self.trainer.hyperparams()

    async def set_hyperparams(self, values: dict[str, float]) -> dict[str, float]:
        """Train with these values from the next step on (set between two steps, on this component's thread);
        returns all of them, and the training step after which they were set (``after_train_step``)."""

        def set_() -> dict[str, float]:
            self.trainer.set_hyperparams(values)
            return {**self.trainer.hyperparams(), "after_train_step": self.trainer.train_steps}

        return await self.on_own_thread(set_)

    async def export_training_state(self) -> dict:
        """This policy's whole training state (weights, optimizer, normalizers, hyperparameters, policy version),
        taken between two training steps, as CPU copies that share nothing with the live model: for PBT to
        :meth:`import_training_state` into another policy's learner."""
        from daskrl.learning.training_state import export_state

        return await self.on_own_thread(lambda: export_state(self.trainer, self.version))  # version read there too

    async def import_training_state(self, state: dict, hyperparams: dict[str, float]) -> int:
        """Continue from another policy's :meth:`export_training_state` with ``hyperparams``: its weights,
        optimizer state and normalizers, loaded between two training steps (no step mixes old and new weights).
        This learner's own counters go on: its policy version (the loaded weights are published as its next one,
        so its samplers take them), train steps and samples trained (its env steps). Returns the new version.
        With a learner group, call it on the leader, then form the group again (:meth:`join_group` gives the
        members the leader's whole state)."""

        from daskrl.learning.training_state import import_state

        def load() -> int:
            import_state(self.trainer, state, hyperparams)
            self.bad_steps = 0
            return self.publication.publish(self.model)

        return await self.on_own_thread(load)

    def _account(self, metrics: dict[str, float], steps: int = 1) -> None:
        """Keep a step's metrics and counters (``steps``: the training steps they cover, all skipped where none
        updated); stop the run after ``nan_tolerance`` steps in a row that skipped every update."""
        self.max_lag_seen = max(self.max_lag_seen, metrics["policy_lag_max"])
        metrics["train_step_ms"] = self.timing.totals["train"] / max(self.trainer.train_steps, 1) * 1e3
        self.metrics = metrics
        self.step_hyperparams.append([self.trainer.train_steps, dict(self.trainer.step_hp)])
        self.counters["samples_trained"] = self.trainer.samples_trained
        self.counters["skipped_updates"] += metrics["skipped_updates"]
        if metrics["updates"] > 0 or metrics["skipped_updates"] == 0:
            self.bad_steps = 0
            return
        self.bad_steps += steps
        if self.bad_steps >= self.nan_tolerance:
            self.fail("training", FloatingPointError(
                f"the loss or gradients were NaN/inf in {self.bad_steps} training steps in a row, so no update "
                "was applied; the run stops and the last good checkpoint stays the newest. Check the env's "
                "rewards and observations for NaN/inf, or lower --learning-rate"))

    def learner_stats(self) -> dict:
        """The statistics every learner reports; each learner adds its data source's (:meth:`extra_stats`)."""
        return {
            "max_policy_lag_seen": self.max_lag_seen, "policy_version": self.version,
            "train_steps": self.trainer.train_steps, "policy": self.policy_index, "first_step_at": self.first_step_at,
            "snapshot_versions": self.snapshots.versions(),
            "remote_params": self.publication.remote,  # also scattered for other hosts
            "params_served": self.publication.served,  # copies of its block fetched by host relays
            "device": str(self.device),
            "samples_trained": self.trainer.samples_trained, "metrics": dict(self.metrics),
            "hyperparams": self.trainer.hyperparams(), "step_hyperparams": list(self.step_hyperparams),
            "obs_mean": np.asarray(self.trainer.obs_rms.mean).tolist() if self.trainer.obs_rms else None,
            "time": time.time(),
        }


def build_learning(setup: LearnerSetup, device: Any) -> tuple[Any, Any]:
    """The model and its trainer, built as every learner of the run builds them (a replay's too): the user's model
    components registered first (they were registered in the process that started the run), then the model from the
    run's seed, then its algorithm's trainer."""
    from daskrl.models.actor_critic import build_model

    install_components(setup.components)
    model = build_model(setup.spaces, setup.model, setup.seed)
    return model, build_trainer(model, setup, device)


def build_trainer(model: Any, setup: LearnerSetup, device: Any) -> Any:
    """The trainer ``setup``'s algorithm names (``setup.trainer``), built the one way every trainer is built, so a
    learner never asks which algorithm it trains (torch is imported here, in the learner's worker)."""
    from daskrl.algo.common.policy_trainer import TrainerOptions

    options = TrainerOptions(setup.model, setup.learner, setup.algo, setup.total_env_steps)
    return class_at(setup.trainer).from_options(model, options, device)
