"""The live components of one run, by role: the one place that creates, wires, recreates and stops them.

Creating a run's components and recreating one after a fault are the same steps (spawn with the role's setup from
:func:`~daskrl.driver.role_setups.role_setups`, attach slot buffers, hand over parameters, start), so both live here, and the
runner and the recovery both call them. Components are known by role (:class:`Role`), never by class name, so a
subclass of a component class is recreated like the class it replaces.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from daskrl.config import Config
from daskrl.driver.placement import Placement, Role
from daskrl.driver.role_setups import role_setups, rollout_setup
from daskrl.envs.spaces import EnvSpaces
from daskrl.errors import ComponentError
from daskrl.learning.learner import Learner
from daskrl.protocol import policy_queue, wire_inference, wire_learner_group, wire_rollout, wire_sampling_graph
from daskrl.runtime.cluster import ClusterSession
from daskrl.runtime.handles import ComponentHandle, spawn, spawn_all
from daskrl.runtime.shm import force_comms, host_of
from daskrl.runtime.signals import SlotRef
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
        self.learner: ComponentHandle | None = None  # the only learner, or the leader of the learner group
        self.learner_members: list[ComponentHandle] = []  # ranks 1.. of the group (--num-learners)
        # each policy's learner, by policy (--num-policies; the first is ``learner``)
        self.policy_learners: list[ComponentHandle] = []
        self.policy_params: list[dict | None] = []  # each policy's parameter block (the first is ``params``)
        self.snapshot_params: list[dict] = []  # self-play: the blocks of policy 0's frozen past versions
        self.group_generation = 0  # bumped each time the learner group is formed
        self._rollout_indices = config.sampler.num_workers  # rollout_0.. at the start; an elastic run adds more
        self.sink: ComponentHandle | None = None
        self.rollout: list[ComponentHandle] = []
        self.inference: list[ComponentHandle] = []
        self.inference_policy: dict[str, int] = {}  # inference worker name -> the policy it serves
        self.params: dict | None = None  # the learner's parameter block, as readers attach it
        self.buffers: dict[str, dict] = {}  # rollout worker name -> its slot arrays
        # readers on another host than the learner need the parameters over Dask comms too
        self.remote_params = force_comms() or any(
            host_of(a) != host_of(placement.learner) for a in placement.rollout + placement.inference)

    def setups(self) -> RoleSetups:
        """Every role's setup as of now (the parameter block changes when the learner restarts)."""
        return role_setups(self.config, self.spaces, self._acting_params(), self.remote_params)

    def _acting_params(self) -> list[dict | None] | dict | None:
        """Every acting policy's parameter block: the trained policies', then the self-play snapshots'."""
        return self.policy_params + self.snapshot_params if self.policy_params else self.params

    # ---- who is who ----

    def components(self) -> list[ComponentHandle]:
        return [h for h in (self.learner, self.sink) if h is not None] + self.policy_learners[1:] \
            + self.learner_members + self.rollout + self.inference

    def learners(self) -> list[ComponentHandle]:
        """Every learner: each policy's, and the members of policy 0's group."""
        return self.policy_learners + self.learner_members

    def policy_of(self, name: str) -> int:
        """The policy a learner trains (0 for anything else)."""
        return next((k for k, h in enumerate(self.policy_learners) if h.name == name), 0)

    def samplers(self) -> list[ComponentHandle]:
        return self.rollout + self.inference

    def role_of(self, name: str) -> Role | None:
        if any(h.name == name for h in self.policy_learners):
            return Role.LEARNER
        if self.sink is not None and name == self.sink.name:
            return Role.SINK
        if any(h.name == name for h in self.learner_members):
            return Role.LEARNER_MEMBER
        if any(h.name == name for h in self.rollout):
            return Role.ROLLOUT
        if any(h.name == name for h in self.inference):
            return Role.INFERENCE
        return None

    @property
    def consumer(self) -> ComponentHandle:
        """Where full trajectory slots go: the learner, or the sampling-only sink."""
        consumer = self.learner if self.learner is not None else self.sink
        assert consumer is not None, "create() makes the consumer first"
        return consumer

    # ---- creating ----

    def create(self, resume_state: list[dict] | None, init_weights: dict | None = None) -> None:
        """Create, wire and start every component; each policy's learner continues from its ``resume_state`` (by
        policy) when given, or
        starts from ``init_weights`` (``{"version", "weights"}``: --init-checkpoint)."""
        p = self.placement
        if self.config.run.sampling_only:
            self.sink = self._spawn(SamplingSink, "sink", p.rollout[0], None)
        else:
            created: list[ComponentHandle] = []
            policies = self.config.policies.num_policies
            try:
                spawn_all(self.client, [(Learner, _learner_name(setup.rank, setup.policy_index, policies), host, setup)
                                        for host, setup in zip(p.learners, self.setups().learners, strict=True)],
                          run_id=self.run_id, created=created)
            finally:  # what was created is stopped with the rest, even when a later one failed
                if policies > 1:
                    self.policy_learners = created
                else:
                    self.policy_learners, self.learner_members = created[:1], created[1:]
                self.learner = created[0] if created else None
            states = resume_state or [None] * policies
            for k, learner in enumerate(self.policy_learners):
                if states[k] is not None:
                    learner.call("load_state", states[k], int(states[k].get("env_steps", 0)), timeout=120)
                elif init_weights is not None:
                    learner.call("load_weights", init_weights["version"], init_weights["weights"], 0, timeout=120)
            self.policy_params = [h.call("params_desc") for h in self.policy_learners]
            self.params = self.policy_params[0]
            self.snapshot_params = self.learner.call("snapshot_descs")
        setups = self.setups()
        spawn_all(self.client, [(RolloutWorker, f"rollout_{i}", host, setup)
                                for i, (host, setup) in enumerate(zip(p.rollout, setups.rollout, strict=True))],
                  run_id=self.run_id, created=self.rollout)
        for handle in self.rollout:
            self.buffers[handle.name] = handle.call("buffers")
        if setups.inference_by_policy:
            per_policy = self.config.sampler.num_inference_workers
            specs = [(InferenceWorker, self._inference_name(k, j), host, setups.inference_by_policy[k])
                     for (k, j), host in zip(((k, j) for k in range(len(setups.inference_by_policy))
                                              for j in range(per_policy)), p.inference, strict=True)]
            self.inference_policy.update({name: setup.policy_index for _, name, _, setup in specs})
            spawn_all(self.client, specs, run_id=self.run_id, created=self.inference)
            for handle in self.inference:
                handle.call("attach_workers", self.buffers)
        wire_sampling_graph(self.client, self.rollout, [], self._consumer_slots(), policy_queue())
        for handle in self.inference:  # each policy's inference workers take the requests on its own queue
            wire_inference(self.client, handle, policy_queue(self.inference_policy[handle.name]))
        for handle in self.learners():
            handle.call("attach_workers", self.buffers)
        if self.learner_members:
            wire_learner_group(self.client, self.learner, self.learner_members)
            self.form_learner_group()
        for handle in [self.consumer, *self.policy_learners[1:], *self.learner_members, *self.inference,
                       *self.rollout]:
            handle.call("start")

    def form_learner_group(self) -> None:
        """(Re)form the data-parallel learner group: a new generation, whose members all start from the leader's
        whole training state (see :meth:`Learner.join_group`)."""
        assert self.learner is not None
        self.group_generation += 1
        where = self.learner.call("open_group", len(self.learner_members) + 1)
        joining = [(h, h.send("join_group", where["host"], where["port"], self.group_generation))
                   for h in [self.learner, *self.learner_members]]
        for handle, future in joining:
            handle.wait("join_group", future, timeout=120)

    # ---- growing and shrinking (elastic runs) ----

    def add_rollout(self, worker: str) -> ComponentHandle:
        """A new rollout worker on ``worker`` (one that joined the cluster), wired in and started: its slots go to
        the learner (every member of its group) and its requests to the inference workers from now on."""
        index = self.next_rollout_index()
        self._reach_params_from(worker)
        setup = rollout_setup(self.config, self.spaces, self._acting_params(), index)
        new = self._spawn(RolloutWorker, f"rollout_{index}", worker, setup)
        self.rollout.append(new)
        buffers = self.buffers[new.name] = new.call("buffers")
        for handle in self.learners() + self.inference:
            handle.call("attach_workers", {new.name: buffers})
        wire_rollout(self.client, new, self._consumer_slots())
        new.call("start")
        return new

    def add_inference(self, worker: str) -> ComponentHandle:
        """One more inference worker on ``worker``, taking its share of the requests from now on (with several
        policies: of the policy with the fewest inference workers)."""
        counts = [sum(1 for p in self.inference_policy.values() if p == k)
                  for k in range(self.config.policies.num_policies)]
        policy = counts.index(min(counts))
        index = max((int(h.name.rsplit("_", 1)[1]) for h in self.inference
                     if self.inference_policy.get(h.name) == policy), default=-1) + 1
        self._reach_params_from(worker)
        name = self._inference_name(policy, index)
        new = self._spawn(InferenceWorker, name, worker, self.setups().inference_by_policy[policy])
        self.inference_policy[name] = policy
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

    def forget(self, handle: ComponentHandle) -> None:
        """Drop a component that left for good (drained with its worker, or lost with no room to recreate it)."""
        for group in (self.rollout, self.inference):
            if handle in group:
                group.remove(handle)
        self.buffers.pop(handle.name, None)

    # ---- recreating after a fault ----

    def recreate(self, handle: ComponentHandle, worker: str) -> ComponentHandle:
        """Recreate a lost rollout worker, inference worker or sink on ``worker`` under the same name (the bus
        registry keeps its subscriptions by name, so its traffic finds it again) with exactly the setup the
        first one got. A lost learner is :meth:`recreate_learner`'s, which needs to know where to start from."""
        role = self.role_of(handle.name)
        if role in (Role.ROLLOUT, Role.INFERENCE):
            self._reach_params_from(worker)
        if role is Role.ROLLOUT:
            index = self.rollout.index(handle)
            new = self._spawn(handle.cls, handle.name, worker, self.setups().rollout[index])
            buffers = self.buffers[handle.name] = new.call("buffers")
            for learner in self.policy_learners:
                learner.call("attach_workers", {handle.name: buffers})
            self._each(self.inference, "attach_workers", {handle.name: buffers})
            self.rollout[index] = new
        elif role is Role.INFERENCE:
            new = self._spawn(handle.cls, handle.name, worker,
                              self.setups().inference_by_policy[self.inference_policy.get(handle.name, 0)])
            new.call("attach_workers", self.buffers)
            self.inference[self.inference.index(handle)] = new
        elif role is Role.SINK:
            new = self.sink = self._spawn(handle.cls, handle.name, worker, None)
        elif role is Role.LEARNER_MEMBER:
            index = self.learner_members.index(handle)
            new = self._spawn(handle.cls, handle.name, worker, self.setups().learners[index + 1])
            new.call("attach_workers", self.buffers)
            self.learner_members[index] = new
            self.form_learner_group()
        else:
            raise ValueError(f"{handle.name!r} is a {role}: recreate_learner() restarts a learner")
        new.call("start")
        if role is Role.SINK:
            self._reclaim_slots()  # the slots the dead sink held are never coming back
        return new

    def recreate_learner(self, worker: str, state: dict | None = None, weights: dict | None = None,
                         env_steps: int = 0, policy: int = 0) -> ComponentHandle:
        """Restart ``policy``'s learner on ``worker`` from a checkpoint ``state``, or from published ``weights``
        (``{"version", "weights"}``), or from its initial weights; then every sampler follows its parameters. The
        other policies' learners go on untouched."""
        old = self.policy_learners[policy]
        setup = next(s for s in self.setups().learners if s.policy_index == policy and s.rank == 0)
        new = self._spawn(old.cls, old.name, worker, setup)
        if state is not None:
            new.call("load_state", state, env_steps, timeout=120)
        elif weights is not None:
            new.call("load_weights", weights["version"], weights["weights"], env_steps, timeout=120)
        self.policy_params[policy] = new.call("params_desc")
        self.params = self.policy_params[0]
        new.call("attach_workers", self.buffers)
        self.policy_learners[policy] = new
        self.learner = self.policy_learners[0]
        if self.learner_members:
            self.form_learner_group()  # the members go on from the new leader's weights
        new.call("start")
        self._each(self.samplers(), "set_params", self.policy_params[policy], policy)
        if policy == 0 and self.snapshot_params:  # the snapshots lived in the lost learner: new blocks, new weights
            self.snapshot_params = new.call("snapshot_descs")
            for j, desc in enumerate(self.snapshot_params):
                self._each(self.samplers(), "set_params", desc, len(self.policy_learners) + j)
        # the slots the dead learner held are never coming back (with several policies: only what it owed)
        self._each(self.rollout, "reclaim_slots", *((policy,) if len(self.policy_learners) > 1 else ()))
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

    # ---- stopping ----

    def stop(self, handles: Sequence[ComponentHandle]) -> list[dict]:
        """Stop these components; returns each one's final stats, or ``{"name", "error"}`` for one that could not
        be stopped (already gone), so the rest are still stopped."""
        out = []
        for handle in handles:
            try:
                out.append(handle.call("stop", timeout=30))
            except ComponentError as exc:
                out.append({"name": handle.name, "error": str(exc)})
        return out

    # ---- internals ----

    def _spawn(self, cls: type, name: str, worker: str | None, setup: Any) -> ComponentHandle:
        return spawn(self.client, cls, name, run_id=self.run_id, worker=worker, setup=setup)

    def _reach_params_from(self, worker: str) -> None:
        """A sampler is about to run on ``worker``: if that is another host than a learner's, and parameters
        were published through shared memory only, have the learners publish them over comms too."""
        if self.learner is None or self.remote_params or all(
                host_of(worker) == host_of(h.address) for h in self.policy_learners):
            return
        # samplers here keep reading shared memory
        self.policy_params = [h.call("enable_remote_params") for h in self.policy_learners]
        self.params = self.policy_params[0]
        self.snapshot_params = self.learner.call("snapshot_descs")
        self.remote_params = True

    def _inference_name(self, policy: int, index: int) -> str:
        """inference_0, inference_1, ...; with several policies inference_p<k>_0, ..."""
        return _inference_name_for(policy, index, self.config.policies.num_policies)

    def _consumer_slots(self) -> list[SlotRef]:
        """Where full slots are announced: every policy's learner (each takes its own), or the sink."""
        return [h.on_trajectory for h in self.policy_learners] if self.policy_learners else [self.consumer.on_trajectory]

    def _reclaim_slots(self) -> None:
        self._each(self.rollout, "reclaim_slots")

    def _each(self, handles: Sequence[ComponentHandle], method: str, *args: Any) -> None:
        """Call ``method`` on each component; one that fails (lost at the same time: it is recreated with what it
        needs) is told about, and the others still get the call."""
        for handle in handles:
            try:
                handle.call(method, *args)
            except ComponentError as exc:
                self.warn(f"{handle.name} did not take {method}(): {exc}")


def _inference_name_for(policy: int, index: int, num_policies: int) -> str:
    return f"inference_{index}" if num_policies == 1 else f"inference_p{policy}_{index}"


def _learner_name(rank: int, policy: int = 0, num_policies: int = 1) -> str:
    """The leader keeps the name a single learner has; members are learner_1, learner_2, ...; with several
    policies each policy's learner is learner_p0, learner_p1, ..."""
    if num_policies > 1:
        return f"learner_p{policy}"
    return "learner" if rank == 0 else f"learner_{rank}"
