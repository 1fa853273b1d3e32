"""The live components of one run, by role: the one place that creates, wires, recreates and stops them.

Creating a run's components and recreating one after a fault are the same steps (spawn with the role's setup from
:func:`~daskrl.driver.fleet.role_setups.role_setups`, attach slot buffers, hand over parameters, start), so both live
here, and the runner and the recovery both call them. Components are known by role (:class:`Role`), never by class
name, so a subclass of a component class is recreated like the class it replaces. One policy is a fleet of one:
every policy has its learner (``policy_learners``), parameter block (``policy_params``) and inference workers, and
the first policy's learner may lead a data-parallel group (``learner_members``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from daskrl.config import Config
from daskrl.driver.fleet.algorithms import algorithm_of
from daskrl.driver.fleet.learner_start import LearnerStart
from daskrl.driver.fleet.placement import Placement, Role
from daskrl.driver.fleet.relays import Relays
from daskrl.driver.fleet.replay_tier import ReplayTier
from daskrl.driver.fleet.role_setups import role_setups, rollout_setup
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.errors import ComponentError
from daskrl.learning.learner import Learner
from daskrl.protocol import policy_queue, wire_inference, wire_learner_group, wire_rollout
from daskrl.runtime.access.cluster import ClusterSession
from daskrl.runtime.actors.handles import ComponentHandle, spawn, spawn_all
from daskrl.runtime.memory.shm import force_comms, host_of
from daskrl.sampling.inference_worker import InferenceWorker
from daskrl.sampling.rollout_worker import RolloutWorker
from daskrl.sampling.sink import SamplingSink
from daskrl.setups import RoleSetups


class Fleet:
    """The components of one run (see the module docstring). ``create`` starts them all; ``recreate`` one."""

    def __init__(self, session: ClusterSession, config: Config, spaces: EnvSpaces, placement: Placement,
                 warn: Callable[[str], None]) -> None:
        """``warn`` tells the user about a problem that does not stop the run (a sampler that missed an update)."""
        self.client, self.run_id, self.warn = session.client, session.run_id, warn
        self.config, self.spaces, self.placement = config, spaces, placement
        self.policy_learners: list[ComponentHandle] = []  # each policy's learner (a group's leader), by policy
        self.learner_members: list[ComponentHandle] = []  # ranks 1.. of policy 0's group (--num-learners)
        self.policy_params: list[dict | None] = []  # each policy's parameter block, by policy
        self.snapshot_params: list[dict] = []  # self-play: the blocks of policy 0's frozen past versions
        self.group_generation = 0  # bumped each time the learner group is formed
        self._rollout_indices = config.sampler.num_workers  # rollout_0.. at the start; an elastic run adds more
        self.sink: ComponentHandle | None = None  # sampling only: where full slots go instead of learners
        self.algorithm = algorithm_of(config)
        #: off-policy: the replay shards, where full slots go instead of the learner (no shard for APPO)
        self.replay = ReplayTier(config, spaces, self.client, self._spawn)
        self.rollout: list[ComponentHandle] = []
        self.inference: list[ComponentHandle] = []
        self.roles: dict[str, Role] = {}  # component name -> its role
        self.policy_index: dict[str, int] = {}  # learner or inference worker name -> the policy it serves
        self.buffers: dict[str, dict] = {}  # rollout worker name -> its slot arrays
        # readers on another host than the learner need the parameters over Dask comms too
        self.remote_params = force_comms() or any(
            host_of(a) != host_of(placement.learner) for a in placement.rollout + placement.inference)
        self.relays = Relays(config, self.client, self._spawn, warn)  # a parameter relay per host without a learner

    def setups(self) -> RoleSetups:
        """Every role's setup as of now (a parameter block changes when a learner restarts)."""
        return role_setups(self.config, self.spaces, self._acting_params(), self.remote_params)

    def _acting_params(self) -> list[dict | None]:
        """Every acting policy's parameter block as samplers attach it (with its host relays' blocks)."""
        return self.relays.with_relays(self._sources())

    def _sources(self) -> list[dict | None]:
        """Every acting policy's parameter block: the trained policies', then the self-play snapshots'."""
        return self.policy_params + self.snapshot_params

    # ---- who is who ----

    def components(self) -> list[ComponentHandle]:
        return [*self.consumers(), *self.learner_members, *self.rollout, *self.inference, *self.relays.handles()]

    def consumers(self) -> list[ComponentHandle]:
        """Where full trajectory slots go and what trains on them: every policy's learner, the replay shards
        (off-policy), or the sampling-only sink."""
        return [*self.policy_learners, *self.replay.shards, *([self.sink] if self.sink is not None else [])]

    def learners(self) -> list[ComponentHandle]:
        """Every learner: each policy's, and the members of policy 0's group."""
        return self.policy_learners + self.learner_members

    def samplers(self) -> list[ComponentHandle]:
        return self.rollout + self.inference

    def role_of(self, name: str) -> Role | None:
        return self.roles.get(name)

    def policy_of(self, name: str) -> int:
        """The policy a learner or inference worker serves (0 for anything else)."""
        return self.policy_index.get(name, 0)

    # ---- creating ----

    def create(self, starts: Sequence[LearnerStart]) -> None:
        """Create, wire and start every component; each policy's learner starts as ``starts`` says (by policy)."""
        setups = self.setups()
        if self.config.run.sampling_only:
            self.sink = self._spawn(SamplingSink, "sink", self.placement.rollout[0], None, Role.SINK)
        else:
            self._create_learners(setups, starts)
            self.replay.create(self.placement.rollout, self._spawn_shards)
            self.relays.create(self.placement, self.policy_learners, self._sources())
        setups = self.setups()  # with the learners' parameter blocks
        self._create_samplers(setups)
        if self.replay.shards:
            self.replay.connect(self.replay.shards, self.policy_learners[0], self.buffers)
        wire_learner_group(self.client, self.policy_learners[:1], self.learner_members)
        self.form_learner_group()
        for handle in [*self.consumers(), *self.learner_members, *self.inference, *self.rollout]:
            handle.call("start")

    def _create_learners(self, setups: RoleSetups, starts: Sequence[LearnerStart]) -> None:
        leaders = [(self.algorithm.learner, learner_name(0, s.policy_index, self.config), host, s)
                   for host, s in zip(self.placement.learners, setups.learners, strict=False)]
        members = [(Learner, learner_name(s.rank, 0, self.config), host, s)
                   for host, s in zip(self.placement.learners[len(leaders):], setups.members, strict=True)]
        created: list[ComponentHandle] = []
        try:
            spawn_all(self.client, leaders + members, run_id=self.run_id, created=created)
        finally:  # what was created is stopped with the rest, even when a later one failed
            self.policy_learners = created[:len(leaders)]
            self.learner_members = created[len(leaders):]
            for policy, handle in enumerate(self.policy_learners):
                self._file(handle, Role.LEARNER, policy)
            for handle in self.learner_members:
                self._file(handle, Role.LEARNER_MEMBER)
        for learner, start in zip(self.policy_learners, starts, strict=False):  # no learner when sampling only
            start.apply(learner)
        self.policy_params = [h.call("params_desc") for h in self.policy_learners]
        self.snapshot_params = self.policy_learners[0].call("snapshot_descs")

    def _spawn_shards(self, entries: list) -> list[ComponentHandle]:
        """Create replay shards at once ((class, name, worker, setup) each), filed as such."""
        created: list[ComponentHandle] = []
        try:
            spawn_all(self.client, entries, run_id=self.run_id, created=created)
        finally:  # what was created is stopped with the rest, even when a later one failed
            for handle in created:
                self._file(handle, Role.REPLAY)
        return created

    def _create_samplers(self, setups: RoleSetups) -> None:
        """Rollout workers, then each policy's inference workers, every one wired to its queues and consumers."""
        spawn_all(self.client, [(RolloutWorker, f"rollout_{i}", host, setup)
                                for i, (host, setup) in enumerate(zip(self.placement.rollout, setups.rollout,
                                                                      strict=True))],
                  run_id=self.run_id, created=self.rollout)
        for index, handle in enumerate(self.rollout):
            self._file(handle, Role.ROLLOUT)
            self.buffers[handle.name] = handle.call("buffers")
            wire_rollout(self.client, handle, self._consumer_slots(handle.name, index, handle.address))
        per_policy = self.config.sampler.num_inference_workers
        slots = [(setup, j) for setup in setups.inference for j in range(per_policy)]
        spawn_all(self.client, [(InferenceWorker, self._inference_name(setup.policy_index, j), host, setup)
                                for (setup, j), host in zip(slots, self.placement.inference, strict=True)],
                  run_id=self.run_id, created=self.inference)
        for handle, (setup, _) in zip(self.inference, slots, strict=True):
            self._file(handle, Role.INFERENCE, setup.policy_index)
            handle.call("attach_workers", self.buffers)
            wire_inference(self.client, handle, policy_queue(setup.policy_index))
        for handle in self.learners():
            handle.call("attach_workers", self.buffers)

    def form_learner_group(self) -> None:
        """(Re)form the data-parallel learner group: a new generation, whose members all start from the leader's
        whole training state (see :meth:`Learner.join_group`). A learner without members trains alone."""
        if not self.learner_members:
            return
        leader = self.policy_learners[0]
        self.group_generation += 1
        where = leader.call("open_group", len(self.learner_members) + 1)
        joining = [(h, h.send("join_group", where["host"], where["port"], self.group_generation))
                   for h in [leader, *self.learner_members]]
        for handle, future in joining:
            handle.wait("join_group", future, timeout=120)

    # ---- growing and shrinking (elastic runs) ----

    def add_rollout(self, worker: str) -> ComponentHandle:
        """A new rollout worker on ``worker`` (one that joined the cluster), wired in and started: its slots go to
        the learners (every member of a group), or to its replay shard (under ``--replay-shards auto`` its host's,
        a new one when its host has none), and its requests to the inference workers from now on."""
        index = self.next_rollout_index()
        self._reach_params_from(worker, Role.ROLLOUT)
        setup = rollout_setup(self.config, self.spaces, self._acting_params(), index)
        new = self._spawn(RolloutWorker, f"rollout_{index}", worker, setup, Role.ROLLOUT)
        self.rollout.append(new)
        buffers = self.buffers[new.name] = new.call("buffers")
        consumers = self._consumer_slots(new.name, index, worker)  # first: it names (or adds) the worker's shard
        self._each(self.learners() + self.inference + self.replay.of(new.name), "attach_workers", {new.name: buffers})
        wire_rollout(self.client, new, consumers)
        new.call("start")
        return new

    def add_inference(self, worker: str) -> ComponentHandle:
        """One more inference worker on ``worker``, taking its share of the requests from now on (with several
        policies: of the policy with the fewest inference workers)."""
        serving = [self.policy_of(h.name) for h in self.inference]
        policy = min(range(self.config.policies.num_policies), key=serving.count)
        self._reach_params_from(worker, Role.INFERENCE)
        name = self._inference_name(policy, self._next_inference_index(policy))
        new = self._spawn(InferenceWorker, name, worker, self.setups().inference[policy], Role.INFERENCE, policy)
        self.inference.append(new)
        new.call("attach_workers", self.buffers)
        wire_inference(self.client, new, policy_queue(policy))
        new.call("start")
        return new

    def next_rollout_index(self) -> int:
        """Indices are never reused within a run: each names its env seeds and its slots' owner."""
        index = self._rollout_indices
        self._rollout_indices += 1
        return index

    def _next_inference_index(self, policy: int) -> int:
        own = [int(h.name.rsplit("_", 1)[1]) for h in self.inference if self.policy_of(h.name) == policy]
        return max(own, default=-1) + 1

    def forget(self, handle: ComponentHandle) -> None:
        """Drop a component that left for good (drained with its worker, or lost with no room to recreate it)."""
        for group in (self.rollout, self.inference):
            if handle in group:
                group.remove(handle)
        self.buffers.pop(handle.name, None)

    # ---- recreating after a fault ----

    def recreate(self, handle: ComponentHandle, worker: str) -> ComponentHandle:
        """Recreate a lost rollout worker, inference worker, sink or learner-group member on ``worker`` under the
        same name (the bus registry keeps its subscriptions by name, so its traffic finds it again) with exactly
        the setup the first one got. A lost learner is :meth:`recreate_learner`'s, which needs to know where to
        start from."""
        recreators = {Role.ROLLOUT: self._recreate_rollout, Role.INFERENCE: self._recreate_inference,
                      Role.SINK: self._recreate_sink, Role.LEARNER_MEMBER: self._recreate_member,
                      Role.REPLAY: self._recreate_shard}
        role = self.role_of(handle.name)
        if role is Role.RELAY:  # on its own host, started; its samplers then read it (None: the host has none left)
            return self.relays.recreate(handle, worker, self.policy_learners, self._sources(), self.samplers())
        if role not in recreators:
            raise ValueError(f"{handle.name!r} is a {role}: recreate_learner() restarts a learner")
        new = recreators[role](handle, worker)
        new.call("start")
        if role is Role.SINK:
            self._each(self.rollout, "reclaim_slots")  # the slots the dead sink held are never coming back
        if role is Role.REPLAY:  # what the dead shard held of its own rollout workers' slots, likewise
            names = set(self.replay.rollout_of(new))
            self._each([h for h in self.rollout if h.name in names], "reclaim_slots")
        return new

    def _recreate_rollout(self, handle: ComponentHandle, worker: str) -> ComponentHandle:
        self._reach_params_from(worker, Role.ROLLOUT)
        index = int(handle.name.rsplit("_", 1)[1])  # its own index (an elastic run's newcomers go past the config's)
        setup = rollout_setup(self.config, self.spaces, self._acting_params(), index)
        new = self._spawn(handle.cls, handle.name, worker, setup, Role.ROLLOUT)
        buffers = self.buffers[handle.name] = new.call("buffers")
        self._each(self.learners() + self.inference + self.replay.of(handle.name), "attach_workers",
                   {handle.name: buffers})
        self.rollout[self.rollout.index(handle)] = new
        return new

    def _recreate_inference(self, handle: ComponentHandle, worker: str) -> ComponentHandle:
        self._reach_params_from(worker, Role.INFERENCE)
        policy = self.policy_of(handle.name)
        new = self._spawn(handle.cls, handle.name, worker, self.setups().inference[policy], Role.INFERENCE, policy)
        new.call("attach_workers", self.buffers)
        self.inference[self.inference.index(handle)] = new
        return new

    def _recreate_sink(self, handle: ComponentHandle, worker: str) -> ComponentHandle:
        self.sink = self._spawn(handle.cls, handle.name, worker, None, Role.SINK)
        return self.sink

    def _recreate_shard(self, handle: ComponentHandle, worker: str) -> ComponentHandle:
        return self.replay.recreate(handle, worker, self.policy_learners[0], self.buffers)

    def _recreate_member(self, handle: ComponentHandle, worker: str) -> ComponentHandle:
        index = self.learner_members.index(handle)
        new = self._spawn(handle.cls, handle.name, worker, self.setups().members[index], Role.LEARNER_MEMBER)
        new.call("attach_workers", self.buffers)
        self.learner_members[index] = new
        self.form_learner_group()
        return new

    def recreate_learner(self, worker: str, start: LearnerStart, policy: int = 0) -> ComponentHandle:
        """Restart ``policy``'s learner on ``worker`` as ``start`` says; then every sampler follows its
        parameters. The other policies' learners go on untouched."""
        old = self.policy_learners[policy]
        new = self._spawn(old.cls, old.name, worker, self.setups().learners[policy], Role.LEARNER, policy)
        start.apply(new)
        self.policy_params[policy] = new.call("params_desc")
        new.call("attach_workers", self.buffers)
        self.policy_learners[policy] = new
        if self.replay.shards:  # before its start: it asks every shard for a minibatch as it starts
            new.call("attach_replay", self.replay.batch_descs())
        self.form_learner_group()  # the members go on from the new leader's weights
        new.call("start")
        self.relays.follow(policy, self.policy_params[policy])
        self._each(self.samplers(), "set_params", self._acting_params()[policy], policy)
        for j, desc in enumerate(new.call("snapshot_descs")):  # only policy 0's learner keeps self-play snapshots:
            self.snapshot_params[j] = desc  # they lived in the lost learner, so their blocks are new
            self.relays.follow(len(self.policy_learners) + j, desc)
            self._each(self.samplers(), "set_params", self._acting_params()[len(self.policy_learners) + j],
                       len(self.policy_learners) + j)
        self._each(self.rollout, "reclaim_slots", policy)  # what the dead learner held is never coming back
        return new

    def learner_devices(self) -> dict[str, str]:
        """Each learner's torch device, as its worker resolved it (``auto`` becomes cuda or cpu there)."""
        return {h.name: h.call("stats")["device"] for h in self.learners()}

    def newest_policy_weights(self, policy: int = 0) -> dict[str, Any] | None:
        """The newest ``{"version", "weights"}`` any sampler acts with (None when none answers): what a learner
        lost before its first checkpoint published last, as far as it reached the samplers."""
        newest = None
        for component in self.samplers():
            try:
                got = component.call("policy_weights", policy, timeout=30)
            except ComponentError:  # a sampler lost at the same time: the others may have it
                continue
            if got is not None and (newest is None or got["version"] > newest["version"]):
                newest = got
        return newest

    # ---- internals ----

    def _spawn(self, cls: type, name: str, worker: str | None, setup: Any, role: Role,
               policy: int = 0) -> ComponentHandle:
        handle = spawn(self.client, cls, name, run_id=self.run_id, worker=worker, setup=setup)
        self._file(handle, role, policy)
        return handle

    def _file(self, handle: ComponentHandle, role: Role, policy: int = 0) -> None:
        self.roles[handle.name] = role
        self.policy_index[handle.name] = policy

    def _reach_params_from(self, worker: str, role: Role) -> None:
        """A sampler of ``role`` is about to run on ``worker``: if that is another host than a learner's, and
        parameters were published through shared memory only, have the learners publish them over comms too (the
        direct path, which readers fall back to while their host's relay is gone); and give the host a relay."""
        if not self.remote_params and any(host_of(worker) != host_of(h.address) for h in self.policy_learners):
            self.policy_params = [h.call("enable_remote_params") for h in self.policy_learners]
            self.snapshot_params = self.policy_learners[0].call("snapshot_descs")
            self.remote_params = True
        self.relays.reach(worker, role, self.policy_learners, self._sources())

    def _inference_name(self, policy: int, index: int) -> str:
        """inference_0, inference_1, ...; with several policies inference_p<k>_0, ..."""
        return f"inference_{index}" if self.config.policies.num_policies == 1 else f"inference_p{policy}_{index}"

    def _consumer_slots(self, name: str, index: int, address: str) -> list:
        """Where rollout worker ``name`` (index ``index``, on ``address``) announces its full slots: its replay shard
        (off-policy: its host's, added when its host has none, or shard ``index % shards``:
        :func:`~daskrl.driver.fleet.replay_hosts.route`), or every policy's learner (each takes its own), or the sink."""
        if self.replay.shards:
            return self.replay.consumer(name, index, address, self.policy_learners[0], self.buffers)
        return [h.on_trajectory for h in self.consumers()]

    def _each(self, handles: Sequence[ComponentHandle], method: str, *args: Any) -> None:
        """Call ``method`` on each component; one that fails (lost at the same time: it is recreated with what it
        needs) is told about, and the others still get the call."""
        for handle in handles:
            try:
                handle.call(method, *args)
            except ComponentError as exc:
                self.warn(f"{handle.name} did not take {method}(): {exc}")


def learner_name(rank: int, policy: int, config: Config) -> str:
    """The leader keeps the name a single learner has ("learner"); members are learner_1, learner_2, ...; with
    several policies each policy's learner is learner_p0, learner_p1, ..."""
    if config.policies.num_policies > 1:
        return f"learner_p{policy}"
    return "learner" if rank == 0 else f"learner_{rank}"
