"""Where a rollout worker's actions come from: its own policy copy (inline) or inference workers (remote).

Both strategies fill the same trajectory slots through the same rollout-worker code; the worker only tells its
strategy when to begin, turns its hot loop through it, and says when a split has moved on to a new slot:

- :class:`InlineActing`: the worker runs the policy itself, in its hot loop, one batched forward pass per split
  and step, with no message at all (the fast path for cheap envs on CPUs);
- :class:`RemoteActing`: for each split and step the worker puts an :class:`~daskrl.protocol.InferenceRequest` on
  the policy's work queue; an inference worker writes actions, log-probs and values into the slot and answers
  with :class:`~daskrl.protocol.ActionsReady`, which steps that split. With two splits one steps while the other
  waits. A request whose inference worker died is sent again after :data:`REQUEST_TIMEOUT_S`.

Neither asks at a step how many policies there are: a split's
:class:`~daskrl.sampling.policies.split_policies.SplitPolicies` gives each acting policy with its columns (one policy: one
group of every column, acted on the step's rows as they are), a policy's
:class:`~daskrl.sampling.slots.row_cut.Rows` its part of them, and the worker's
:class:`~daskrl.sampling.slots.state_carry.StateCarry` the recurrent states, if any.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.errors import EnvStepError
from daskrl.protocol import ActionsReady, InferenceRequest, policy_queue
from daskrl.runtime.actors.timing import Timing
from daskrl.sampling.policies.split_policies import EVERY_COLUMN, Columns, SplitPolicies
from daskrl.sampling.slots.row_cut import rows_for
from daskrl.sampling.slots.slot_owners import SlotOwners
from daskrl.sampling.slots.state_carry import StateCarry
from daskrl.setups import PolicySetup

#: seconds after which an unanswered inference request is sent again (its inference worker may have died)
REQUEST_TIMEOUT_S = 5.0


class RolloutWorker(Protocol):
    """What a strategy uses of its :class:`~daskrl.sampling.rollout_worker.RolloutWorker`: the splits, where each
    one stands (slot and step), the slot arrays it writes, and the worker's own services."""

    name: str
    groups: list  # one EnvGroup per split
    split_slot: list[int | None]  # the slot each split fills (None: waiting for a free one)
    split_t: list[int]  # the step of that slot it is at
    obs: np.ndarray
    actions: np.ndarray
    log_probs: np.ndarray
    values: np.ndarray
    policy_version: np.ndarray  # one version per step, or per column and step in tagged slots
    split_policies: list[SplitPolicies]  # who plays each split's columns
    owners: SlotOwners  # who takes a full slot: it records who acted, where slots are tagged
    state_carry: StateCarry  # a recurrent policy's states, in the slots (nothing for a feed-forward one)
    timing: Timing
    counters: dict[str, float]

    def step_split(self, s: int) -> bool:
        """Step split ``s`` with the actions written at its current step; True when that filled its slot."""

    def put(self, queue_name: str, payload: Any) -> int:
        """Hand ``payload`` to one consumer of a work queue."""

    def add_timer(self, period_s: float, fn: Callable[[], Any]) -> None:
        """Call ``fn`` every ``period_s`` seconds on the worker's thread."""

    def fail(self, where: str, exc: BaseException) -> None:
        """Stop the worker for good, recording why."""


class InlineActing:
    """The rollout worker runs its own copy of the policy, or of each policy (see the module docstring)."""

    def __init__(self, worker: RolloutWorker, setup: PolicySetup, policy_params: Sequence[dict | None] = (),
                 policy_spaces: Sequence[EnvSpaces] = (), slot_spaces: EnvSpaces | None = None) -> None:
        """``policy_params``: with several policies, each one's parameter block (policy 0's is ``setup.params``);
        ``policy_spaces``: each one's spaces, which differ from the slots' (``slot_spaces``) where agents' do."""
        self.worker = worker
        spaces = list(policy_spaces) or [setup.spaces] * max(len(policy_params), 1)
        slot = slot_spaces or setup.spaces
        setups = [setup] + [dataclasses.replace(setup, params=params, spaces=spaces[k], cut=slot.cut_for(spaces[k]))
                            for k, params in enumerate(policy_params) if k > 0]
        from daskrl.sampling.policies.policy import (
            SamplingPolicy,  # torch: imported where the policy acts, not by the driver
        )

        self.policies = [SamplingPolicy(worker, policy_setup) for policy_setup in setups]
        self.policy = self.policies[0]
        self.rows = [rows_for(policy_setup.cut) for policy_setup in setups]  # each one's part of a slot row
        #: each policy's action generator for each split, from its seed and the split's index: a split's draws do
        #: not depend on which splits acted before it (a replay steps them in another order)
        self.generators = [[policy.generator(policy_setup.seed, s) for s in range(len(worker.groups))]
                           for policy, policy_setup in zip(self.policies, setups, strict=True)]
        self.min_version = 0  # --sync: act only once the policy has this version

    def begin(self) -> None:
        """Nothing to ask for: the hot loop acts."""

    def run_once(self) -> bool:
        w = self.worker
        with w.timing("params"):
            for policy in self.policies:
                policy.refresh()
        if self.policy.version < self.min_version:  # --sync: the learner published it; it shows up at once
            return False
        worked = False
        for s in range(len(w.groups)):
            if w.split_slot[s] is None:  # waiting for a free slot
                continue
            self.act_split(s)
            w.step_split(s)
            worked = True
        return worked

    def act_split(self, s: int) -> None:
        """Write the actions of split ``s`` at its current step (the worker steps the split with them next)."""
        w = self.worker
        slot_index, t = w.split_slot[s], w.split_t[s]
        split = w.split_policies[s]
        w.owners.tag(slot_index, t, split)
        with w.timing("inference"):
            for k, columns in split.groups():
                self._act(k, columns, s, slot_index, t)

    def _act(self, k: int, columns: Columns, s: int, slot_index: int, t: int) -> None:
        """Policy ``k`` acts for its columns of split ``s``'s step (one policy: for all of them, on the step's rows as
        they are); a column nobody plays this step keeps a zero action (ignored)."""
        w, policy, rows = self.worker, self.policies[k], self.rows[k]
        policy.draw_from(self.generators[k][s])
        state = w.state_carry.states(slot_index, columns)
        actions, log_probs, _ = policy.act(rows.obs(w.obs[slot_index, t], columns), state)
        w.state_carry.put_back(slot_index, columns, state)  # the next states, where they were gathered from
        at = (slot_index, t, columns)
        rows.write_actions(w.actions, at, actions)
        w.log_probs[at] = log_probs
        w.policy_version[at] = policy.version

    def slot_started(self, s: int) -> None:
        """The next turn of the hot loop acts for it."""

    def on_actions(self, payload: ActionsReady) -> None:
        self.worker.counters["unexpected_answers"] += 1  # nobody is asked for actions: an answer is a wiring bug

    def follow(self, params: dict, policy: int = 0) -> None:
        self.policies[policy].follow(self.worker, params)

    def weights(self, policy: int = 0) -> dict[str, Any] | None:
        return self.policies[policy].weights()

    def version_of(self, policy: int) -> int:
        """The version acting policy ``policy`` (a trained one, or a self-play snapshot) acts with now."""
        return self.policies[policy].version

    def stats(self) -> dict[str, Any]:
        return {"policy_version": self.policy.version, "inference_precision": self.policy.precision,
                "policy_versions": [p.version for p in self.policies]}


#: the request parts of a split's step that one policy acts for whole: policy 0, every column
EVERYONE: list[tuple[int, list[int] | None]] = [(0, None)]


def _column_list(columns: Columns, num_columns: int) -> list[int] | None:
    """Columns as a request names them: a list, or None for all of a split's ``num_columns``."""
    if columns is EVERY_COLUMN or (isinstance(columns, slice) and columns.start == 0
                                   and columns.stop == num_columns):
        return None
    if isinstance(columns, slice):
        return list(range(columns.start, columns.stop))
    return [int(c) for c in columns]


class RemoteActing:
    """Inference workers act for the rollout worker (see the module docstring). With several policies each policy's
    inference workers take the requests on its own queue, each for its policy's columns of a split's step, and the
    split steps once every policy acting there has answered."""

    def __init__(self, worker: RolloutWorker, queue: str, num_policies: int = 1) -> None:
        """``queue``: policy 0's work queue."""
        self.worker, self.queue = worker, queue
        self.queues = [queue] + [policy_queue(k) for k in range(1, num_policies)]
        # one policy's inference workers act for every column (an agent that sits the step out gets an ignored
        # action); several policies' each for their own columns
        self.parts = self._by_policy if num_policies > 1 else self._everyone
        self.min_version = 0  # --sync: inference must act with this policy version or a newer one
        self.requested_at = [0.0] * len(worker.groups)  # when each split's pending request went out
        self.waiting: list[set[int]] = [set() for _ in worker.groups]  # the policies each split still waits for
        worker.add_timer(1.0, self.resend_lost_requests)

    def begin(self) -> None:
        for s in range(len(self.worker.groups)):
            self.request(s)

    def run_once(self) -> bool:
        return False  # driven by the answers (on_actions)

    def slot_started(self, s: int) -> None:
        self.request(s)

    def request(self, s: int) -> None:
        w = self.worker
        slot_index, t = w.split_slot[s], w.split_t[s]
        self.requested_at[s] = time.monotonic()
        split = w.split_policies[s]
        w.owners.tag(slot_index, t, split)  # who acts, for the learners' masks
        parts = self.parts(split, w.groups[s].num_envs)
        self.waiting[s] = {k for k, _ in parts}
        for k, columns in parts:
            request: InferenceRequest = {"w": w.name, "s": s, "slot": slot_index, "t": t}
            if self.min_version:
                request["v"] = self.min_version
            if columns is not None:
                request["c"] = columns
            w.put(self.queues[k], request)

    @staticmethod
    def _everyone(split: SplitPolicies, num_columns: int) -> list[tuple[int, list[int] | None]]:
        """One request, to policy 0's queue, for every column of the split."""
        return EVERYONE

    @staticmethod
    def _by_policy(split: SplitPolicies, num_columns: int) -> list[tuple[int, list[int] | None]]:
        """A request to each policy acting at the split's step, for its columns (None: every column); nobody acts:
        policy 0 fills the ignored actions."""
        return [(k, _column_list(columns, num_columns)) for k, columns in split.groups()] or EVERYONE

    def on_actions(self, payload: ActionsReady) -> None:
        """Inference wrote actions for split ``s`` at its current step: step it and ask again."""
        w, s = self.worker, payload["s"]
        if payload["slot"] != w.split_slot[s] or payload["t"] != w.split_t[s]:
            w.counters["stale_answers"] += 1  # an answer to a request that was sent again
            return
        self.waiting[s].discard(payload.get("p", 0))
        if self.waiting[s]:
            return  # another policy's columns of this step are still to come
        self.requested_at[s] = 0.0
        try:
            finished = w.step_split(s)
        except EnvStepError as exc:
            w.fail(f"split {s}", exc)
            return
        if not finished:
            self.request(s)  # a finished slot's next request comes with slot_started

    def resend_lost_requests(self) -> None:
        """A request whose inference worker died is never answered: ask again (answers are checked against the
        split's current step, so a late duplicate is ignored)."""
        now, w = time.monotonic(), self.worker
        for s, slot_index in enumerate(w.split_slot):
            if slot_index is not None and self.requested_at[s] and now - self.requested_at[s] > REQUEST_TIMEOUT_S:
                w.counters["requests_resent"] += 1
                self.request(s)

    def follow(self, params: dict, policy: int = 0) -> None:
        """No policy here: the inference workers follow the new parameters."""

    def weights(self, policy: int = 0) -> dict[str, Any] | None:
        return None

    def version_of(self, policy: int) -> int:
        return -1  # the inference workers know (remote inference acts with no self-play snapshots)

    def stats(self) -> dict[str, Any]:
        return {"policy_version": None, "inference_precision": None}
