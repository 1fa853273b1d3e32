"""The rollout worker: steps its envs and writes every step straight into shared-memory trajectory slots.

Its ``num_envs`` envs are split into ``num_splits`` groups. Each split fills one slot at a time; a full slot is
announced with the ``trajectory_ready`` signal (only its index travels: :class:`~daskrl.protocol.TrajectoryReady`)
and the split moves on to a free slot, or waits for one (back-pressure: the learner frees slots when it has
trained on them). Where the actions come from, its own policy copy or inference workers, is the job of its
acting strategy (:mod:`daskrl.sampling.acting`); the slots and the env stepping are the same either way.

What differs between runs is chosen once, when the worker is configured, as objects the per-step code calls
without asking which kind they are: the env groups (:mod:`daskrl.envs.groups`), who plays each split's columns
and is credited with its episodes (:mod:`daskrl.sampling.policies.split_policies`; one policy is a map of one), how a
recurrent policy's states are carried (:mod:`daskrl.sampling.slots.state_carry`) and who must hand a full slot back
(:mod:`daskrl.sampling.slots.slot_owners`).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from typing import Any

import numpy as np

from daskrl.envs.groups import split_groups
from daskrl.envs.packages import import_env_packages
from daskrl.envs.registry import register_env
from daskrl.errors import EnvStepError
from daskrl.protocol import ENV_ERRORS_TOPIC, ActionsReady, FreeSlots, TrajectoryReady
from daskrl.runtime.actors.component import Component
from daskrl.runtime.actors.signals import signal, slot
from daskrl.sampling.acting import InlineActing, RemoteActing
from daskrl.sampling.episode import Episode, wire_form
from daskrl.sampling.policies.split_policies import OnePolicy, SplitPolicies, mapped_policies
from daskrl.sampling.slots.episode_recorder import episode_recorder
from daskrl.sampling.slots.fill_log import FillLog, NoFillLog
from daskrl.sampling.slots.slot_owners import OneConsumer, PolicyConsumers, SlotOwners
from daskrl.sampling.slots.state_carry import state_carry_for
from daskrl.sampling.slots.trajectories import SlotLayout, create_slots
from daskrl.setups import RolloutSetup


class RolloutWorker(Component):
    """See module docstring."""

    @signal
    def trajectory_ready(self, payload: TrajectoryReady) -> None:
        """A slot is full (see :class:`~daskrl.protocol.TrajectoryReady`)."""

    def on_configure(self, setup: RolloutSetup) -> None:
        import_env_packages(setup.env.env_packages)  # the ids their import registers (--env-packages)
        if setup.env_factory is not None:
            register_env(setup.env.env, setup.env_factory)
        self.env_spec = setup.env.env
        self.incarnation = os.urandom(4).hex()  # tells this worker's slots from a predecessor's after a restart
        self.rollout = setup.rollout
        self.groups = split_groups(setup.env, setup.spaces, setup.num_envs, setup.num_splits, setup.seed,
                                   setup.worker_index, setup.env_failure_limit, setup.info_keys,
                                   setup.course.task_level)
        self.agents_per_env = setup.spaces.num_agents  # a multi-agent env's group has a column per agent
        self._create_slots(setup)
        #: free slots, the most recently freed taken first (``pop``): slots beyond what sampling and the learner keep
        #: in use at once are never written, so their shared memory (tmpfs pages, allocated on first write) never
        #: exists; taken in turn, every slot was written within seconds
        self.free: deque[int] = deque(range(self.layout.num_slots - 1, -1, -1))
        self.split_slot: list[int | None] = [None] * setup.num_splits
        self.split_t = [0] * setup.num_splits
        self.carry = [np.empty_like(self.obs[0, 0]) for _ in range(setup.num_splits)]  # obs that starts the next slot
        self.waiting: deque[int] = deque()  # splits waiting for a free slot
        self.episodes: deque[Episode] = deque(maxlen=10_000)
        self.episode_extras: deque = deque(maxlen=10_000)  # info numbers of finished episodes (see EnvGroup)
        self.env_steps = 0
        self.slots_filled = 0
        self.draining = False  # leaving: no new slot is started (see drain)
        self.env_failure_log: deque = deque(maxlen=100)  # first report of each distinct env error
        self._seen_failures: set[str] = set()
        self._choose_owners(setup)
        self.acting = InlineActing(self, setup.policy, setup.policy_params, setup.policy_spaces,
                                   setup.spaces) if setup.policy is not None \
            else RemoteActing(self, setup.policy_queue, setup.num_policies)
        #: --record-schedule: each filled slot's split and policy versions, for the runner to write down
        # (remote inference is refused with it before the run starts: its batches span rollout workers)
        self.fill_log = FillLog(setup.worker_index, self.incarnation) if setup.record_schedule else NoFillLog()
        #: --record-dataset: whole episodes cut out of the filled slots, for the driver to write
        self.recorder = episode_recorder(self.groups, setup.record_quotas)

    def _create_slots(self, setup: RolloutSetup) -> None:
        """The slot pool in shared memory, its arrays by name, and the carry of a recurrent policy's states."""
        columns = sum(g.num_envs for g in self.groups)  # with a multi-agent env, one per agent of each env
        self.layout = SlotLayout.for_worker(setup.spaces, columns, setup.num_splits, setup.rollout,
                                            setup.slots_per_split, setup.rnn_state_size, setup.tagged)
        self.shared = create_slots(self, self.layout)
        a = {name: arr.array for name, arr in self.shared.items()}
        self.arrays = a
        self.obs, self.actions, self.rewards = a["obs"], a["actions"], a["rewards"]
        self.terminated, self.truncated = a["terminated"], a["truncated"]
        self.log_probs, self.policy_version = a["log_probs"], a["policy_version"]
        self.final_obs, self.final_at = a["final_obs"], a["final_at"]
        self.finals_in_slot = [0] * self.layout.num_slots  # final observations written into each slot
        self.state_carry = state_carry_for(a, setup.num_splits)

    def _choose_owners(self, setup: RolloutSetup) -> None:
        """Who plays each split's columns, and who must hand a full slot back: tagged slots (several policies, or
        agents that may sit steps out) say who acted and go to each acting policy's learner; untagged ones are one
        policy's, for one consumer."""
        self.split_policies: list[SplitPolicies]
        self.owners: SlotOwners
        if setup.tagged:
            self.owners = PolicyConsumers(self.arrays["policy_id"], setup.rollout, setup.num_policies)
            self.split_policies = mapped_policies(
                setup.policy_mapping, setup.num_policies, setup.snapshots, setup.spaces.num_agents, self.groups,
                setup.num_envs // setup.num_splits, setup.worker_index * setup.num_envs, setup.run_envs,
                self.terminated, self.truncated, self.episode_extras, setup.course.opponent_weights)
        else:
            self.owners = OneConsumer()
            self.split_policies = [OnePolicy(g.num_envs) for g in self.groups]

    async def buffers(self) -> dict:
        """Descriptions of the slot arrays (plus this incarnation's id) for inference workers and the learner."""
        out: dict[str, Any] = {name: arr.desc for name, arr in self.shared.items()}
        out["_incarnation"] = self.incarnation
        return out

    async def set_params(self, desc: dict, policy: int = 0) -> None:
        """Read ``policy``'s parameters from a new publisher (a restarted learner); take whatever version it has."""
        await self.on_own_thread(self.acting.follow, desc, policy)

    async def policy_weights(self, policy: int = 0) -> dict | None:
        """The version and weights the inline policy acts with (None with remote inference)."""
        return await self.on_own_thread(self.acting.weights, policy)

    async def set_task_level(self, level: int) -> None:
        """A curriculum moved on: every env plays task ``level`` from its next episode on (no episode is cut)."""
        await self.on_own_thread(self._set_task_level, level)

    def _set_task_level(self, level: int) -> None:
        for group in self.groups:
            group.set_task_level(level)

    async def draw_opponents_by(self, weights: tuple[tuple[float, ...], ...]) -> None:
        """A league's new opponent draw (``weights[k][a]``: acting policy ``a`` beside trained policy ``k``), for the
        episodes every env begins from now on."""
        await self.on_own_thread(self._draw_opponents_by, weights)

    def _draw_opponents_by(self, weights: tuple[tuple[float, ...], ...]) -> None:
        for split in self.split_policies:
            split.draw_opponents_by(weights)

    async def drain(self, timeout: float = 10.0) -> dict:
        """Leave without losing a sample (the worker is going away gracefully): finish the slots being filled,
        start no new one, wait until the consumer has handed every announced slot back, then stop. Returns the
        final :meth:`collect`, with ``drained`` (False: the consumer did not hand everything back in time)."""
        await self.on_own_thread(self._begin_drain)
        deadline = time.monotonic() + timeout
        while not (drained := await self.on_own_thread(self._drained)) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        final = await self.stop()
        final["drained"] = drained
        return final

    def _begin_drain(self) -> None:
        self.draining = True

    def _drained(self) -> bool:
        return all(s is None for s in self.split_slot) and len(self.free) == self.layout.num_slots

    async def reclaim_slots(self, policy: int | None = None) -> int:
        """Take back every slot not being filled (their consumer died before handing them back); with ``policy``,
        only what that policy's (lost) learner owed: the other policies' learners still hand theirs back."""

        def reclaim() -> int:
            self._free(self.owners.reclaim(policy))
            return len(self.free)

        return await self.on_own_thread(reclaim)

    # ---- the loop ----

    def on_start(self) -> None:
        for s, group in enumerate(self.groups):
            slot_index = self.free.pop()
            with self.timing("env"):
                group.reset(self.obs[slot_index, 0])
            group.pop_new_episodes()  # the first episodes: their policies were chosen with the map
            self._begin_slot(s, slot_index)
        self.acting.begin()

    def _begin_slot(self, s: int, slot_index: int) -> None:
        self.split_slot[s] = slot_index
        self.state_carry.begin_slot(s, slot_index)
        self.final_at[slot_index] = -1
        self.finals_in_slot[slot_index] = 0

    def run_once(self) -> bool:
        return self.acting.run_once()

    def step_split(self, s: int) -> bool:
        """Step split ``s`` with the actions at its current step; True when that filled its slot (the split
        then continues in a new slot, or waits for one)."""
        slot_index, t = self.split_slot[s], self.split_t[s]
        group = self.groups[s]
        try:
            with self.timing("env"):
                group.step(self.actions[slot_index, t], self.obs[slot_index, t + 1], self.rewards[slot_index, t],
                           self.terminated[slot_index, t], self.truncated[slot_index, t])
        except EnvStepError as exc:
            raise EnvStepError(exc.env_index, exc.phase, f"{exc.summary} [environment {self.env_spec!r}, env "
                               f"{exc.env_index} of split {s} on rollout worker {self.name!r}]") from exc
        self.state_carry.reset_ended(slot_index, t)
        self.recorder.step_taken(s, t)
        if group.failures:
            self._note_env_failures(s, group.pop_failures())
        if group.truncations:
            self._keep_final_observations(slot_index, t, group.pop_truncations())
        self.env_steps += group.num_envs // self.agents_per_env  # env steps, not agent steps
        split = self.split_policies[s]
        if group.finished_episodes:
            self.episodes.extend(split.credit(group.pop_episode_stats(), self.acting.version_of))
            if group.episode_extras:
                self.episode_extras.extend(group.pop_episode_extras())
        split.episodes_began(slot_index, t)  # after the episodes that ended there were credited
        t += 1
        if t < self.rollout:
            self.split_t[s] = t
            return False
        self.split_t[s] = 0
        self.carry[s][...] = self.obs[slot_index, t]
        self.owners.tag(slot_index, t, split)  # who acts at obs[T] (the next slot's first step), for the learner
        self.state_carry.end_slot(s, slot_index)
        self.fill_log.filled(s, slot_index, self.policy_version[slot_index])
        self.recorder.slot_filled(s, self.obs[slot_index], self.actions[slot_index], self.rewards[slot_index],
                                  self.terminated[slot_index], self.truncated[slot_index])
        self.slots_filled += 1
        self._announce(slot_index, self.rollout * group.num_envs)
        self.split_slot[s] = None
        self.waiting.append(s)
        self._serve_waiting()
        return True

    def _announce(self, slot_index: int, frames: int) -> None:
        """Tell the consumers a slot is full (see :mod:`daskrl.sampling.slots.slot_owners` for who takes it); a slot
        nobody takes is free at once."""
        ready: TrajectoryReady = {"worker": self.name, "slot": slot_index, "frames": frames, "inc": self.incarnation}
        if self.owners.announce(slot_index, ready):
            self.trajectory_ready(ready)
        else:
            self.free.extend(self.owners.handed_back([slot_index], None))

    def _keep_final_observations(self, slot_index: int, t: int, truncations: list) -> None:
        """Write the real final observation of each episode a time limit cut at step ``t`` into the slot, for the
        learner's bootstrap. There is room for one per env and slot (time limits shorter than a slot are rare); an
        episode beyond that is counted and ends as if terminated."""
        width = self.final_at.shape[1]
        for env_index, obs in truncations:
            k = self.finals_in_slot[slot_index]
            if k == width:
                self.counters["time_limits_not_bootstrapped"] += 1
                continue
            self.final_obs[slot_index, k] = obs
            self.final_at[slot_index, k] = t * width + env_index
            self.finals_in_slot[slot_index] = k + 1

    def _serve_waiting(self) -> None:
        while self.waiting and self.free and not self.draining:
            s = self.waiting.popleft()
            slot_index = self.free.pop()
            self.obs[slot_index, 0] = self.carry[s]
            self._begin_slot(s, slot_index)
            self.acting.slot_started(s)

    def _note_env_failures(self, s: int, failures: list) -> None:
        for f in failures:
            self.counters["env_failures"] += 1
            self.recorder.env_failed(s, self.split_t[s], f.env_index)
            key = f"{f.phase}:{f.summary}"
            if key not in self._seen_failures:  # each distinct error is shown once, with its traceback summary
                self._seen_failures.add(key)
                message = (f"environment {self.env_spec!r} (env {f.env_index} of split {s} on {self.name!r}) raised "
                           f"in {f.phase} and was rebuilt; its partial episode was dropped: {f.summary}")
                self.env_failure_log.append(message)
                self.log_event(ENV_ERRORS_TOPIC, {"component": self.name, "message": message})

    # ---- slots ----

    @slot
    def on_actions(self, payload: ActionsReady) -> None:
        """Remote inference wrote actions for a split at its current step."""
        self.acting.on_actions(payload)

    @slot
    def on_free(self, payload: FreeSlots) -> None:
        """A consumer is done with these slots (slots of a predecessor incarnation are not ours)."""
        if payload["inc"] != self.incarnation:
            return
        if "version" in payload:  # --sync: these slots are to be filled by this policy version or a newer one
            self.acting.min_version = max(self.acting.min_version, payload["version"])
        self._free(self.owners.handed_back(payload["slots"], payload.get("policy")))

    def _free(self, slots: list[int]) -> None:
        """These slots are free again: splits waiting for one take them."""
        self.free.extend(slots)
        self._serve_waiting()

    def extra_stats(self) -> dict:
        return {"env_steps": self.env_steps, "slots_filled": self.slots_filled, "incarnation": self.incarnation,
                "free_slots": len(self.free), "waiting_splits": len(self.waiting), **self.acting.stats()}

    def take_news(self) -> dict:
        """Finished episodes (in their wire form: :func:`~daskrl.sampling.episode.wire_form`), episode numbers and
        the first reports of env errors since the last call."""
        episodes = []
        while self.episodes and len(episodes) < 5000:
            episodes.append(self.episodes.popleft())
        episodes = wire_form(episodes)
        extras = []
        while self.episode_extras and len(extras) < 5000:
            extras.append(self.episode_extras.popleft())
        env_errors = []
        while self.env_failure_log:
            env_errors.append(self.env_failure_log.popleft())
        return {"episodes": episodes, "episode_extras": extras, "env_errors": env_errors, **self.fill_log.news(),
                **self.recorder.news()}

    def on_stop(self) -> None:
        for group in self.groups:
            group.close()
