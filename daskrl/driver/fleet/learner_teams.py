"""Each policy's learning side: its learner, the parameter block its samplers read, its self-play snapshots (policy
0's, or every league member's) and policy 0's data-parallel group (``--num-learners``).

One policy is a team of one. The fleet wires the teams to the samplers and replay shards; a team knows only its own
learners: how they are created, which parameter blocks they publish, how a group is formed again after a member or
the leader changed, and how a learner is restarted in place under its name.
"""

from __future__ import annotations

from collections.abc import Sequence

from daskrl.config import Config
from daskrl.driver.fleet.algorithms import algorithm_of
from daskrl.driver.fleet.learner_start import LearnerStart
from daskrl.driver.fleet.placement import Placement, Role
from daskrl.driver.fleet.roster import Roster
from daskrl.learning.learner import Learner
from daskrl.runtime.actors.handles import ComponentHandle
from daskrl.runtime.memory.shm import host_of
from daskrl.setups import RoleSetups


class LearnerTeams:
    """See the module docstring."""

    def __init__(self, roster: Roster, config: Config, remote_params: bool) -> None:
        """``remote_params``: publish parameters over Dask comms too (a sampler runs on another host)."""
        self.roster, self.config, self.remote_params = roster, config, remote_params
        self.leaders: list[ComponentHandle] = []  # each policy's learner (a group's leader), by policy
        self.members: list[ComponentHandle] = []  # ranks 1.. of policy 0's group (--num-learners)
        self.params: list[dict | None] = []  # each policy's parameter block, by policy
        self.snapshots: list[dict] = []  # self-play: the blocks of frozen past versions, learner by learner
        self.generation = 0  # bumped each time the learner group is formed

    def all(self) -> list[ComponentHandle]:
        """Every learner: each policy's, and the members of policy 0's group."""
        return self.leaders + self.members

    def sources(self) -> list[dict | None]:
        """Every acting policy's parameter block: the trained policies', then the self-play snapshots'."""
        return self.params + self.snapshots

    def create(self, placement: Placement, setups: RoleSetups, starts: Sequence[LearnerStart]) -> None:
        """Every policy's learner and policy 0's group members, each leader starting as ``starts`` says."""
        leader_cls = algorithm_of(self.config).learner
        leaders = [(leader_cls, self.roster.learner_name(0, s.policy_index), host, s)
                   for host, s in zip(placement.learners, setups.learners, strict=False)]
        members = [(Learner, self.roster.learner_name(s.rank, 0), host, s)
                   for host, s in zip(placement.learners[len(leaders):], setups.members, strict=True)]
        filing = [(Role.LEARNER, s.policy_index) for *_, s in leaders] + [(Role.LEARNER_MEMBER, 0)] * len(members)
        created: list[ComponentHandle] = []
        try:  # at once: each builds its model on its own worker
            self.roster.spawn_all(leaders + members, filing, created=created)
        finally:  # what was created is stopped with the rest, even when a later one failed
            self.leaders, self.members = created[:len(leaders)], created[len(leaders):]
        for learner, start in zip(self.leaders, starts, strict=False):  # no learner when sampling only
            start.apply(learner)
        self.params = [h.call("params_desc") for h in self.leaders]
        self.snapshots = self._snapshot_blocks()

    def form_group(self) -> None:
        """(Re)form the data-parallel learner group: a new generation, whose members all start from the leader's
        whole training state (see :meth:`Learner.join_group`). A learner without members trains alone."""
        if not self.members:
            return
        leader = self.leaders[0]
        self.generation += 1
        where = leader.call("open_group", len(self.members) + 1)
        joining = [(h, h.send("join_group", where["host"], where["port"], self.generation))
                   for h in [leader, *self.members]]
        for handle, future in joining:
            handle.wait("join_group", future, timeout=120)

    def restart(self, policy: int, worker: str, setups: RoleSetups, start: LearnerStart) -> ComponentHandle:
        """``policy``'s learner anew on ``worker`` under its name, started from ``start`` (not yet running)."""
        old = self.leaders[policy]
        new = self.roster.spawn(old.cls, old.name, worker, setups.learners[policy], Role.LEARNER, policy)
        start.apply(new)
        self.params[policy] = new.call("params_desc")
        self.leaders[policy] = new
        return new

    def _snapshot_blocks(self) -> list[dict]:
        """Every leader's self-play snapshot blocks, in the order of the acting policies (policy by policy)."""
        return [desc for leader in self.leaders for desc in leader.call("snapshot_descs")]

    def renew_snapshots(self, policy: int) -> list[int]:
        """The self-play snapshots of ``policy``'s restarted learner (they lived in the lost one, so their blocks are
        new); returns their indices among the acting policies."""
        old = self.snapshots
        self.snapshots = self._snapshot_blocks()
        return [len(self.leaders) + j for j, (was, now) in enumerate(zip(old, self.snapshots, strict=True))
                if was != now]

    def recreate_member(self, handle: ComponentHandle, worker: str, setups: RoleSetups) -> ComponentHandle:
        """A lost group member anew on ``worker`` under its name (the group forms again once it has its buffers)."""
        index = self.members.index(handle)
        new = self.roster.spawn(handle.cls, handle.name, worker, setups.members[index], Role.LEARNER_MEMBER)
        self.members[index] = new
        return new

    def reach(self, worker: str) -> None:
        """A parameter reader is about to run on ``worker``: if that is another host than a learner's, and parameters
        were published through shared memory only, have the learners publish them over comms too (the direct path,
        which readers fall back to while their host's relay is gone)."""
        if not self.remote_params and any(host_of(worker) != host_of(h.address) for h in self.leaders):
            self.publish_over_comms()

    def publish_over_comms(self) -> None:
        """Have every learner publish its parameters over Dask comms too (a sampler joined on another host)."""
        self.params = [h.call("enable_remote_params") for h in self.leaders]
        self.snapshots = self._snapshot_blocks()
        self.remote_params = True

    def devices(self) -> dict[str, str]:
        """Each learner's torch device, as its worker resolved it (``auto`` becomes cuda or cpu there)."""
        return {h.name: h.call("stats")["device"] for h in self.all()}
