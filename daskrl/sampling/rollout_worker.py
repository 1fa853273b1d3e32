"""The rollout worker: steps its envs and writes every step straight into shared-memory trajectory slots.

Its ``num_envs`` envs are split into ``num_splits`` groups. Each split fills one slot at a time; a full slot is
announced with the ``trajectory_ready`` signal (only its index travels) and the split moves on to a free slot,
or waits for one (back-pressure: the learner frees slots when it has trained on them).

Actions come from one of two strategies over the same slots and the same code path:

- ``inline``: the worker runs its own policy copy (no per-step message: the fast path for cheap envs);
- ``remote``: the worker puts a request on the policy's work queue; an inference worker writes the actions
  into the slot and answers on ``actions:<worker>``. With 2 splits one group steps while the other waits.
"""

from __future__ import annotations

import os
import time
from collections import deque
from typing import Any

import numpy as np

from daskrl.envs.registry import register_env
from daskrl.envs.spaces import EnvSpaces
from daskrl.envs.vector import EnvGroup, EnvStepError
from daskrl.runtime.component import Component, signal, slot
from daskrl.sampling.policy import SamplingPolicy
from daskrl.sampling.trajectories import SlotLayout, create_slots


def actions_queue(worker: str) -> str:
    """The queue on which inference answers one rollout worker."""
    return f"actions:{worker}"


def free_queue(worker: str) -> str:
    """The queue on which consumers hand one rollout worker's slots back."""
    return f"free:{worker}"


class RolloutWorker(Component):
    """See module docstring. Configure with the sampler options (``on_configure``)."""

    @signal
    def trajectory_ready(self, payload: dict) -> None:
        """{"worker": name, "slot": index, "frames": env steps in the slot}"""

    def on_configure(self, *, env: str, spaces: dict, num_envs: int, num_splits: int, rollout: int,
                     slots_per_split: int, inference: str = "inline", worker_index: int = 0, seed: int = 0,
                     env_kwargs: dict | None = None, model: dict | None = None, params: dict | None = None,
                     policy_queue: str = "policy", env_factory=None, env_failure_limit: int = 5,
                     request_timeout_s: float = 5.0, numpy_inference: bool = True,
                     inference_precision: str = "auto", **_: Any) -> None:
        if env_factory is not None:
            register_env(env, env_factory)
        self.env_spec = env
        self.incarnation = os.urandom(4).hex()  # tells this worker's slots from a predecessor's after a restart
        self.request_timeout_s = request_timeout_s
        self.spaces = EnvSpaces.from_dict(spaces)
        self.inline = inference == "inline"
        self.policy_queue = policy_queue
        self.rollout = rollout
        per_split = num_envs // num_splits
        self.groups = [
            EnvGroup.from_spec(env, per_split, seed=seed, worker_index=worker_index, first_env_index=s * per_split,
                               env_kwargs=env_kwargs, spaces=self.spaces, max_consecutive_failures=env_failure_limit)
            for s in range(num_splits)
        ]
        self.layout = SlotLayout.for_worker(self.spaces, num_envs, num_splits, rollout, slots_per_split)
        self.shared = create_slots(self, self.layout)
        a = {name: arr.array for name, arr in self.shared.items()}
        self.obs, self.actions, self.rewards = a["obs"], a["actions"], a["rewards"]
        self.terminated, self.truncated = a["terminated"], a["truncated"]
        self.log_probs, self.values, self.policy_version = a["log_probs"], a["values"], a["policy_version"]
        self.free: deque[int] = deque(range(self.layout.num_slots))
        self.split_slot: list[int | None] = [None] * num_splits
        self.split_t = [0] * num_splits
        self.carry = [np.empty_like(self.obs[0, 0]) for _ in range(num_splits)]  # obs that starts the next slot
        self.waiting: deque[int] = deque()  # splits waiting for a free slot
        self.episodes: deque = deque(maxlen=10_000)
        self.policy = SamplingPolicy(self, self.spaces, model or {}, params, seed + 1000 * worker_index,
                                     numpy_inference, inference_precision) if self.inline else None
        self.env_steps = 0
        self.slots_filled = 0
        self.requested_at = [0.0] * num_splits  # remote strategy: when each split's pending request went out
        self.env_failure_log: deque = deque(maxlen=100)  # first report of each distinct env error
        self._seen_failures: set[str] = set()
        if not self.inline:
            self.add_timer(1.0, self._resend_lost_requests)

    async def buffers(self) -> dict:
        """Descriptions of the slot arrays (plus this incarnation's id) for inference workers and the learner."""
        out: dict[str, Any] = {name: arr.desc for name, arr in self.shared.items()}
        out["_incarnation"] = self.incarnation
        return out

    async def set_params(self, desc: dict) -> None:
        """Read parameters from a new publisher (a restarted learner); take whatever version it has."""

        def switch() -> None:
            from daskrl.runtime.params import ParameterReader

            if self.policy is not None:
                self.policy.reader = ParameterReader(self, desc)
                self.policy.version = -1

        await self.on_own_thread(switch)

    async def reclaim_slots(self) -> int:
        """Take back every slot not being filled (their consumer died before handing them back)."""

        def reclaim() -> int:
            in_use = {i for i in self.split_slot if i is not None}
            self.free = deque(i for i in range(self.layout.num_slots) if i not in in_use)
            self._serve_waiting()
            return len(self.free)

        return await self.on_own_thread(reclaim)

    # ---- the loop ----

    def on_start(self) -> None:
        for s, group in enumerate(self.groups):
            slot_index = self.free.popleft()
            with self.timing("env"):
                group.reset(self.obs[slot_index, 0])
            self.split_slot[s] = slot_index
        if not self.inline:
            for s in range(len(self.groups)):
                self._request(s)

    def run_once(self) -> bool:
        if not self.inline:
            return False  # remote strategy: driven by on_actions
        with self.timing("params"):
            self.policy.refresh()
        worked = False
        for s in range(len(self.groups)):
            slot_index = self.split_slot[s]
            if slot_index is None:
                continue
            t = self.split_t[s]
            with self.timing("inference"):
                actions, log_probs, values = self.policy.act(self.obs[slot_index, t])
            self.actions[slot_index, t] = actions
            self.log_probs[slot_index, t] = log_probs
            self.values[slot_index, t] = values
            self.policy_version[slot_index, t] = self.policy.version
            self._step(s)
            worked = True
        return worked

    def _step(self, s: int) -> bool:
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
        if group.failures:
            self._note_env_failures(s, group.pop_failures())
        self.env_steps += group.num_envs
        if group.finished_episodes:
            self.episodes.extend(group.pop_episode_stats())
        t += 1
        if t < self.rollout:
            self.split_t[s] = t
            return False
        self.split_t[s] = 0
        self.carry[s][...] = self.obs[slot_index, t]
        self.slots_filled += 1
        self.trajectory_ready({"worker": self.name, "slot": slot_index, "frames": self.rollout * group.num_envs,
                               "inc": self.incarnation})
        self.split_slot[s] = None
        self.waiting.append(s)
        self._serve_waiting()
        return True

    def _serve_waiting(self) -> None:
        while self.waiting and self.free:
            s = self.waiting.popleft()
            slot_index = self.free.popleft()
            self.obs[slot_index, 0] = self.carry[s]
            self.split_slot[s] = slot_index
            if not self.inline:
                self._request(s)

    def _request(self, s: int) -> None:
        self.requested_at[s] = time.monotonic()
        self.put(self.policy_queue, {"w": self.name, "s": s, "slot": self.split_slot[s], "t": self.split_t[s]})

    def _resend_lost_requests(self) -> None:
        """A request whose inference worker died is never answered: ask again (answers are checked against the
        split's current step, so a late duplicate is ignored)."""
        now = time.monotonic()
        for s, slot_index in enumerate(self.split_slot):
            if slot_index is not None and self.requested_at[s] and now - self.requested_at[s] > self.request_timeout_s:
                self.counters["requests_resent"] += 1
                self._request(s)

    def _note_env_failures(self, s: int, failures: list) -> None:
        for f in failures:
            self.counters["env_failures"] += 1
            key = f"{f.phase}:{f.summary}"
            if key not in self._seen_failures:  # each distinct error is shown once, with its traceback summary
                self._seen_failures.add(key)
                message = (f"environment {self.env_spec!r} (env {f.env_index} of split {s} on {self.name!r}) raised "
                           f"in {f.phase} and was rebuilt; its partial episode was dropped: {f.summary}")
                self.env_failure_log.append(message)
                self.log_event("daskrl-env-errors", {"component": self.name, "message": message})

    # ---- slots ----

    @slot
    def on_actions(self, payload: dict) -> None:
        """Remote inference wrote actions for split ``s`` at its current step: step it and ask again."""
        s = payload["s"]
        if payload.get("slot", self.split_slot[s]) != self.split_slot[s] or payload.get("t", self.split_t[s]) != \
                self.split_t[s]:
            self.counters["stale_answers"] += 1  # an answer to a request that was sent again
            return
        self.requested_at[s] = 0.0
        try:
            finished = self._step(s)
        except EnvStepError as exc:
            self.fail(f"split {s}", exc)
            return
        if not finished:
            self._request(s)  # a finished slot's next request comes from _serve_waiting

    @slot
    def on_free(self, payload: dict) -> None:
        """A consumer is done with these slots (slots of a predecessor incarnation are not ours)."""
        if payload.get("inc", self.incarnation) != self.incarnation:
            return
        self.free.extend(payload["slots"])
        self._serve_waiting()

    def extra_stats(self) -> dict:
        return {"env_steps": self.env_steps, "slots_filled": self.slots_filled, "incarnation": self.incarnation,
                "free_slots": len(self.free), "waiting_splits": len(self.waiting),
                "policy_version": self.policy.version if self.policy else None,
                "inference_precision": self.policy.precision if self.policy else None}

    def take_news(self) -> dict:
        episodes = []
        while self.episodes and len(episodes) < 5000:
            episodes.append(self.episodes.popleft())
        env_errors = []
        while self.env_failure_log:
            env_errors.append(self.env_failure_log.popleft())
        return {"episodes": episodes, "env_errors": env_errors}

    def on_stop(self) -> None:
        for group in self.groups:
            group.close()
