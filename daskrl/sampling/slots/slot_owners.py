"""Who must hand a rollout worker's full slot back before the worker may fill it again.

- :class:`OneConsumer`: untagged slots (one policy, single-agent envs) go to one consumer, the learner or the
  sampling-only sink, and a slot is free again once it handed that slot back.
- :class:`PolicyConsumers`: tagged slots (several policies, or a multi-agent env) record who acted per column and
  step (``policy_id``, and ``policy_version`` per column): a slot goes to the learner of each trained policy that
  acted in it, and is free again once every one of them handed it back. A slot no trained policy acted in (only
  self-play snapshots, or nobody) is free at once. A consumer that names no policy (the sampling-only sink) hands
  a slot back for all of them.

The worker chooses one when it is configured; announcing a slot, a hand-back (``on_free``) and taking back what a
lost consumer held (``reclaim_slots``) then take one path.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import numpy as np

from daskrl.protocol import TrajectoryReady
from daskrl.sampling.policies.split_policies import SplitPolicies


class SlotOwners(Protocol):
    """See the module docstring."""

    def tag(self, slot_index: int, t: int, split: SplitPolicies) -> None:
        """Record who acts at step ``t`` of the slot (in tagged slots)."""

    def announce(self, slot_index: int, ready: TrajectoryReady) -> bool:
        """The slot is full: note who owes it, completing ``ready``; False: nobody takes it (hand it back at
        once)."""

    def handed_back(self, slots: Iterable[int], policy: int | None) -> list[int]:
        """``policy``'s consumer (None: the only one) is done with these slots: those now free, in order."""

    def reclaim(self, policy: int | None) -> list[int]:
        """``policy``'s consumer (None: every consumer) is lost: the slots it held, now free."""


class OneConsumer:
    """Untagged slots and their one consumer (see the module docstring)."""

    def __init__(self) -> None:
        self.announced: dict[int, None] = {}  # slots out with the consumer, in the order they went (a set)

    def tag(self, slot_index: int, t: int, split: SplitPolicies) -> None:
        pass  # the slots do not say who acted: one policy did

    def announce(self, slot_index: int, ready: TrajectoryReady) -> bool:
        self.announced[slot_index] = None
        return True

    def handed_back(self, slots: Iterable[int], policy: int | None) -> list[int]:
        """A slot not out with the consumer (handed back already) is left as it is."""
        free = []
        for slot_index in slots:
            if slot_index in self.announced:
                del self.announced[slot_index]
                free.append(slot_index)
        return free

    def reclaim(self, policy: int | None) -> list[int]:
        return self.handed_back(list(self.announced), policy)


class PolicyConsumers:
    """Tagged slots, each owed by the learners of the trained policies that acted in it (see the module docstring)."""

    def __init__(self, policy_id: np.ndarray, rollout: int, num_policies: int) -> None:
        """``policy_id``: the slots' field; ``rollout``: a slot's steps (its step T is the next slot's first)."""
        self.policy_id, self.rollout = policy_id, rollout
        self.num_policies = num_policies
        self.owed: dict[int, set[int]] = {}  # a slot -> the policies whose learners still have to hand it back

    def tag(self, slot_index: int, t: int, split: SplitPolicies) -> None:
        self.policy_id[slot_index, t] = split.acting()

    def announce(self, slot_index: int, ready: TrajectoryReady) -> bool:
        present = np.unique(self.policy_id[slot_index, :self.rollout])  # step T is the next slot's
        trained = [int(p) for p in present[(present >= 0) & (present < self.num_policies)]]
        self.owed[slot_index] = set(trained)
        ready["policies"] = trained
        return bool(trained)

    def handed_back(self, slots: Iterable[int], policy: int | None) -> list[int]:
        """A slot not announced to ``policy`` (or handed back already) is left as it is."""
        done = set(range(self.num_policies)) if policy is None else {policy}
        free = []
        for slot_index in slots:
            owed = self.owed.get(slot_index, set())  # a new empty set: not owed by anyone
            owed -= done  # in place: the set kept for the slot
            if not owed and self.owed.pop(slot_index, None) is not None:  # handed back in full just now
                free.append(slot_index)
        return free

    def reclaim(self, policy: int | None) -> list[int]:
        return self.handed_back(list(self.owed), policy)
