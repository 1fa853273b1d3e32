"""The live components of one run, by role: the one place that creates, wires, recreates and stops them.

Creating a run's components and recreating one after a fault are the same steps (spawn with the role's setup from
:func:`~daskrl.driver.fleet.role_setups.role_setups`, attach slot buffers, hand over parameters, start), so both live
here, and the runner and the recovery both call them. The fleet is made of teams, each with one job: the
:class:`~daskrl.driver.fleet.roster.Roster` (who is who, by name and role: a subclass of a component class is
recreated like the class it replaces), the :class:`~daskrl.driver.fleet.learner_teams.LearnerTeams` (each policy's
learner, parameter block, snapshots and data-parallel group), the samplers (rollout workers with their slot buffers,
inference workers), the :class:`~daskrl.driver.fleet.replay_tier.ReplayTier` (off-policy) and the parameter
:class:`~daskrl.driver.fleet.relays.Relays`. The fleet wires them to one another.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from daskrl.config import Config
from daskrl.driver.fleet.learner_start import LearnerStart
from daskrl.driver.fleet.learner_teams import LearnerTeams
from daskrl.driver.fleet.placement import Placement, Role
from daskrl.driver.fleet.relays import Relays
from daskrl.driver.fleet.replay_tier import ReplayTier
from daskrl.driver.fleet.role_setups import role_setups
from daskrl.driver.fleet.roster import Roster
from daskrl.driver.fleet.sampler_team import Samplers
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.protocol import policy_queue, wire_inference, wire_learner_group, wire_rollout
from daskrl.runtime.access.cluster import ClusterSession
from daskrl.runtime.actors.handles import ComponentHandle, call_each
from daskrl.runtime.memory.shm import force_comms, host_of
from daskrl.sampling.inference_worker import InferenceWorker
from daskrl.sampling.rollout_worker import RolloutWorker
from daskrl.sampling.sink import SamplingSink
from daskrl.setups import RoleSetups


class Fleet:
    """The components of one run (see the module docstring). ``create`` starts them all; ``recreate`` one."""

    def __init__(self, session: ClusterSession, config: Config, spaces: EnvSpaces, placement: Placement,
                 warn: Callable[[str], None], env_steps_offset: int = 0) -> None:
        """``warn`` tells the user about a problem that does not stop the run (a sampler that missed an update);
        ``env_steps_offset``: the env steps a resumed run starts from (its samplers explore on from there)."""
        self.config, self.spaces, self.placement, self.warn = config, spaces, placement, warn
        self.roster = Roster(session.client, session.run_id, config)
        # readers on another host than the learner need the parameters over Dask comms too (and a league of runs'
        # peers may read them from any host of the cluster)
        remote = force_comms() or bool(config.policies.league_peers) or any(
            host_of(a) != host_of(placement.learner) for a in placement.rollout + placement.inference)
        self.teams = LearnerTeams(self.roster, config, remote)
        self.sink: ComponentHandle | None = None  # sampling only: where full slots go instead of learners
        #: off-policy: the replay shards, where full slots go instead of the learner (no shard for APPO)
        self.replay = ReplayTier(config, spaces, session.client, self.roster.spawn)
        self.samplers = Samplers(self.roster, config, spaces)
        self.took(env_steps_offset)
        # a parameter relay per host without a learner
        self.relays = Relays(config, session.client, self.roster.spawn, warn)

    @property
    def client(self) -> Any:
        return self.roster.client

    def setups(self) -> RoleSetups:
        """Every role's setup as of now (a parameter block changes when a learner restarts)."""
        return role_setups(self.config, self.spaces, self._acting_params(), self.teams.remote_params,
                           self.samplers.run_env_steps, self.samplers.weights, self.samplers.course)

    def took(self, env_steps: int) -> None:
        """The run has taken ``env_steps`` so far: a rollout worker created from now on (a recovered or added one)
        explores from there (DQN's epsilon, TD3's warm-up), not from the run's beginning."""
        self.samplers.run_env_steps = env_steps

    def _acting_params(self) -> list[dict | None]:
        """Every acting policy's parameter block as samplers attach it (with its host relays' blocks), then a league
        of runs' peer blocks (kept on the samplers)."""
        return self.relays.with_relays(self.teams.sources()) + self.samplers.peer_blocks

    # ---- who is who ----

    def components(self) -> list[ComponentHandle]:
        return [*self.consumers(), *self.teams.members, *self.samplers.all(), *self.relays.handles()]

    def consumers(self) -> list[ComponentHandle]:
        """Where full trajectory slots go and what trains on them: every policy's learner, the replay shards
        (off-policy), or the sampling-only sink."""
        return [*self.teams.leaders, *self.replay.shards, *([self.sink] if self.sink is not None else [])]

    def learners(self) -> list[ComponentHandle]:
        """Every learner: each policy's, and the members of policy 0's group."""
        return self.teams.all()

    # ---- creating ----

    def create(self, starts: Sequence[LearnerStart]) -> None:
        """Create, wire and start every component; each policy's learner starts as ``starts`` says (by policy)."""
        if self.config.run.sampling_only:
            self.sink = self.roster.spawn(SamplingSink, "sink", self.placement.rollout[0], None, Role.SINK)
            self.samplers.weights = starts[0].weights if starts else None  # --init-checkpoint's: played as trained
        else:
            self.teams.create(self.placement, self.setups(), starts)
            self.replay.create(self.placement.rollout, lambda specs: self.roster.spawn_all(
                specs, [(Role.REPLAY, 0)] * len(specs)))
            self.relays.create(self.placement, self.teams.leaders, self.teams.sources())
        self._create_samplers(self.setups())  # with the learners' parameter blocks
        if self.replay.shards:
            self.replay.connect(self.replay.shards, self.teams.leaders[0], self.samplers.buffers)
        wire_learner_group(self.client, self.teams.leaders[:1], self.teams.members)
        self.teams.form_group()
        for handle in [*self.consumers(), *self.teams.members]:
            handle.call("start")
        self.samplers.start([*self.samplers.inference, *self.samplers.rollout])  # unless held (--online-after)

    def _create_samplers(self, setups: RoleSetups) -> None:
        """Rollout workers, then each policy's inference workers, every one wired to its queues and consumers."""
        self.samplers.create(self.placement, setups)
        for index, handle in enumerate(self.samplers.rollout):
            wire_rollout(self.client, handle, self._consumer_slots(handle.name, index, handle.address))
        for handle in self.samplers.inference:
            handle.call("attach_workers", self.samplers.buffers)
            wire_inference(self.client, handle, policy_queue(self.roster.policy_of(handle.name)))
        for handle in self.learners():
            handle.call("attach_workers", self.samplers.buffers)

    # ---- growing and shrinking (elastic runs) ----

    def add_rollout(self, worker: str) -> ComponentHandle:
        """A new rollout worker on ``worker`` (one that joined the cluster), wired in and started: its slots go to
        the learners (every member of a group), or to its replay shard (under ``--replay-shards auto`` its host's,
        a new one when its host has none), and its requests to the inference workers from now on."""
        index = self.roster.next_rollout_index()
        new = self._rollout_on(worker, f"rollout_{index}", RolloutWorker, index)
        self.samplers.rollout.append(new)
        consumers = self._consumer_slots(new.name, index, worker)  # first: it names (or adds) the worker's shard
        self._attach_slots(new.name)
        wire_rollout(self.client, new, consumers)
        self.samplers.start([new])
        return new

    def add_inference(self, worker: str) -> ComponentHandle:
        """One more inference worker on ``worker``, taking its share of the requests from now on (with several
        policies: of the policy with the fewest inference workers)."""
        serving = [self.roster.policy_of(h.name) for h in self.samplers.inference]
        policy = min(range(self.config.policies.num_policies), key=serving.count)
        name = self.roster.next_inference_name(policy, self.samplers.inference)
        new = self._inference_on(worker, name, InferenceWorker, policy)
        self.samplers.inference.append(new)
        wire_inference(self.client, new, policy_queue(policy))
        self.samplers.start([new])
        return new

    # ---- recreating after a fault ----

    def recreate(self, handle: ComponentHandle, worker: str) -> ComponentHandle:
        """Recreate a lost rollout worker, inference worker, sink, replay shard or learner-group member on
        ``worker`` under the same name (the bus registry keeps its subscriptions by name, so its traffic finds it
        again) with exactly the setup the first one got. A lost learner is :meth:`recreate_learner`'s, which needs
        to know where to start from."""
        role = self.roster.role_of(handle.name)
        if role is Role.RELAY:  # on its own host, started; its samplers then read it (None: the host has none left)
            return self.relays.recreate(handle, worker, self.teams.leaders, self.teams.sources(), self.samplers.all())
        if role is Role.ROLLOUT:
            new = self._rollout_on(worker, handle.name, handle.cls, int(handle.name.rsplit("_", 1)[1]))
            self._attach_slots(new.name)
            self.samplers.replace(handle, new)
        elif role is Role.INFERENCE:
            new = self._inference_on(worker, handle.name, handle.cls, self.roster.policy_of(handle.name))
            self.samplers.replace(handle, new)
        elif role is Role.SINK:
            new = self.sink = self.roster.spawn(handle.cls, handle.name, worker, None, Role.SINK)
        elif role is Role.REPLAY:
            new = self.replay.recreate(handle, worker, self.teams.leaders[0], self.samplers.buffers)
        elif role is Role.LEARNER_MEMBER:
            new = self.teams.recreate_member(handle, worker, self.setups())
            new.call("attach_workers", self.samplers.buffers)
            self.teams.form_group()
        else:
            raise ValueError(f"{handle.name!r} is a {role}: recreate_learner() restarts a learner")
        if role in (Role.ROLLOUT, Role.INFERENCE):
            self.samplers.start([new])  # unless sampling is still held back (--online-after)
        else:
            new.call("start")
        if role is Role.SINK:  # the slots the dead sink held are never coming back
            call_each(self.samplers.rollout, "reclaim_slots", warn=self.warn)
        if role is Role.REPLAY:  # what the dead shard held of its own rollout workers' slots, likewise
            feeding = set(self.replay.rollout_of(new))
            call_each([h for h in self.samplers.rollout if h.name in feeding], "reclaim_slots", warn=self.warn)
        return new

    def recreate_learner(self, worker: str, start: LearnerStart, policy: int = 0) -> ComponentHandle:
        """Restart ``policy``'s learner on ``worker`` as ``start`` says; then every sampler follows its
        parameters. The other policies' learners go on untouched."""
        new = self.teams.restart(policy, worker, self.setups(), start)
        new.call("attach_workers", self.samplers.buffers)
        if self.replay.shards:  # before its start: it asks every shard for a minibatch as it starts
            new.call("attach_replay", self.replay.batch_descs())
        self.teams.form_group()  # the members go on from the new leader's weights
        new.call("start")
        # its self-play snapshots lived in the lost learner, so their blocks are new
        renewed = [policy, *self.teams.renew_snapshots(policy)]
        for index in renewed:
            self.relays.follow(index, self.teams.sources()[index])
            call_each(self.samplers.all(), "set_params", self._acting_params()[index], index, warn=self.warn)
        # what the dead learner held of the rollout workers' slots is never coming back
        call_each(self.samplers.rollout, "reclaim_slots", policy, warn=self.warn)
        return new

    # ---- internals ----

    def _rollout_on(self, worker: str, name: str, cls: type, index: int) -> ComponentHandle:
        self._reach_params_from(worker, Role.ROLLOUT)
        return self.samplers.rollout_on(worker, name, cls, index, self._acting_params())

    def _attach_slots(self, name: str) -> None:
        """Rollout worker ``name``'s slot arrays to everything that reads them: every learner, every inference
        worker and its replay shard."""
        call_each(self.learners() + self.samplers.inference + self.replay.of(name), "attach_workers",
                   {name: self.samplers.buffers[name]}, warn=self.warn)

    def _inference_on(self, worker: str, name: str, cls: type, policy: int) -> ComponentHandle:
        self._reach_params_from(worker, Role.INFERENCE)
        return self.samplers.inference_on(worker, name, cls, policy, self.setups())

    def _reach_params_from(self, worker: str, role: Role) -> None:
        """A sampler of ``role`` is about to run on ``worker``: its parameters must reach that host (over comms, and
        through a relay of that host's)."""
        self.teams.reach(worker)
        self.relays.reach(worker, role, self.teams.leaders, self.teams.sources())

    def _consumer_slots(self, name: str, index: int, address: str) -> list:
        """Where rollout worker ``name`` (index ``index``, on ``address``) announces its full slots: its replay shard
        (off-policy: its host's, added when its host has none, or shard ``index % shards``:
        :func:`~daskrl.driver.fleet.replay_hosts.route`), or every policy's learner (each takes its own), or the sink."""
        if self.replay.shards:
            return self.replay.consumer(name, index, address, self.teams.leaders[0], self.samplers.buffers)
        return [h.on_trajectory for h in self.consumers()]
