"""The off-policy learner: minibatches drawn from replay shards, one update each, priorities sent back.

Under an off-policy algorithm (``--algo dqn`` or ``sac``) rollout workers' slots go to the replay shards
(:mod:`daskrl.replay.shard`), not here. This learner keeps one :class:`~daskrl.protocol.SampleRequest` in flight
per shard, each for up to ``--replay-batches-per-request`` minibatches; a shard answers when it holds enough
transitions and the update-to-data ratio allows at least one draw (with as many as it allows), so the learner
waits for data (its ``waiting`` share) rather than over-training a small buffer. On each answer it copies the
minibatches out of the shard's batch block, asks that shard for the next ones (the shard draws while these train),
makes one update per minibatch in order (:class:`~daskrl.algo.dqn.trainer.DQNTrainer`,
:class:`~daskrl.algo.sac.trainer.SACTrainer`), sends all their TD errors back in one message as the transitions'
new priorities, and publishes the weights once per answer when it crossed a multiple of :data:`PUBLISH_EVERY`
updates (the version then grows by one per :data:`PUBLISH_EVERY` updates, as when it published that often). One
message round trip so pays for several updates; the price is priorities up to two answers stale (the next answer is
drawn before this one's TD errors arrive), as Ape-X's learner accepts.

An offline run (``--algo bc|iql|cql``, no env steps) asks for no minibatches past ``--train-for-updates``, so it ends
within one answer of its budget, not when the driver's next poll sees the count there.

A shard that does not answer within :data:`REQUEST_TIMEOUT_S` is asked again (it may have been lost and recreated
under its name); the runner hands this learner a recreated shard's batch block with :meth:`attach_replay`. Until
then training goes on with the other shards. Everything else (parameters, checkpoints, restarts, statistics) is every
learner's (:class:`~daskrl.learning.learner_base.LearnerBase`).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from daskrl.learning.learner_base import LearnerBase
from daskrl.protocol import (
    BatchReady,
    PriorityUpdate,
    SampleRequest,
    TrajectoryReady,
    pack,
    priorities_queue,
    replay_queue,
    unpack,
)
from daskrl.runtime.actors.signals import slot
from daskrl.setups import LearnerSetup

#: seconds after which an unanswered request to a shard is sent again (a shard holds requests while it fills, so
#: an answer may take long; asking again costs one message, and a late answer to an older request is ignored)
REQUEST_TIMEOUT_S = 5.0
#: updates between two published parameter versions
PUBLISH_EVERY = 8


class ReplayLearner(LearnerBase):
    """See the module docstring."""

    def on_configure(self, setup: LearnerSetup) -> None:
        self.configure_learner(setup, rank=0, world=1, snapshots=0, snapshot_every=1)  # alone, no self-play
        self.shards: dict[str, dict[str, Any]] = {}  # shard -> {"inc", "arrays", "asked": (id, time) or None}
        self.next_id = 0
        self.replay_seen: dict[str, dict[str, int]] = {}  # shard -> size and transitions added, as last answered
        self.batches_per_request = max(1, setup.algo.replay_batches_per_request)  # resolved by the setup
        self.total_env_steps = setup.total_env_steps  # the length of --lr-schedule linear
        self.offline = setup.offline  # progress in updates (no env steps)
        self.add_timer(1.0, self._ask_again)

    async def attach_workers(self, buffers: dict[str, dict]) -> list[str]:
        """Slots go to the replay shards, not here: nothing to attach."""
        return []

    async def attach_replay(self, shards: dict[str, dict]) -> list[str]:
        """Read minibatches from these shards ({name: ReplayShard.batch_descs()}), a recreated one included, and
        ask each for one; may be called while running."""

        def attach() -> list[str]:
            for name, descs in shards.items():
                arrays = {field: self.attach_array(desc) for field, desc in descs["arrays"].items()}
                self.shards[name] = {"inc": descs["inc"], "arrays": arrays, "asked": None}
                if self.state == "running" and self._wants():
                    self._ask(name)
            return sorted(self.shards)

        return await self.on_own_thread(attach)

    def on_start(self) -> None:
        for name in self.shards:
            if self._wants():
                self._ask(name)

    def _wants(self, coming: int = 0) -> bool:
        """Whether to ask for more minibatches: always in an online run; in an offline one until its updates, with
        the ``coming`` ones about to train, reach --train-for-updates, so it stops within one answer of its budget
        however long the driver takes to see it there (a loaded machine once saw 141 updates more)."""
        budget = self.total_env_steps if self.offline else 0
        return not budget or self.trainer.train_steps + coming < budget

    def _ask(self, shard: str) -> None:
        request: SampleRequest = {"learner": self.name, "id": self.next_id, "k": self.batches_per_request}
        self.shards[shard]["asked"] = (self.next_id, time.monotonic())
        self.next_id += 1
        self.put(replay_queue(shard), request)

    def _ask_again(self) -> None:
        now = time.monotonic()
        for name, shard in self.shards.items():
            if shard["asked"] is not None and now - shard["asked"][1] > REQUEST_TIMEOUT_S:
                self.counters["requests_resent"] += 1
                self._ask(name)

    @slot
    def on_trajectory(self, payload: TrajectoryReady) -> None:
        self.counters["unexpected_slots"] += 1  # slots go to the shards: one here is a wiring bug

    @slot
    def on_batch_ready(self, payload: BatchReady) -> None:
        shard = self.shards.get(payload["shard"])
        if shard is None or shard["inc"] != payload["inc"] or shard["asked"] is None \
                or shard["asked"][0] != payload["id"]:
            self.counters["stale_batches"] += 1  # an answer to a request asked again, or from a lost incarnation
            return
        count = payload["count"]
        with self.timing("copy"):  # one copy per field of every minibatch of the answer
            batches = {field: array.read((payload["buffer"], slice(0, count)))
                       for field, array in shard["arrays"].items()}
        weights = unpack(payload["weights"], "float32").reshape(count, payload["batch"])
        self.replay_seen[payload["shard"]] = {"size": payload["size"], "added": payload["added"]}
        if self._wants(coming=count):
            self._ask(payload["shard"])  # the shard draws the next minibatches while these train
        else:
            shard["asked"] = None
        before = self.trainer.train_steps
        try:
            with self.timing("train"):
                metrics, td_errors, applied = self.trainer.train_many(batches, weights, self._progress(),
                                                                      self.total_env_steps)
        except Exception as exc:  # a trainer that raises once raises on every minibatch: stop the run, do not spin
            self.fail("training", exc)
            return
        if metrics["updates"]:
            self.put(priorities_queue(payload["shard"]), _priorities(payload, td_errors, applied))
        if shard["asked"] is None and self._wants():
            self._ask(payload["shard"])  # some minibatches were skipped (not finite): the budget is not met yet
        self._publish(before)
        metrics["policy_lag_max"] = 0.0
        self._account(metrics, steps=count)

    def _progress(self) -> int:
        """How far the run is, for the learning-rate schedule: its updates in an offline run, else its env steps."""
        return self.trainer.train_steps if self.offline else self._env_steps()

    def _env_steps(self) -> int:
        """How far the run is, for the learning-rate schedule: the transitions the shards have taken in (each an env
        step). A shard restored from a checkpoint (--checkpoint-replay) counts from its saved total; one that starts
        empty on a resume counts from 0, so the steps the run resumed from are the floor."""
        added = sum(int(seen["added"]) for seen in self.replay_seen.values())
        return max(added, self.env_steps_offset)

    def _publish(self, before: int) -> None:
        """Publish the weights if the updates since ``before`` crossed a multiple of :data:`PUBLISH_EVERY`, as the
        version one per multiple crossed (readers see versions grow as if published every that many updates)."""
        crossed = self.trainer.train_steps // PUBLISH_EVERY - before // PUBLISH_EVERY
        if crossed > 0:
            with self.timing("publish"):
                self.publication.publish_after(self.version + crossed - 1, self.model)

    def extra_stats(self) -> dict:
        return {**self.learner_stats(), "group": {"rank": 0, "size": 1, "generation": 0, "training_with": 1,
                                                  "digests": []},
                "batcher": {}, "replay_seen": {k: dict(v) for k, v in self.replay_seen.items()}}

    def on_stop(self) -> None:
        """No batcher thread to stop."""


def _priorities(answer: BatchReady, td_errors: np.ndarray, applied: np.ndarray) -> PriorityUpdate:
    """The new priorities of an answer's minibatches that updated the networks (a skipped one's transitions keep
    theirs, as before)."""
    positions, stamps = answer["positions"], answer["stamps"]
    if not applied.all():
        rows = answer["batch"]
        keep = np.repeat(applied, rows)
        positions = pack(unpack(positions, "int64")[keep], "int64")
        stamps = pack(unpack(stamps, "int64")[keep], "int64")
        td_errors = td_errors[applied]
    return {"inc": answer["inc"], "positions": positions, "stamps": stamps, "td_errors": pack(td_errors, "float32")}
