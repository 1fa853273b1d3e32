"""Self-play snapshots: frozen past versions of a policy, each in a parameter block of its own.

Samplers attach the blocks like the live policy's (:meth:`SelfPlaySnapshots.descs`) and seat the snapshots as
opponents. Every ``snapshot_every`` versions, or at the next version after :meth:`SelfPlaySnapshots.take_next` (a
league member that beats its opponents), the oldest block takes the current weights, so the blocks hold a rolling
set of past versions (a block's version is the policy version it holds); they start as the initial weights.
The blocks' weights go into policy 0's checkpoints (:meth:`SelfPlaySnapshots.saved`), so ``daskrl enjoy --opponent
snapshot:V`` and evaluations can seat them. A learner without self-play has :class:`NoSnapshots`, chosen once
(:func:`snapshots_for`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from daskrl.runtime.memory.params import ParameterPublisher

if TYPE_CHECKING:
    from daskrl.models.actor_critic import ActorCritic
    from daskrl.runtime.actors.component import Component


class SelfPlaySnapshots:
    """``count`` blocks of past weights, refreshed in turn (see the module docstring)."""

    def __init__(self, component: Component, model: ActorCritic, count: int, every: int, remote: bool,
                 frozen: dict | None = None) -> None:
        """``frozen``: weights every block holds for good (--frozen-opponent), instead of the model's, refreshed."""
        from daskrl.models.fast_path.numpy_plan import numpy_plan

        self.every = 0 if frozen is not None else every  # 0: never refreshed
        self.plan = numpy_plan(model)  # as the live block's (daskrl/learning/group/group_member.py)
        own = model.state_dict_numpy()
        if frozen is not None:
            check_same_network(own, frozen)
        self.blocks = [ParameterPublisher(component, own, remote=remote) for _ in range(count)]
        self.weights = [dict(frozen) if frozen is not None else model.state_dict_numpy() for _ in self.blocks]
        self.taken = 0
        self.wanted = False  # take_next was asked: the next version is taken whatever its number
        for block, held in zip(self.blocks, self.weights, strict=True):
            block.publish(held)

    def descs(self) -> list[dict]:
        return [{**block.desc, "numpy_plan": self.plan} for block in self.blocks]

    def versions(self) -> list[int]:
        return [block.version for block in self.blocks]

    def saved(self) -> dict:
        """The checkpoint's part: ``{"self_play_snapshots": {"versions": [...], "weights": [...]}}``, each block's
        version and weights (tensors, which a ``weights_only`` load reads)."""
        import torch

        weights = [{k: torch.from_numpy(v) for k, v in held.items()} for held in self.weights]
        return {"self_play_snapshots": {"versions": self.versions(), "weights": weights}}

    def after_publish(self, version: int, model: ActorCritic) -> None:
        """Version ``version`` was published: every ``every`` versions (or when one was asked for), the oldest block
        takes its weights."""
        if self.wanted or (self.every and not version % self.every):
            self.take(version, model)

    def take(self, version: int, model: ActorCritic) -> int:
        """The oldest block takes ``model``'s weights, policy version ``version``, now; returns that version."""
        self.wanted = False
        j = self.taken % len(self.blocks)
        self.weights[j] = model.state_dict_numpy()
        self.blocks[j].version = version - 1  # the block's version names the policy version it holds
        self.blocks[j].publish(self.weights[j])
        self.taken += 1
        return version

    def take_next(self) -> None:
        """Take the next version published as a snapshot (a league adds a member that beats its opponents)."""
        self.wanted = True

    def go_remote(self) -> None:
        """Also publish over Dask comms from now on (with the live parameters: a reader joined on another host)."""
        for block, held in zip(self.blocks, self.weights, strict=True):
            block.remote = True
            block.publish_remote_now(held)


class NoSnapshots:
    """A learner without self-play: no blocks, nothing to refresh."""

    def descs(self) -> list[dict]:
        return []

    def versions(self) -> list[int]:
        return []

    def saved(self) -> dict:
        return {}

    def after_publish(self, version: int, model: ActorCritic) -> None:
        return None

    def take_next(self) -> None:
        return None

    def take(self, version: int, model: ActorCritic) -> int:
        raise RuntimeError("this learner keeps no self-play snapshots (--self-play-snapshots, --league)")

    def go_remote(self) -> None:
        return None


def snapshots_for(component: Component, model: ActorCritic, snapshots: int, every: int,
                  remote: bool, frozen: dict | None = None) -> SelfPlaySnapshots | NoSnapshots:
    """``snapshots`` blocks (policy 0's leader with ``--self-play-snapshots``, every league member's), or none."""
    return SelfPlaySnapshots(component, model, snapshots, every, remote, frozen) if snapshots else NoSnapshots()


def check_same_network(own: dict, frozen: dict) -> None:
    """--frozen-opponent's weights fit this run's network, or one line says how they differ."""
    from daskrl.errors import ConfigError

    shapes = {k: tuple(v.shape) for k, v in own.items()}
    theirs = {k: tuple(v.shape) for k, v in frozen.items()}
    if shapes != theirs:
        name = min(set(shapes) ^ set(theirs) or {k for k in shapes if shapes[k] != theirs[k]})
        there, here = (f"shape {s[name]}" if name in s else "none" for s in (theirs, shapes))
        raise ConfigError([f"--frozen-opponent's network differs from this run's (its {name}: {there} there, "
                           f"{here} here): train with the model options it was trained with (--hidden-sizes, "
                           "--encoder, ...)"])
