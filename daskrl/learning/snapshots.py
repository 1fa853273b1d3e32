"""Self-play snapshots: frozen past versions of a policy, each in a parameter block of its own.

Samplers attach the blocks like the live policy's (:meth:`SelfPlaySnapshots.descs`) and seat the snapshots as
opponents. Every ``snapshot_every`` versions the oldest block takes the current weights, so the blocks hold a
rolling set of past versions (a block's version is the policy version it holds); they start as the initial weights.
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

    def __init__(self, component: Component, model: ActorCritic, count: int, every: int, remote: bool) -> None:
        from daskrl.models.fast_path.numpy_plan import numpy_plan

        self.every = every
        self.plan = numpy_plan(model)  # as the live block's (daskrl/learning/group/group_member.py)
        self.blocks = [ParameterPublisher(component, model.state_dict_numpy(), remote=remote) for _ in range(count)]
        self.weights = [model.state_dict_numpy() for _ in self.blocks]  # what each block holds
        self.taken = 0
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
        """Version ``version`` was published: every ``every`` versions, the oldest block takes its weights."""
        if version % self.every:
            return
        j = self.taken % len(self.blocks)
        self.weights[j] = model.state_dict_numpy()
        self.blocks[j].version = version - 1  # the block's version names the policy version it holds
        self.blocks[j].publish(self.weights[j])
        self.taken += 1

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

    def go_remote(self) -> None:
        return None


def snapshots_for(component: Component, model: ActorCritic, snapshots: int, every: int,
                  remote: bool) -> SelfPlaySnapshots | NoSnapshots:
    """``snapshots`` blocks (policy 0's leader with ``--self-play-snapshots``), or none."""
    return SelfPlaySnapshots(component, model, snapshots, every, remote) if snapshots else NoSnapshots()
