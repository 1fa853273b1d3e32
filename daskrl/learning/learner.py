"""The learner component: APPO training steps on batches from the batcher, then parameters version v+1.

Full slots arrive on ``on_trajectory`` (only indices travel); the batcher thread copies and frees them and
delivers batches to this component's own thread, which trains (``APPOTrainer``) and publishes the new weights
through the parameter store (shared memory on this host, scattered futures for other hosts), announcing each
version with the ``params_updated`` signal. A learner restarted after a fault continues from a checkpoint
(:meth:`Learner.load_state`) or, before the first one, from the weights the samplers act with
(:meth:`Learner.load_weights`).

With ``--num-learners K`` there are K learners of one policy: the leader (rank 0) receives the slots, splits each
batch over the group (``shares_assigned``) and publishes; the members train on their shares and publish nothing
(see :mod:`daskrl.learning.learner_group`). The runner forms the group (:meth:`Learner.open_group`,
:meth:`Learner.join_group`) before the start and again after a member or the leader was lost; until then a leader
whose group broke trains alone, and a member waits.
"""

from __future__ import annotations

import copy
import hashlib
import io
import time
from collections import deque
from typing import Any

import numpy as np
import torch

from daskrl import devices
from daskrl.algo.collectives import GroupBroken, SoloGroup
from daskrl.algo.hyperparams import checked
from daskrl.algo.trainer import APPOTrainer
from daskrl.learning.batcher import Batcher, Delivery
from daskrl.learning.learner_group import LearnerGroup, open_store
from daskrl.models.actor_critic import build_model
from daskrl.models.registry import install_components
from daskrl.protocol import FreeSlots, ParamsUpdated, SharesAssigned, TrajectoryReady, free_queue
from daskrl.runtime.component import Component
from daskrl.runtime.params import ParameterPublisher
from daskrl.runtime.shm import host_of
from daskrl.runtime.signals import signal, slot
from daskrl.setups import LearnerSetup


class Learner(Component):
    """See module docstring."""

    @signal
    def params_updated(self, payload: ParamsUpdated) -> None:
        """A new policy version is published (see :class:`~daskrl.protocol.ParamsUpdated`)."""

    @signal
    def shares_assigned(self, payload: SharesAssigned) -> None:
        """The leader split a batch: each member's share of its slots (see :class:`~daskrl.protocol.SharesAssigned`)."""

    def on_configure(self, setup: LearnerSetup) -> None:
        torch.set_num_threads(setup.learner.learner_threads)
        self.rank, self.world = setup.rank, setup.num_learners
        self.device = devices.resolve(setup.learner.learner_device, f"worker {self.worker.name} ({self.worker.address})",
                                      "--learner-device")
        install_components(setup.components)  # the user's encoders and cores, registered where the run started
        self.model = build_model(setup.spaces, setup.model, setup.seed)
        self.trainer = APPOTrainer(self.model, setup.learner, setup.total_env_steps, self.device)
        # only the leader publishes: the members hold the same weights
        self.publisher = ParameterPublisher(self, self.model.state_dict_numpy(), remote=setup.remote_params) \
            if self.rank == 0 else None
        self.version = self.publisher.publish(self.model.state_dict_numpy()) if self.publisher else 0
        # self-play: frozen past versions, each in a parameter block of its own, refreshed in turn (a block's version
        # is the policy version it holds); they start as the initial weights
        self.snapshot_every = setup.snapshot_every
        self.snapshots = [ParameterPublisher(self, self.model.state_dict_numpy(), remote=setup.remote_params)
                          for _ in range(setup.snapshots)]
        self.snapshot_weights = [self.model.state_dict_numpy() for _ in self.snapshots]  # what each block holds
        self.snapshots_taken = 0
        for snapshot, weights in zip(self.snapshots, self.snapshot_weights, strict=True):
            snapshot.publish(weights)
        self.generation = 0  # of the learner group this learner trains with (0: none yet)
        self.group_store = None  # the leader's TCPStore while it has a group
        self.policy_index = setup.policy_index
        self.tagged = setup.tagged  # slots say who acted: this learner takes only its policy's steps
        self.batcher = Batcher(self, setup.samples_per_batch, self._deliver, hold_slots=setup.learner.sync,
                               group=self._group_now, assign=self._assign,
                               policy=setup.policy_index if setup.tagged else None, cut=setup.cut)
        self.metrics: dict[str, float] = {}
        self.env_steps_offset = 0  # env steps before this learner started (resume)
        self.bad_steps = 0  # training steps in a row whose every update was skipped (NaN/inf)
        self.nan_tolerance = setup.learner.nan_tolerance
        self.max_lag_seen = 0.0  # the oldest sample trained on, in policy versions (0 throughout with --sync)
        self.digests: deque[tuple[int, str]] = deque(maxlen=200)  # (train step, weights digest): members agree

    def _group_now(self) -> tuple[int, int]:
        """(generation, size) of the group this learner trains with now (size 1 alone or while it is broken)."""
        return self.generation, self.trainer.group.world

    def _assign(self, generation: int, shares: list[list]) -> None:
        self.shares_assigned({"generation": generation, "shares": shares})

    async def open_group(self, world: int) -> dict:
        """The leader: a store for a new group generation of ``world`` learners; returns where members find it."""
        host = host_of(self.worker.address) or "127.0.0.1"
        self.group_store = open_store(host, world)
        return {"host": host, "port": self.group_store.port}

    async def join_group(self, host: str, port: int, generation: int) -> int:
        """Join group ``generation`` (blocks until every member has). The leader puts its whole training state
        (weights, optimizer, normalizers, counters), taken on its own thread between two steps, in the group's store,
        and every member starts from it: the group starts as one learner. Returns this learner's policy version."""

        def join() -> int:
            self.trainer.group.close()
            self.trainer.group = SoloGroup()
            key = f"daskrl-gen{generation}-state"
            if self.rank == 0:
                self.group_store.set(key, _pack({"state": self._snapshot(), "env_steps_offset": self.env_steps_offset}))
            group = LearnerGroup(host, port, self.rank, self.world, generation, self.device,
                                 store=self.group_store if self.rank == 0 else None)
            if self.rank > 0:
                leader = _unpack(group.store.get(key))
                self.trainer.load_state_dict(leader["state"])
                self.version = int(leader["state"]["policy_version"])
                self.env_steps_offset = int(leader["env_steps_offset"])
            self.generation = generation
            self.trainer.group = group
            self.digests.append((self.trainer.train_steps, self._digest()))
            return self.version

        return await self.on_own_thread(join)

    def _digest(self) -> str:
        """A digest of the weights: the members of a group hold the same after every step."""
        flat = torch.cat([v.detach().reshape(-1).double().cpu() for v in self.model.state_dict().values()])
        return hashlib.blake2b(flat.numpy().tobytes(), digest_size=8).hexdigest()

    async def params_desc(self) -> dict:
        assert self.publisher is not None, "the group leader (rank 0) publishes the parameters"
        return self.publisher.desc

    async def snapshot_descs(self) -> list[dict]:
        """The self-play snapshots' parameter blocks, as samplers attach them (empty without self-play)."""
        return [snapshot.desc for snapshot in self.snapshots]

    def _take_snapshot(self) -> None:
        """Every ``snapshot_every`` versions, the oldest snapshot block takes the current weights."""
        if not self.snapshots or self.version % self.snapshot_every:
            return
        j = self.snapshots_taken % len(self.snapshots)
        self.snapshot_weights[j] = self.model.state_dict_numpy()
        self.snapshots[j].version = self.version - 1  # the block's version names the policy version it holds
        self.snapshots[j].publish(self.snapshot_weights[j])
        self.snapshots_taken += 1

    async def enable_remote_params(self) -> dict:
        """Also publish every version over Dask comms from now on (a reader joined on another host: an elastic run
        grew there, or a component was recreated there); returns the new parameter block description."""

        def enable() -> dict:
            assert self.publisher is not None, "the group leader (rank 0) publishes the parameters"
            if not self.publisher.remote:
                self.publisher.remote = True
                self.publisher.publish_remote_now(self.model.state_dict_numpy())
                for snapshot, weights in zip(self.snapshots, self.snapshot_weights, strict=True):
                    snapshot.remote = True
                    snapshot.publish_remote_now(weights)
            return self.publisher.desc

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
            self.publisher.version = int(state.get("policy_version", 0))
            self.version = self.publisher.publish(self.model.state_dict_numpy())
            return self.version

        return await self.on_own_thread(load)

    async def load_weights(self, version: int, weights: dict, env_steps: int) -> int:
        """Continue from published weights alone (a restart before the first checkpoint): the model and its
        normalizer statistics, a fresh optimizer; republishes them as the version after ``version``."""

        def load() -> int:
            self.trainer.load_weights({k: torch.as_tensor(np.array(v)) for k, v in weights.items()})
            self.env_steps_offset = env_steps
            self.publisher.version = max(version, 0)
            self.version = self.publisher.publish(self.model.state_dict_numpy())
            return self.version

        return await self.on_own_thread(load)

    async def checkpoint_state(self) -> dict:
        """A consistent snapshot (between two training steps) for the runner to write to disk."""

        return await self.on_own_thread(self._snapshot)

    def _snapshot(self) -> dict:
        state = self.trainer.state_dict()
        state["policy_version"] = self.version
        return state

    # ---- population-based training: another policy's state, other hyperparameters ----

    async def hyperparams(self) -> dict[str, float]:
        """The learning rate, entropy coefficient, clip ratio and gamma this policy trains with now."""
        return self.trainer.hyperparams()

    async def set_hyperparams(self, values: dict[str, float]) -> dict[str, float]:
        """Train with these values from the next step on (set between two steps); returns all of them."""

        def set_() -> dict[str, float]:
            self.trainer.set_hyperparams(values)
            return self.trainer.hyperparams()

        return await self.on_own_thread(set_)

    async def export_training_state(self) -> dict:
        """This policy's whole training state (weights, optimizer, normalizers, hyperparameters, policy version),
        taken between two training steps, as CPU copies that share nothing with the live model: for PBT to
        :meth:`import_training_state` into another policy's learner."""
        return await self.on_own_thread(lambda: export_state(self.trainer, self.version))  # version read there too

    async def import_training_state(self, state: dict, hyperparams: dict[str, float]) -> int:
        """Continue from another policy's :meth:`export_training_state` with ``hyperparams``: its weights,
        optimizer state and normalizers, loaded between two training steps (no step mixes old and new weights).
        This learner's own counters go on: its policy version (the loaded weights are published as its next one,
        so its samplers take them), train steps and samples trained (its env steps). Returns the new version.
        With a learner group, call it on the leader, then form the group again (:meth:`join_group` gives the
        members the leader's whole state)."""

        def load() -> int:
            import_state(self.trainer, state, hyperparams)
            self.bad_steps = 0
            if self.publisher is None:
                self.version += 1  # a member: the leader publishes
                return self.version
            self.version = self.publisher.publish(self.model.state_dict_numpy())
            self.params_updated({"version": self.version})
            return self.version

        return await self.on_own_thread(load)

    # ---- the loop ----

    def on_start(self) -> None:
        self.batcher.start()

    @slot
    def on_trajectory(self, payload: TrajectoryReady) -> None:
        if "policies" in payload and self.policy_index not in payload["policies"]:
            return  # another policy's slot: its learner takes it
        self.batcher.add(payload["worker"], payload["slot"], payload["inc"])

    @slot
    def on_shares(self, payload: SharesAssigned) -> None:
        """A member: the leader's split of a batch; this learner's share is at ``rank - 1``."""
        self.batcher.add_share(payload["generation"], payload["shares"][self.rank - 1])

    def _deliver(self, delivery: Delivery) -> None:
        """Called by the batcher thread: queue the batch for this component's thread and wake it."""
        self.deliver("_on_batch", delivery)

    def _on_batch(self, delivery: Delivery) -> None:
        self.batcher.taken()
        batch, version = delivery.batch, self.version
        if delivery.generation != self.generation or (self.rank > 0 and self.trainer.group.world == 1):
            # formed for a group that is gone (or a member without its group): the leader hands its slots back
            self.counters["batches_dropped_regroup"] += 1
            self._free(delivery.held + delivery.member_slots, version if delivery.held else None)
            return
        env_steps = self.env_steps_offset + self.trainer.samples_trained
        try:
            with self.timing("train"):
                metrics = self.trainer.train(batch, version, env_steps, on_progress=self.beat)
        except GroupBroken as exc:
            self._group_broke(exc)
            self._free(delivery.held + delivery.member_slots, version if delivery.held else None)
            return
        if self.publisher is not None:
            with self.timing("publish"):
                self.version = self.publisher.publish(self.model.state_dict_numpy())
            updated: ParamsUpdated = {"version": self.version}
            self.params_updated(updated)
            self._take_snapshot()
        else:
            self.version += 1  # a member: the leader published the same weights as this version
        if self.world > 1:
            self.digests.append((self.trainer.train_steps, self._digest()))
        # --sync: the slots go back only now, and nobody fills them before taking this version; a leader's members'
        # shares too (they trained on them in this step, so they had copied them)
        self._free(delivery.held, self.version)
        self._free(delivery.member_slots, self.version if delivery.held else None)
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

    def _group_broke(self, exc: GroupBroken) -> None:
        """A member (or the leader) is gone: the leader trains alone, a member waits, until the group is formed
        again. Counted and logged; the step in progress is abandoned on every member."""
        self.incidents.note("learner-group-broken", exc)
        self.trainer.group.close()
        self.trainer.group = SoloGroup()

    def _free(self, slots: list[tuple[str, int, str]], version: int | None) -> None:
        """Hand ``slots`` back to their rollout workers (with ``version``: to be filled by that version or newer)."""
        by_owner: dict[tuple[str, str], list[int]] = {}
        for worker, slot_index, incarnation in slots:
            by_owner.setdefault((worker, incarnation), []).append(slot_index)
        for (worker, incarnation), indices in by_owner.items():
            freed: FreeSlots = {"slots": indices, "inc": incarnation}
            if version is not None:
                freed["version"] = version
            if self.tagged:
                freed["policy"] = self.policy_index
            self.put(free_queue(worker), freed)

    def extra_stats(self) -> dict:
        return {
            "max_policy_lag_seen": self.max_lag_seen,
            "policy_version": self.version, "train_steps": self.trainer.train_steps, "policy": self.policy_index,
            "snapshot_versions": [snapshot.version for snapshot in self.snapshots],
            "remote_params": bool(self.publisher and self.publisher.remote),  # also scattered for other hosts
            "device": str(self.device),
            "group": {"rank": self.rank, "size": self.world, "generation": self.generation,
                      "training_with": self.trainer.group.world, "digests": list(self.digests)},
            "samples_trained": self.trainer.samples_trained, "metrics": dict(self.metrics),
            "batcher": {"batches": self.batcher.batches, "slots": self.batcher.slots,
                        "dropped_slots": self.batcher.dropped_slots, "slots_shm": self.batcher.slots_shm,
                        "slots_comms": self.batcher.slots_comms,
                        "slots_by_worker": dict(self.batcher.slots_by_worker),
                        "copy_s_shm": self.batcher.copy_s_shm, "copy_s_comms": self.batcher.copy_s_comms,
                        "blocked_s": self.batcher.wait_s, "pending_slots": self.batcher.incoming.qsize()},
            "hyperparams": self.trainer.hyperparams(),
            "obs_mean": np.asarray(self.trainer.obs_rms.mean).tolist() if self.trainer.obs_rms else None,
            "time": time.time(),
        }

    def on_stop(self) -> None:
        self.batcher.stop()


def export_state(trainer: APPOTrainer, version: int) -> dict:
    """``trainer``'s state dict and ``version`` (as a checkpoint holds them), every tensor copied to the CPU: the
    copy shares no storage with the live model or optimizer, which go on training."""
    state = _cpu_copy(trainer.state_dict())
    state["policy_version"] = int(version)
    return state


def import_state(trainer: APPOTrainer, state: dict, hyperparams: dict[str, float]) -> None:
    """Load another policy's trainer state (:meth:`APPOTrainer.state_dict`) into ``trainer`` with ``hyperparams``,
    keeping ``trainer``'s own counters. Loaded from a copy: a state handed over without serialization (in-process
    workers) or imported by two policies must not share tensors, or their optimizers would update each other's
    moments. Nothing changes when it fails (a state of another network, a bad hyperparameter)."""
    new_hp = checked(hyperparams)  # before anything changes
    own = (trainer.train_steps, trainer.skipped_steps, trainer.samples_trained)
    backup = _cpu_copy(trainer.state_dict())
    try:
        trainer.load_state_dict(copy.deepcopy(state))
    except Exception:
        trainer.load_state_dict(backup)
        raise
    trainer.train_steps, trainer.skipped_steps, trainer.samples_trained = own
    trainer.set_hyperparams(new_hp)  # over the source's (loaded with its state): names not given keep those


def _cpu_copy(obj: Any) -> Any:
    """``obj`` with every tensor copied to the CPU (dicts, lists and tuples walked; the rest kept)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: _cpu_copy(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cpu_copy(v) for v in obj)
    return copy.deepcopy(obj)


def _pack(obj: dict) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def _unpack(blob: bytes) -> dict:
    return torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True)
