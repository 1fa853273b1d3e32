"""The learner component: APPO training steps on batches from the batcher, then parameters version v+1.

Full slots arrive on ``on_trajectory`` (only indices travel); the batcher thread copies and frees them and
delivers batches to this component's own thread, which trains (``APPOTrainer``) and publishes the new weights
through the parameter store (shared memory on this host, scattered futures for other hosts); samplers poll the
store's version. A learner restarted after a fault continues from a checkpoint (:meth:`Learner.load_state`) or,
before the first one, from the weights the samplers act with (:meth:`Learner.load_weights`).

The component composes its jobs, each chosen once from its setup: training (the trainer, and the batcher with its
slot reader), its place in a learner group (:mod:`daskrl.learning.group_member`: with ``--num-learners K`` the
leader, rank 0, receives the slots, splits each batch over the group and publishes; the members train on their
shares and publish nothing; the runner forms the group with :meth:`Learner.open_group` and
:meth:`Learner.join_group` before the start and again after a member or the leader was lost), self-play snapshots
(:mod:`daskrl.learning.snapshots`) and PBT's import and export of training states
(:mod:`daskrl.learning.training_state`).
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import numpy as np

from daskrl import devices
from daskrl.algo.appo.policy_lag import lag_percentile
from daskrl.errors import GroupBroken
from daskrl.lazy_names import class_at
from daskrl.learning.batcher import Batcher, Delivery
from daskrl.learning.slot_reader import reader_for
from daskrl.models.registry import install_components
from daskrl.protocol import ParamsPublished, SharesAssigned, TrajectoryReady
from daskrl.runtime.actors.component import Component
from daskrl.runtime.actors.signals import signal, slot
from daskrl.runtime.memory import heap
from daskrl.runtime.memory.shm import host_of
from daskrl.setups import LearnerSetup

__all__ = ["Learner"]

#: training steps whose hyperparameters the learner's statistics show
STEP_HYPERPARAMS_KEPT = 64


class Learner(Component):
    """See module docstring."""

    #: the batcher, once configured (an off-policy learner has none)
    batcher: Batcher | None = None

    @signal
    def shares_assigned(self, payload: SharesAssigned) -> None:
        """The leader split a batch: each member's share of its slots (see :class:`~daskrl.protocol.SharesAssigned`)."""

    @signal
    def params_published(self, payload: ParamsPublished) -> None:
        """A version is in a parameter block: host relays fetch it (the block's publisher emits this itself)."""

    def on_configure(self, setup: LearnerSetup) -> None:
        # torch and the trainer are imported here, in the learner's worker: the driver imports this module for the
        # class (its signals, slots and methods) and needs no torch
        import torch

        from daskrl.learning.group_member import role_for
        from daskrl.learning.snapshots import snapshots_for
        from daskrl.models.actor_critic import build_model

        torch.set_num_threads(setup.learner.learner_threads)
        heap.keep_freed_memory()  # a step's large tensors stay mapped for the next step (daskrl/runtime/memory/heap.py)
        self.device = devices.resolve(setup.learner.learner_device, f"worker {self.worker.name} ({self.worker.address})",
                                      "--learner-device")
        install_components(setup.components)  # the user's encoders and cores, registered where the run started
        self.model = build_model(setup.spaces, setup.model, setup.seed)
        self.trainer = build_trainer(self.model, setup, self.device)
        self.role = role_for(setup.rank, setup.num_learners)
        self.publication = self.role.publication(self, self.model, setup.remote_params)
        self.snapshots = snapshots_for(self, self.model, setup.snapshots, setup.snapshot_every, setup.remote_params)
        self.policy_index = setup.policy_index
        self.reader = reader_for(setup.policy_index, setup.tagged, setup.cut, self.model.recurrent)
        self.batcher = Batcher(self, setup.samples_per_batch, self._deliver, hold_slots=setup.learner.sync,
                               group=self._group_now, assign=self._assign, reader=self.reader)
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

    # ---- the learner group ----

    def _group_now(self) -> tuple[int, int]:
        """(generation, size) of the group this learner trains with now (size 1 alone or while it is broken)."""
        return self.role.generation, self.trainer.group.world

    def _assign(self, generation: int, shares: list[list]) -> None:
        self.shares_assigned({"generation": generation, "shares": shares})

    async def open_group(self, world: int) -> dict:
        """The leader: a store for a new group generation of ``world`` learners; returns where members find it."""
        return self.role.open(host_of(self.worker.address) or "127.0.0.1", world)

    async def join_group(self, host: str, port: int, generation: int) -> int:
        """Join group ``generation`` (blocks until every member has). The leader puts its whole training state
        (weights, optimizer, normalizers, counters), taken on its own thread between two steps, in the group's store,
        and every member starts from it: the group starts as one learner. Returns this learner's policy version."""

        def join() -> int:
            self._leave_group()
            self.trainer.group = self.role.join(host, port, generation, self.device, self._group_state,
                                                self._take_group_state)
            self.role.record(self.trainer.train_steps, self.model)
            return self.version

        return await self.on_own_thread(join)

    def _group_state(self) -> dict:
        """What the leader hands the members of a new group generation."""
        return {"state": self._snapshot(), "env_steps_offset": self.env_steps_offset}

    def _take_group_state(self, leader: dict) -> None:
        """A member: start from the leader's :meth:`_group_state`."""
        self.trainer.load_state_dict(leader["state"])
        self.publication.version = int(leader["state"]["policy_version"])
        self.env_steps_offset = int(leader["env_steps_offset"])

    def _leave_group(self) -> None:
        from daskrl.algo.common.collectives import SoloGroup

        self.trainer.group.close()
        self.trainer.group = SoloGroup()

    # ---- parameters, checkpoints and restarts ----

    async def params_desc(self) -> dict:
        return self.publication.desc

    async def snapshot_descs(self) -> list[dict]:
        """The self-play snapshots' parameter blocks, as samplers attach them (empty without self-play)."""
        return self.snapshots.descs()

    async def enable_remote_params(self) -> dict:
        """Also publish every version over Dask comms from now on (a reader joined on another host: an elastic run
        grew there, or a component was recreated there); returns the new parameter block description."""

        def enable() -> dict:
            self.publication.go_remote(self.model, self.snapshots)
            return self.publication.desc

        return await self.on_own_thread(enable)

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

    # ---- the loop ----

    def on_start(self) -> None:
        self.batcher.start()

    def deliver(self, slot_name: str, payload: Any, topic: str = "") -> None:
        """As the base's; a slot announcement also starts the read of another host's slot here, as it arrives (on
        the worker's event loop), instead of after the training step in progress: it travels while the learner
        trains. Never raises (the bus calls it)."""
        batcher = self.batcher
        if slot_name == "on_trajectory" and batcher is not None:
            try:
                if self.reader.wants(payload):
                    batcher.announce(payload["worker"], payload["slot"], payload["inc"])
            except Exception as exc:  # the read is then started when the slot's turn comes
                self.incidents.note("read-ahead-failed", exc)
        super().deliver(slot_name, payload, topic)

    @slot
    def on_trajectory(self, payload: TrajectoryReady) -> None:
        if self.reader.wants(payload):  # another policy's slot is its learner's
            self.batcher.add(payload["worker"], payload["slot"], payload["inc"])

    @slot
    def on_shares(self, payload: SharesAssigned) -> None:
        """A member: the leader's split of a batch, of which this learner trains on its share."""
        self.batcher.add_share(payload["generation"], self.role.share_of(payload["shares"]))

    def _deliver(self, delivery: Delivery) -> None:
        """Called by the batcher thread: queue the batch for this component's thread and wake it."""
        self.deliver("_on_batch", delivery)

    def _on_batch(self, delivery: Delivery) -> None:
        self.batcher.taken()
        batch, version = delivery.batch, self.version
        if not self.role.accepts(delivery.generation, self.trainer.group):
            # formed for a group that is gone (or a member without its group): the leader hands its slots back
            self.counters["batches_dropped_regroup"] += 1
            self.batcher.release(delivery, version)
            return
        if batch is None:  # its every slot was lost mid-read (counted as such); a group peer's step times out
            self.counters["batches_dropped_lost"] += 1
            self.batcher.release(delivery, version)
            return
        env_steps = self.env_steps_offset + self.trainer.samples_trained
        try:
            with self.timing("train"):
                metrics = self.trainer.train(batch, version, env_steps, on_progress=self.beat)
        except GroupBroken as exc:
            self._group_broke(exc)
            self.batcher.release(delivery, version)
            return
        with self.timing("publish"):
            self.publication.publish(self.model)
        if self.first_step_at is None:  # the start-up clock's end (daskrl/driver/launch/startup.py): exact, not a poll's
            self.first_step_at = time.time()
        self.snapshots.after_publish(self.version, self.model)
        self.role.record(self.trainer.train_steps, self.model)
        # --sync: the slots go back only now, and nobody fills them before taking this version; a leader's members'
        # shares too (they trained on them in this step, so they had copied them)
        self.batcher.release(delivery, self.version)
        metrics["version_diff"] = float(version - batch.policy_version.mean())
        self._account(metrics)

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

    def _group_broke(self, exc: GroupBroken) -> None:
        """A member (or the leader) is gone: the leader trains alone, a member waits, until the group is formed
        again. Counted and logged; the step in progress is abandoned on every member. A member whose leader ended
        the group (the run stops) leaves it without an incident."""
        if not self.trainer.group.ended():
            self.incidents.note("learner-group-broken", exc)
        self._leave_group()

    def extra_stats(self) -> dict:
        batcher = self.batcher
        return {
            "max_policy_lag_seen": self.max_lag_seen,
            # samples trained on by lag (k versions old: [k]), and their median and 95th percentile over the run
            "policy_lag_counts": self.trainer.lag_counts.tolist(),
            "policy_lag_p50": lag_percentile(self.trainer.lag_counts, 50),
            "policy_lag_p95": lag_percentile(self.trainer.lag_counts, 95),
            "policy_version": self.version, "train_steps": self.trainer.train_steps, "policy": self.policy_index,
            "first_step_at": self.first_step_at,
            "snapshot_versions": self.snapshots.versions(),
            "remote_params": self.publication.remote,  # also scattered for other hosts
            "params_served": self.publication.served,  # copies of its block fetched by host relays
            "device": str(self.device),
            "group": {"rank": self.role.rank, "size": self.role.world, "generation": self.role.generation,
                      "training_with": self.trainer.group.world, "digests": list(self.role.digests)},
            "samples_trained": self.trainer.samples_trained, "metrics": dict(self.metrics),
            "batcher": {"batches": batcher.batches, "slots": batcher.slots, "dropped_slots": batcher.dropped_slots,
                        "slots_shm": batcher.copies["shm"], "slots_comms": batcher.copies["comms"],
                        "slots_by_worker": dict(batcher.slots_by_worker),
                        "copy_s_shm": batcher.copy_s["shm"], "copy_s_comms": batcher.copy_s["comms"],
                        "blocked_s": batcher.wait_s, "pending_slots": batcher.incoming.qsize(),
                        "lost_reads": batcher.lost_reads, "remote_reads": self.remote_reads.stats()},
            "hyperparams": self.trainer.hyperparams(), "step_hyperparams": list(self.step_hyperparams),
            "obs_mean": np.asarray(self.trainer.obs_rms.mean).tolist() if self.trainer.obs_rms else None,
            "time": time.time(),
        }

    def on_stop(self) -> None:
        self.batcher.stop()
        self.role.finish(self.trainer.group)


def build_trainer(model: Any, setup: LearnerSetup, device: Any) -> Any:
    """The trainer ``setup``'s algorithm names (``setup.trainer``), built the one way every trainer is built, so a
    learner never asks which algorithm it trains (torch is imported here, in the learner's worker)."""
    from daskrl.algo.common.policy_trainer import TrainerOptions

    options = TrainerOptions(setup.model, setup.learner, setup.algo, setup.total_env_steps)
    return class_at(setup.trainer).from_options(model, options, device)
