"""A learner's place in its policy's learner group (``--num-learners K``), chosen once from its rank.

The leader (rank 0) receives the slots, splits each batch over the group and publishes every version; it opens a
store for each group generation and puts its whole training state there, and every member starts from it
(:mod:`daskrl.learning.group.learner_group`). A member publishes nothing: its :class:`Unpublished` only counts the
versions the leader publishes for the same weights. It trains on the shares the leader assigns it, and while its
group is broken it waits (a leader goes on alone). One learner (``K = 1``) is :class:`Alone`: a leader that never
forms a group and keeps no weights digests, having nobody to agree with.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from daskrl.learning.group.learner_group import LearnerGroup, open_store
from daskrl.learning.training_state import pack_state, unpack_state
from daskrl.runtime.memory.params import ParameterPublisher

if TYPE_CHECKING:
    from daskrl.algo.common.collectives import Collectives
    from daskrl.learning.snapshots import NoSnapshots, SelfPlaySnapshots
    from daskrl.models.actor_critic import ActorCritic
    from daskrl.runtime.actors.component import Component


class Published:
    """The leader's parameters: each version written to a parameter block the samplers read (shared memory on this
    host; also scattered over Dask comms once a reader is on another host)."""

    def __init__(self, component: Component, model: ActorCritic, remote: bool) -> None:
        """Publishes ``model``'s weights as version 1."""
        from daskrl.models.fast_path.numpy_plan import numpy_plan

        self.block = ParameterPublisher(component, model.state_dict_numpy(), remote=remote)
        self.block.publish(model.state_dict_numpy())
        self.plan = numpy_plan(model)  # samplers on the numpy path act from the weights with it (no torch there)

    @property
    def version(self) -> int:
        return self.block.version

    @property
    def desc(self) -> dict:
        """The block as samplers attach it, with the numpy path's plan (None: the model needs torch)."""
        return {**self.block.desc, "numpy_plan": self.plan}

    @property
    def remote(self) -> bool:
        return self.block.remote

    @property
    def served(self) -> int:
        """Copies of the block host relays fetched (see :attr:`~daskrl.runtime.memory.params.ParameterPublisher.served`)."""
        return self.block.served

    def publish(self, model: ActorCritic) -> int:
        """``model``'s weights as the next version; returns it."""
        return self.block.publish(model.state_dict_numpy())

    def publish_after(self, version: int, model: ActorCritic) -> int:
        """``model``'s weights as the version after ``version`` (a restart from a checkpoint or published weights)."""
        self.block.version = version
        return self.publish(model)

    def go_remote(self, model: ActorCritic, snapshots: SelfPlaySnapshots | NoSnapshots) -> None:
        """Also publish every version (and the snapshots) over Dask comms from now on, starting with the current."""
        if self.block.remote:
            return
        self.block.remote = True
        self.block.publish_remote_now(model.state_dict_numpy())
        snapshots.go_remote()


class Unpublished:
    """A group member's parameters: the leader publishes the same weights as the same version, so a member only
    counts versions (and is asked for no parameter block)."""

    remote = False
    served = 0

    def __init__(self) -> None:
        self.version = 0

    @property
    def desc(self) -> dict:
        raise RuntimeError("the group leader (rank 0) publishes the parameters, not a member")

    def publish(self, model: ActorCritic) -> int:
        self.version += 1
        return self.version

    def publish_after(self, version: int, model: ActorCritic) -> int:
        raise RuntimeError("a group member takes its weights from the leader when it joins the group")

    def go_remote(self, model: ActorCritic, snapshots: SelfPlaySnapshots | NoSnapshots) -> None:
        raise RuntimeError("the group leader (rank 0) publishes the parameters, not a member")


def digest(model: torch.nn.Module) -> str:
    """A digest of the weights: the members of a group hold the same after every step."""
    flat = torch.cat([v.detach().reshape(-1).double().cpu() for v in model.state_dict().values()])
    return hashlib.blake2b(flat.numpy().tobytes(), digest_size=8).hexdigest()


def state_key(generation: int) -> str:
    """Where the leader puts its training state in generation ``generation``'s store."""
    return f"daskrl-gen{generation}-state"


class Leader:
    """Rank 0 of a group of ``world`` learners (see the module docstring)."""

    rank = 0

    def __init__(self, world: int) -> None:
        self.world = world
        self.generation = 0  # of the learner group this learner trains with (0: none yet)
        self.store: Any = None  # the TCPStore of the group generation it opened last
        self.digests: deque[tuple[int, str]] = deque(maxlen=200)  # (train step, weights digest): members agree

    def publication(self, component: Component, model: ActorCritic, remote: bool) -> Published | Unpublished:
        return Published(component, model, remote)

    def open(self, host: str, world: int) -> dict:
        """A store for a new group generation of ``world`` learners; returns where members find it."""
        self.store = open_store(host, world)
        return {"host": host, "port": self.store.port}

    def join(self, host: str, port: int, generation: int, device: torch.device, hand_over: Callable[[], dict],
             take_over: Callable[[dict], None]) -> Collectives:
        """Put this learner's training state (``hand_over()``) in the store, then form the group with the members."""
        self.store.set(state_key(generation), pack_state(hand_over()))
        group = LearnerGroup(host, port, self.rank, self.world, generation, device, store=self.store)
        self.generation = generation
        return group

    def accepts(self, generation: int, group: Collectives) -> bool:
        """Whether a batch formed for group ``generation`` is this learner's to train on now (the leader's batcher
        starts a batch afresh when the group changes; one made before is dropped)."""
        return generation == self.generation

    def record(self, train_steps: int, model: torch.nn.Module) -> None:
        """Keep the digest of the weights after ``train_steps`` steps (the runner compares the members')."""
        self.digests.append((train_steps, digest(model)))

    def share_of(self, shares: list[list]) -> list:
        raise RuntimeError("the group leader assigns shares, it takes none")

    def finish(self, group: Collectives) -> None:
        """This learner stops: the members may have been given shares of a batch it will not train now, so it ends
        the group (:meth:`~daskrl.learning.group.learner_group.LearnerGroup.end`), and their step fails at once rather
        than hold their threads past the runner's wait."""
        group.end()


class Alone(Leader):
    """One learner: the leader of no group (see the module docstring)."""

    def record(self, train_steps: int, model: torch.nn.Module) -> None:
        return None


class Member(Leader):
    """Rank ``rank`` > 0 of a group: trains on the leader's shares, from the leader's state, and publishes nothing."""

    def __init__(self, rank: int, world: int) -> None:
        super().__init__(world)
        self.rank = rank

    def publication(self, component: Component, model: ActorCritic, remote: bool) -> Published | Unpublished:
        return Unpublished()

    def open(self, host: str, world: int) -> dict:
        raise RuntimeError("the group leader (rank 0) opens the group, not a member")

    def join(self, host: str, port: int, generation: int, device: torch.device, hand_over: Callable[[], dict],
             take_over: Callable[[dict], None]) -> Collectives:
        """Form the group with the others, then start from the leader's training state (``take_over(state)``)."""
        group = LearnerGroup(host, port, self.rank, self.world, generation, device)
        take_over(unpack_state(group.store.get(state_key(generation))))
        self.generation = generation
        return group

    def accepts(self, generation: int, group: Collectives) -> bool:
        """A member trains only with its group: without one (broken, not formed again yet) it waits."""
        return generation == self.generation and group.world > 1

    def share_of(self, shares: list[list]) -> list:
        """This member's share of a batch the leader split (the leader keeps share 0)."""
        return shares[self.rank - 1]

    def finish(self, group: Collectives) -> None:
        """A member that stops leaves the group as it is: the leader ends it."""
        return None


def role_for(rank: int, world: int) -> Leader:
    """The role of learner ``rank`` of ``world`` in its group."""
    if world == 1:
        return Alone(world)
    return Leader(world) if rank == 0 else Member(rank, world)
