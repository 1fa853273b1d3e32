"""The rollout worker: steps its envs and writes every step straight into shared-memory trajectory slots.

Its ``num_envs`` envs are split into ``num_splits`` groups. Each split fills one slot at a time; a full slot is
announced with the ``trajectory_ready`` signal (only its index travels: :class:`~daskrl.protocol.TrajectoryReady`)
and the split moves on to a free slot, or waits for one (back-pressure: the learner frees slots when it has
trained on them). Where the actions come from, its own policy copy or inference workers, is the job of its
acting strategy (:mod:`daskrl.sampling.acting`); the slots and the env stepping are the same either way.

With a recurrent policy the envs' states live in the slot being filled (``rnn_live``): whoever acts reads and
writes them there, and this worker, which steps the envs, zeroes the state of an env whose episode ended, copies
the states into the next slot it fills and records them there as that slot's start (``rnn_states``).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from typing import Any

import numpy as np

from daskrl.envs.envpool_atari import EnvpoolGroup
from daskrl.envs.multi_agent import MultiAgentGroup
from daskrl.envs.packages import import_env_packages
from daskrl.envs.registry import register_env
from daskrl.envs.vector import EnvGroup
from daskrl.errors import EnvStepError
from daskrl.protocol import ENV_ERRORS_TOPIC, ActionsReady, FreeSlots, TrajectoryReady
from daskrl.runtime.component import Component
from daskrl.runtime.signals import signal, slot
from daskrl.sampling.acting import InlineActing, RemoteActing
from daskrl.sampling.policy_map import PolicyMap
from daskrl.sampling.trajectories import SlotLayout, create_slots
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
        per_split = setup.num_envs // setup.num_splits
        group_class = EnvpoolGroup if setup.env.env_backend == "envpool" else \
            MultiAgentGroup if setup.spaces.num_agents > 1 else EnvGroup
        self.agents_per_env = setup.spaces.num_agents  # a multi-agent env's group has a column per agent
        self.groups = [
            group_class.from_spec(setup.env.env, per_split, seed=setup.seed, worker_index=setup.worker_index,
                                  first_env_index=s * per_split, env_kwargs=setup.env.env_kwargs,
                                  spaces=setup.spaces, max_consecutive_failures=setup.env_failure_limit,
                                  info_keys=setup.info_keys)
            for s in range(setup.num_splits)
        ]
        columns = sum(g.num_envs for g in self.groups)  # with a multi-agent env, one per agent of each env
        self.layout = SlotLayout.for_worker(setup.spaces, columns, setup.num_splits, setup.rollout,
                                            setup.slots_per_split, setup.rnn_state_size, setup.tagged)
        self.shared = create_slots(self, self.layout)
        a = {name: arr.array for name, arr in self.shared.items()}
        self.obs, self.actions, self.rewards = a["obs"], a["actions"], a["rewards"]
        self.terminated, self.truncated = a["terminated"], a["truncated"]
        self.log_probs, self.values, self.policy_version = a["log_probs"], a["values"], a["policy_version"]
        self.final_obs, self.final_at = a["final_obs"], a["final_at"]
        self.rnn_states, self.rnn_live = a.get("rnn_states"), a.get("rnn_live")  # None: a feed-forward policy
        self.policy_id = a.get("policy_id")  # None: one policy acts for every column at every step
        self.num_policies = setup.num_policies
        agents = [list(getattr(g, "agent_ids", None) or ["agent_0"] * g.num_envs) for g in self.groups]
        self.maps = [PolicyMap(setup.policy_mapping, setup.num_policies, agents[s],
                               [setup.worker_index * setup.num_envs + s * per_split + i for i in range(per_split)],
                               setup.run_envs, setup.snapshots) for s in range(setup.num_splits)] if setup.tagged else []
        self.owed: dict[int, set[int]] = {}  # a tagged slot -> the policies whose learners still have to free it
        per_env_state = (self.layout.envs_per_split, setup.rnn_state_size)
        self.rnn_carry = [np.zeros(per_env_state, np.float32) for _ in range(setup.num_splits)] \
            if self.rnn_live is not None else []  # the states that start each split's next slot
        self.finals_in_slot = [0] * self.layout.num_slots  # final observations written into each slot
        self.free: deque[int] = deque(range(self.layout.num_slots))
        self.split_slot: list[int | None] = [None] * setup.num_splits
        self.split_t = [0] * setup.num_splits
        self.carry = [np.empty_like(self.obs[0, 0]) for _ in range(setup.num_splits)]  # obs that starts the next slot
        self.waiting: deque[int] = deque()  # splits waiting for a free slot
        self.episodes: deque = deque(maxlen=10_000)
        self.episode_extras: deque = deque(maxlen=10_000)  # info numbers of finished episodes (see EnvGroup)
        self.env_steps = 0
        self.slots_filled = 0
        self.draining = False  # leaving: no new slot is started (see drain)
        self.env_failure_log: deque = deque(maxlen=100)  # first report of each distinct env error
        self._seen_failures: set[str] = set()
        self.acting = InlineActing(self, setup.policy, setup.policy_params, setup.policy_spaces,
                                   setup.spaces) if setup.policy is not None \
            else RemoteActing(self, setup.policy_queue, setup.num_policies)

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
            if policy is not None and self.policy_id is not None:
                self._freed([slot for slot, owed in self.owed.items() if policy in owed], policy)
                return len(self.free)
            in_use = {i for i in self.split_slot if i is not None}
            self.free = deque(i for i in range(self.layout.num_slots) if i not in in_use)
            self.owed.clear()
            self._serve_waiting()
            return len(self.free)

        return await self.on_own_thread(reclaim)

    # ---- the loop ----

    def on_start(self) -> None:
        for s, group in enumerate(self.groups):
            slot_index = self.free.popleft()
            with self.timing("env"):
                group.reset(self.obs[slot_index, 0])
            group.pop_new_episodes()  # the first episodes: their policies were chosen with the map
            self._begin_slot(s, slot_index)
        self.acting.begin()

    def _begin_slot(self, s: int, slot_index: int) -> None:
        self.split_slot[s] = slot_index
        if self.rnn_live is not None:
            self.rnn_live[slot_index] = self.rnn_carry[s]
            self.rnn_states[slot_index] = self.rnn_carry[s]
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
        if self.rnn_live is not None:  # an episode that ended starts the next one from zeros
            ended = (self.terminated[slot_index, t] | self.truncated[slot_index, t]).astype(bool)
            if ended.any():
                self.rnn_live[slot_index, ended] = 0.0
        if group.failures:
            self._note_env_failures(s, group.pop_failures())
        if group.truncations:
            self._keep_final_observations(slot_index, t, group.pop_truncations())
        self.env_steps += group.num_envs // self.agents_per_env  # env steps, not agent steps
        if group.finished_episodes:
            self.episodes.extend(self._credited(s, group.pop_episode_stats()))
            if group.episode_extras:
                self.episode_extras.extend(group.pop_episode_extras())
        if self.maps:  # the envs that began an episode get its policies (after its ended one was credited)
            began = group.pop_new_episodes(self.terminated[slot_index, t] | self.truncated[slot_index, t])
            if len(began):
                self.maps[s].episodes_began(began)
        t += 1
        if t < self.rollout:
            self.split_t[s] = t
            return False
        self.split_t[s] = 0
        self.carry[s][...] = self.obs[slot_index, t]
        if self.policy_id is not None:  # who acts at obs[T] (the next slot's first step), for the learner
            self.policy_id[slot_index, t] = self.acting_policies(s)
        if self.rnn_live is not None:
            self.rnn_carry[s][...] = self.rnn_live[slot_index]
        self.slots_filled += 1
        self._announce(slot_index, self.rollout * group.num_envs)
        self.split_slot[s] = None
        self.waiting.append(s)
        self._serve_waiting()
        return True

    def _credited(self, s: int, finished: list[tuple[float, int, int]]) -> list[tuple]:
        """Each finished episode as (return, length, policy), and in a multi-agent env also the policy of the first
        other agent of its env and that policy's version (self-play: which snapshot it lost or won against)."""
        if not self.maps:
            return [(ret, length, 0) for ret, length, _ in finished]
        policies, agents = self.maps[s].column_policy, self.agents_per_env
        if agents == 1:
            return [(ret, length, int(policies[column])) for ret, length, column in finished]
        out, agent_ids = [], self.maps[s].agent_ids
        for ret, length, column in finished:
            first = column - column % agents
            other = int(policies[first + 1 if column == first else first])
            out.append((ret, length, int(policies[column]), other, self.acting.version_of(other)))
            self.episode_extras.append({f"return/{agent_ids[column]}": ret})  # each agent's own mean return
        return out

    def acting_policies(self, s: int) -> np.ndarray:
        """The policy id of each column of split ``s`` at its current step (-1: that agent does not act)."""
        return self.maps[s].acting(getattr(self.groups[s], "active", None))

    def acting_groups(self, s: int) -> list[tuple[int, np.ndarray | slice]]:
        """Each policy acting in split ``s`` at its current step, with its columns (see PolicyMap.groups)."""
        return self.maps[s].groups(getattr(self.groups[s], "active", None))

    def _announce(self, slot_index: int, frames: int) -> None:
        """Tell the consumers a slot is full. A tagged slot goes to the learners of the policies that acted in it,
        and is free again once each of them handed it back (a slot nobody trains on is free at once)."""
        ready: TrajectoryReady = {"worker": self.name, "slot": slot_index, "frames": frames, "inc": self.incarnation}
        if self.policy_id is not None:
            present = np.unique(self.policy_id[slot_index, :self.rollout])  # step T is the next slot's
            policies = [int(p) for p in present if 0 <= p < self.num_policies]
            if not policies:
                self.free.append(slot_index)
                return
            self.owed[slot_index] = set(policies)
            ready["policies"] = policies
        self.trajectory_ready(ready)

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
            slot_index = self.free.popleft()
            self.obs[slot_index, 0] = self.carry[s]
            self._begin_slot(s, slot_index)
            self.acting.slot_started(s)

    def _note_env_failures(self, s: int, failures: list) -> None:
        for f in failures:
            self.counters["env_failures"] += 1
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
        if self.policy_id is not None:
            self._freed(payload["slots"], payload.get("policy"))
            return
        self.free.extend(payload["slots"])
        self._serve_waiting()

    def _freed(self, slots: list[int], policy: int | None) -> None:
        """``policy``'s learner is done with these tagged slots: free those no other learner still reads (None:
        the only consumer, a sampling-only sink, is done with them)."""
        for slot_index in slots:
            owed = self.owed.get(slot_index)
            if owed is None or (policy is not None and policy not in owed):
                continue  # not announced to that policy (or already handed back)
            if policy is None:
                owed.clear()
            owed.discard(policy)
            if not owed:
                del self.owed[slot_index]
                self.free.append(slot_index)
        self._serve_waiting()

    def extra_stats(self) -> dict:
        return {"env_steps": self.env_steps, "slots_filled": self.slots_filled, "incarnation": self.incarnation,
                "free_slots": len(self.free), "waiting_splits": len(self.waiting), **self.acting.stats()}

    def take_news(self) -> dict:
        episodes = []
        while self.episodes and len(episodes) < 5000:
            episodes.append(self.episodes.popleft())
        extras = []
        while self.episode_extras and len(extras) < 5000:
            extras.append(self.episode_extras.popleft())
        env_errors = []
        while self.env_failure_log:
            env_errors.append(self.env_failure_log.popleft())
        return {"episodes": episodes, "episode_extras": extras, "env_errors": env_errors}

    def on_stop(self) -> None:
        for group in self.groups:
            group.close()
