"""Who is who in a run's fleet: each component's role and policy by name, and the names new components get.

The bus registry knows components by name only, so a component recreated under its old name takes its place in the
run; this register is where the driver looks up what a name is (a rollout worker, policy 1's inference worker, ...)
and where every component the fleet creates is filed as it is created, so one that fails half-way is still known
and stopped with the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from daskrl.config import Config
from daskrl.driver.fleet.placement import Role
from daskrl.runtime.actors.handles import ComponentHandle, spawn, spawn_all

#: what :meth:`Roster.spawn_all` creates: (class, name, worker, setup)
Spec = tuple[type, str, "str | None", Any]


class Roster:
    """See the module docstring. Creating a component goes through here: it is filed under its role as it exists."""

    def __init__(self, client: Any, run_id: str, config: Config) -> None:
        self.client, self.run_id = client, run_id
        self.num_policies = config.policies.num_policies
        self.roles: dict[str, Role] = {}  # component name -> its role
        self.policy_index: dict[str, int] = {}  # learner or inference worker name -> the policy it serves
        self._rollout_indices = config.sampler.num_workers  # rollout_0.. at the start; an elastic run adds more

    def role_of(self, name: str) -> Role | None:
        return self.roles.get(name)

    def policy_of(self, name: str) -> int:
        """The policy a learner or inference worker serves (0 for anything else)."""
        return self.policy_index.get(name, 0)

    def file(self, handle: ComponentHandle, role: Role, policy: int = 0) -> None:
        self.roles[handle.name] = role
        self.policy_index[handle.name] = policy

    def spawn(self, cls: type, name: str, worker: str | None, setup: Any, role: Role,
              policy: int = 0) -> ComponentHandle:
        """Create one component on ``worker`` and file it."""
        handle = spawn(self.client, cls, name, run_id=self.run_id, worker=worker, setup=setup)
        self.file(handle, role, policy)
        return handle

    def spawn_all(self, specs: list[Spec], filing: Sequence[tuple[Role, int]],
                  created: list[ComponentHandle] | None = None) -> list[ComponentHandle]:
        """Create components at once (see :func:`~daskrl.runtime.actors.handles.spawn_all`), each filed under its
        entry of ``filing`` (role, policy) even when a later one failed, so it is stopped with the rest; ``created``
        (when given) gets each handle as it exists. Returns the new handles."""
        made: list[ComponentHandle] = [] if created is None else created
        start = len(made)
        try:
            spawn_all(self.client, specs, run_id=self.run_id, created=made)
        finally:
            for handle, (role, policy) in zip(made[start:], filing, strict=False):
                self.file(handle, role, policy)
        return made[start:]

    # ---- names ----

    def next_rollout_index(self) -> int:
        """Indices are never reused within a run: each names its env seeds and its slots' owner."""
        index = self._rollout_indices
        self._rollout_indices += 1
        return index

    def inference_name(self, policy: int, index: int) -> str:
        """inference_0, inference_1, ...; with several policies inference_p<k>_0, ..."""
        return f"inference_{index}" if self.num_policies == 1 else f"inference_p{policy}_{index}"

    def next_inference_name(self, policy: int, inference: list[ComponentHandle]) -> str:
        """The first index past ``policy``'s inference workers' (of ``inference``)."""
        own = [int(h.name.rsplit("_", 1)[1]) for h in inference if self.policy_of(h.name) == policy]
        return self.inference_name(policy, max(own, default=-1) + 1)

    def learner_name(self, rank: int, policy: int) -> str:
        """The leader keeps the name a single learner has ("learner"); members are learner_1, learner_2, ...; with
        several policies each policy's learner is learner_p0, learner_p1, ..."""
        if self.num_policies > 1:
            return f"learner_p{policy}"
        return "learner" if rank == 0 else f"learner_{rank}"
