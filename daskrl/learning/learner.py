"""The on-policy learner component: APPO training steps on batches from the batcher, then parameters version v+1.

Full slots arrive on ``on_trajectory`` (only indices travel); the batcher thread copies and frees them and
delivers batches to this component's own thread, which trains (``APPOTrainer``) and publishes the new weights
through the parameter store (shared memory on this host, scattered futures for other hosts); samplers poll the
store's version. Publishing, checkpoints, restarts and PBT's training states are every learner's
(:class:`~daskrl.learning.learner_base.LearnerBase`).

The component composes its jobs, each chosen once from its setup: training (the trainer, and the batcher with its
slot reader), its place in a learner group (:mod:`daskrl.learning.group.group_member`: with ``--num-learners K`` the
leader, rank 0, receives the slots, splits each batch over the group and publishes; the members train on their
shares and publish nothing; the runner forms the group with :meth:`Learner.open_group` and
:meth:`Learner.join_group` before the start and again after a member or the leader was lost) and self-play
snapshots (:mod:`daskrl.learning.snapshots`).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from daskrl.algo.appo.policy_lag import lag_percentile
from daskrl.errors import GroupBroken
from daskrl.learning.batcher import Batcher, Delivery
from daskrl.learning.learner_base import LearnerBase
from daskrl.learning.slot_reader import reader_for
from daskrl.learning.step_log import NoStepLog, StepLog
from daskrl.protocol import SharesAssigned, TrajectoryReady
from daskrl.runtime.actors.signals import signal, slot
from daskrl.runtime.memory.shm import host_of
from daskrl.setups import LearnerSetup

__all__ = ["Learner"]


def seed_step(seed: int, step: int) -> None:
    """--deterministic and --record-schedule: the step's minibatch order from the run's seed and the step's number,
    not from a generator other components of this process (``--serial`` runs them all in one) may have drawn from
    before it."""
    import torch

    torch.manual_seed(seed * 1_000_003 + step)


def unseeded_step(seed: int, step: int) -> None:
    """Minibatches drawn from torch's generator as it stands (runs that need not repeat)."""


class Learner(LearnerBase):
    """See the module docstring."""

    #: the batcher, once configured
    batcher: Batcher | None = None
    #: --deterministic: the step just trained, its slots held until the driver has read the run at this step
    held: tuple[Delivery, int] | None = None
    #: --deterministic: set on the event loop when a step is held (the driver's wait_held_step waits on it)
    held_event: asyncio.Event | None = None

    @signal
    def shares_assigned(self, payload: SharesAssigned) -> None:
        """The leader split a batch: each member's share of its slots (see :class:`~daskrl.protocol.SharesAssigned`)."""

    def on_configure(self, setup: LearnerSetup) -> None:
        repeatable = setup.deterministic or setup.record_schedule
        if repeatable:  # before the model and its kernels are built: a timed kernel choice could differ from its twin's
            from daskrl.models.inputs.activations import pin_standard_tanh

            pin_standard_tanh()
        self.configure_learner(setup, setup.rank, setup.num_learners, setup.snapshots, setup.snapshot_every)
        self.reader = reader_for(setup.policy_index, setup.tagged, setup.cut, self.model.recurrent)
        self.batcher = Batcher(self, setup.samples_per_batch, self._deliver, hold_slots=setup.learner.sync,
                               group=self._group_now, assign=self._assign, reader=self.reader)
        self.seed_step = seed_step if repeatable else unseeded_step
        self.step_log = StepLog() if setup.record_schedule else NoStepLog()  # what `daskrl replay` re-executes
        if repeatable and self.device.type != "cpu":
            import torch

            # kernels that add with atomics on a GPU; on the CPU the flag changed no byte of a run and slowed its
            # steps by a third (benchmarks/bench_record_schedule.py), so it is left off there
            torch.use_deterministic_algorithms(True, warn_only=True)  # a GPU kernel without one says so in the log

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

    async def attach_workers(self, buffers: dict[str, dict]) -> list[str]:
        """Attach the slot arrays of these rollout workers ({name: buffers()}); may be called while running."""

        def attach() -> list[str]:
            self.batcher.attach(buffers)
            return sorted(self.batcher.workers)

        return await self.on_own_thread(attach)

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
        self.seed_step(self.setup.seed, self.trainer.train_steps)
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
        # shares too (they trained on them in this step, so they had copied them). --deterministic: only once the
        # driver has read every component at this step (release_step), while nothing moves
        if not self.setup.deterministic:
            self.batcher.release(delivery, self.version)
        metrics["version_diff"] = float(version - batch.policy_version.mean())
        self.step_log.trained(self.trainer.train_steps, delivery.slots, self.version, metrics, self.trainer.step_hp)
        self._account(metrics)
        if self.setup.deterministic:  # held once the step's metrics are in: the driver's poll reads them
            self.held = (delivery, self.version)
            self.worker.loop.add_callback(self._tell_held)

    def _tell_held(self) -> None:
        """On the event loop: wake a driver waiting in :meth:`wait_held_step`."""
        if self.held_event is not None:
            self.held_event.set()

    async def wait_held_step(self, timeout: float) -> int | None:
        """--deterministic: the training steps taken once a step is held for the driver (at once if one is), or None
        after ``timeout`` seconds. One call per step: asking again and again would take the cores the step needs."""
        if self.held is None:
            self.held_event = asyncio.Event()  # set by _tell_held, which runs on this loop after a step is held
            if self.held is None:  # (held just before the event existed: _tell_held found none to set)
                try:
                    await asyncio.wait_for(self.held_event.wait(), timeout)
                except asyncio.TimeoutError:
                    return None
        return self.trainer.train_steps

    async def release_step(self) -> int:
        """--deterministic: hand back the slots of the step held (the driver read the run at it); returns the
        training steps taken so far."""

        def release() -> int:
            if self.held is not None:
                self.batcher.release(*self.held)
                self.held = None
            return self.trainer.train_steps

        return await self.on_own_thread(release)

    def _group_broke(self, exc: GroupBroken) -> None:
        """A member (or the leader) is gone: the leader trains alone, a member waits, until the group is formed
        again. Counted and logged; the step in progress is abandoned on every member. A member whose leader ended
        the group (the run stops) leaves it without an incident."""
        if not self.trainer.group.ended():
            self.incidents.note("learner-group-broken", exc)
        self._leave_group()

    def take_news(self) -> dict:
        """--record-schedule: the training steps since the last collect (see :mod:`daskrl.learning.step_log`)."""
        return self.step_log.news()

    def extra_stats(self) -> dict:
        batcher = self.batcher
        return {
            **self.learner_stats(),
            # samples trained on by lag (k versions old: [k]), and their median and 95th percentile over the run
            "policy_lag_counts": self.trainer.lag_counts.tolist(),
            "policy_lag_p50": lag_percentile(self.trainer.lag_counts, 50),
            "policy_lag_p95": lag_percentile(self.trainer.lag_counts, 95),
            "group": {"rank": self.role.rank, "size": self.role.world, "generation": self.role.generation,
                      "training_with": self.trainer.group.world, "digests": list(self.role.digests)},
            "batcher": {"batches": batcher.batches, "slots": batcher.slots, "dropped_slots": batcher.dropped_slots,
                        "slots_shm": batcher.copies["shm"], "slots_comms": batcher.copies["comms"],
                        "slots_by_worker": dict(batcher.slots_by_worker),
                        "copy_s_shm": batcher.copy_s["shm"], "copy_s_comms": batcher.copy_s["comms"],
                        "blocked_s": batcher.wait_s, "pending_slots": batcher.incoming.qsize(),
                        "lost_reads": batcher.lost_reads, "remote_reads": self.remote_reads.stats()},
        }

    def on_stop(self) -> None:
        self.batcher.stop()
        self.role.finish(self.trainer.group)

