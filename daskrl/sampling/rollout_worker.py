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

from collections import deque
from typing import Any

import numpy as np

from daskrl.envs.registry import register_env
from daskrl.envs.spaces import EnvSpaces
from daskrl.envs.vector import EnvGroup
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
                     policy_queue: str = "policy", env_factory=None, **_: Any) -> None:
        if env_factory is not None:
            register_env(env, env_factory)
        self.spaces = EnvSpaces.from_dict(spaces)
        self.inline = inference == "inline"
        self.policy_queue = policy_queue
        self.rollout = rollout
        per_split = num_envs // num_splits
        self.groups = [
            EnvGroup.from_spec(env, per_split, seed=seed, worker_index=worker_index, first_env_index=s * per_split,
                               env_kwargs=env_kwargs, spaces=self.spaces)
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
        self.policy = SamplingPolicy(self, self.spaces, model or {}, params, seed + 1000 * worker_index) \
            if self.inline else None
        self.env_steps = 0
        self.slots_filled = 0

    async def buffers(self) -> dict:
        """Descriptions of the slot arrays, for inference workers and the learner to attach."""
        return {name: arr.desc for name, arr in self.shared.items()}

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
        with self.timing("env"):
            group.step(self.actions[slot_index, t], self.obs[slot_index, t + 1], self.rewards[slot_index, t],
                       self.terminated[slot_index, t], self.truncated[slot_index, t])
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
        self.trajectory_ready({"worker": self.name, "slot": slot_index, "frames": self.rollout * group.num_envs})
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
        self.put(self.policy_queue, {"w": self.name, "s": s, "slot": self.split_slot[s], "t": self.split_t[s]})

    # ---- slots ----

    @slot
    def on_actions(self, payload: dict) -> None:
        """Remote inference wrote actions for split ``s`` at its current step: step it and ask again."""
        s = payload["s"]
        if not self._step(s):
            self._request(s)  # a finished slot's next request comes from _serve_waiting

    @slot
    def on_free(self, payload: dict) -> None:
        """A consumer is done with these slots."""
        self.free.extend(payload["slots"])
        self._serve_waiting()

    def extra_stats(self) -> dict:
        episodes = []
        while self.episodes and len(episodes) < 5000:
            episodes.append(self.episodes.popleft())
        return {"env_steps": self.env_steps, "slots_filled": self.slots_filled, "episodes": episodes,
                "free_slots": len(self.free), "waiting_splits": len(self.waiting),
                "policy_version": self.policy.version if self.policy else None}

    def on_stop(self) -> None:
        for group in self.groups:
            group.close()
