"""The run's samplers: its rollout workers with the slot arrays each one fills, and each policy's inference workers.

The fleet wires them to the learners, replay shards and relays; this team only creates them under their names and
keeps them, in order, with their slot arrays (which every reader of a rollout worker's slots attaches).
"""

from __future__ import annotations

from collections.abc import Sequence

from daskrl.config import Config
from daskrl.driver.fleet.algorithms import algorithm_of
from daskrl.driver.fleet.placement import Placement, Role
from daskrl.driver.fleet.role_setups import rollout_setup
from daskrl.driver.fleet.roster import Roster
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.runtime.actors.handles import ComponentHandle
from daskrl.sampling.inference_worker import InferenceWorker
from daskrl.sampling.policies.policy_map import peer_slots
from daskrl.sampling.rollout_worker import RolloutWorker
from daskrl.setups import RoleSetups, SamplerCourse


class Samplers:
    """See the module docstring."""

    def __init__(self, roster: Roster, config: Config, spaces: EnvSpaces) -> None:
        self.roster, self.config, self.spaces = roster, config, spaces
        self.rollout: list[ComponentHandle] = []
        self.inference: list[ComponentHandle] = []
        self.buffers: dict[str, dict] = {}  # rollout worker name -> its slot arrays
        #: the run's env steps as of its last poll (a resumed run's at the start): a rollout worker created now
        #: explores from there (DQN's epsilon, TD3's warm-up), not from the run's beginning
        self.run_env_steps = 0
        #: a sampling-only run's fixed weights (--init-checkpoint's {"version", "weights"}; None: initial weights)
        self.weights: dict | None = None
        #: --online-after: the samplers are created and wired but not started until the learner has trained that
        #: many updates from the dataset alone (:meth:`release`)
        self.held = config.algo.online_after > 0
        #: where the driver has steered the rollout workers (a curriculum's task, a league's opponents): a rollout
        #: worker created now starts there
        self.course = SamplerCourse()
        #: a league of runs: the other member runs' parameter blocks in their acting slots after this run's own
        #: (daskrl/league/peers.py; None: an empty slot), which a rollout worker created now attaches
        self.peer_blocks: list[dict | None] = [None] * peer_slots(config.policies)

    def start(self, handles: Sequence[ComponentHandle]) -> None:
        """Start these samplers, unless sampling is held back (they then start with :meth:`release`)."""
        if not self.held:
            for handle in handles:
                handle.call("start")

    def release(self) -> None:
        """Start every sampler held back so far (--online-after's switch): the inference workers first, as at a
        run's start, so that a rollout worker's first request finds one."""
        self.held = False
        self.start([*self.inference, *self.rollout])

    def all(self) -> list[ComponentHandle]:
        return self.rollout + self.inference

    def create(self, placement: Placement, setups: RoleSetups) -> None:
        """The run's first rollout workers, then each policy's inference workers, all at once per role (none in an
        offline run: its learner trains from the dataset in its replay shards alone)."""
        if algorithm_of(self.config).offline:
            return
        self.roster.spawn_all([(RolloutWorker, f"rollout_{i}", host, setup) for i, (host, setup)
                               in enumerate(zip(placement.rollout, setups.rollout, strict=True))],
                              [(Role.ROLLOUT, 0)] * len(setups.rollout), created=self.rollout)
        for handle in self.rollout:
            self.buffers[handle.name] = handle.call("buffers")
        slots = [(setup, j) for setup in setups.inference for j in range(self.config.sampler.num_inference_workers)]
        self.roster.spawn_all([(InferenceWorker, self.roster.inference_name(setup.policy_index, j), host, setup)
                               for (setup, j), host in zip(slots, placement.inference, strict=True)],
                              [(Role.INFERENCE, setup.policy_index) for setup, _ in slots], created=self.inference)

    def rollout_on(self, worker: str, name: str, cls: type, index: int,
                   acting: Sequence[dict | None]) -> ComponentHandle:
        """Rollout worker ``name`` (env seeds by ``index``) created on ``worker``, reading ``acting``'s parameter
        blocks, its slot arrays kept; not yet attached to its readers, wired, started or kept in :attr:`rollout`."""
        setup = rollout_setup(self.config, self.spaces, list(acting), index, self.run_env_steps, self.weights,
                              self.course)
        new = self.roster.spawn(cls, name, worker, setup, Role.ROLLOUT)
        self.buffers[name] = new.call("buffers")
        return new

    def inference_on(self, worker: str, name: str, cls: type, policy: int, setups: RoleSetups) -> ComponentHandle:
        """``policy``'s inference worker ``name`` created on ``worker`` with every rollout worker's slots attached;
        not yet wired, started or kept in :attr:`inference`."""
        new = self.roster.spawn(cls, name, worker, setups.inference[policy], Role.INFERENCE, policy)
        new.call("attach_workers", self.buffers)
        return new

    def replace(self, old: ComponentHandle, new: ComponentHandle) -> None:
        """``new`` (recreated under ``old``'s name) takes ``old``'s place."""
        group = self.rollout if old in self.rollout else self.inference
        group[group.index(old)] = new

    def forget(self, handle: ComponentHandle) -> None:
        """Drop a component that left for good (drained with its worker, or lost with no room to recreate it)."""
        for group in (self.rollout, self.inference):
            if handle in group:
                group.remove(handle)
        self.buffers.pop(handle.name, None)
