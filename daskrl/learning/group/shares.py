"""How a learner group's leader splits one batch's slots into its members' shares (torch-free: the batcher, which
the driver imports with the learner's class, uses it)."""

from __future__ import annotations


def split_slots(slots: list, world: int) -> list[list]:
    """The leader's split of one batch's slots into ``world`` shares: every slot in exactly one share, and as many
    slots in each (the caller collects a multiple of ``world``; slots of a run all hold the same samples)."""
    if len(slots) % world:
        raise ValueError(f"{len(slots)} slots cannot be split evenly over {world} learners")
    return [slots[rank::world] for rank in range(world)]
