"""A data-parallel learner group: K learners of one policy train on K shares of each batch as one.

Each member computes gradients on its share; the group sums them (and every statistic the loss depends on: the
observation and return moments, the advantage moments and the count of valid samples of each minibatch) with
``torch.distributed`` collectives, so every member applies the same update, the one a single learner would
apply on the whole batch. Gloo carries CPU tensors, NCCL CUDA ones (gloo too where members share one GPU,
which NCCL refuses).

The group is set up through Dask, with no launcher: the leader (rank 0) opens a ``TCPStore`` on its own host
(:func:`open_store`), the runner hands its address to every member, and each builds a process group object of
its own (never torch's global default group: a member can leave and the group be formed again, as a new
*generation*, in the same processes). A collective that fails (a member died) raises :class:`GroupBroken`.
"""

from __future__ import annotations

import datetime
import socket
from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist

from daskrl.algo.common.collectives import sum_gradients_flat
from daskrl.errors import GroupBroken

#: seconds a member waits for the others at formation and in each collective before the group counts as broken
GROUP_TIMEOUT_S = 30.0


class LearnerGroup:
    """Member ``rank`` of a ``world``-sized group (see the module docstring)."""

    def __init__(self, host: str, port: int, rank: int, world: int, generation: int, device: torch.device,
                 store: Any = None, timeout_s: float = GROUP_TIMEOUT_S) -> None:
        """Blocks until every member has joined (or ``timeout_s`` passed: :class:`GroupBroken`). The leader passes
        the ``store`` it opened; the others connect to ``host:port``."""
        self.rank, self.world, self.generation, self.device = rank, world, generation, device
        timeout = datetime.timedelta(seconds=timeout_s)
        try:
            self.store = store if store is not None else dist.TCPStore(host, port, world, False, timeout=timeout)
            prefixed = dist.PrefixStore(f"daskrl-gen{generation}", self.store)
            self.backend = "nccl" if device.type == "cuda" and not _gpu_shared(prefixed, rank, world, device) \
                else "gloo"
            if self.backend == "nccl":
                self.pg = dist.ProcessGroupNCCL(prefixed, rank, world)
            else:
                self.pg = dist.ProcessGroupGloo(prefixed, rank, world, timeout)
        except Exception as exc:
            raise GroupBroken(f"learner {rank} could not join the group at {host}:{port} (generation "
                              f"{generation}): {exc}") from exc

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum ``tensor`` over the members, in place; returns it."""
        try:
            self.pg.allreduce([tensor]).wait()
        except Exception as exc:
            raise GroupBroken(f"the learner group lost a member (all-reduce failed: {exc})") from exc
        return tensor

    def sum_gradients(self, parameters: Iterable[torch.nn.Parameter], finite: bool) -> bool:
        """Sum every member's gradients (one collective); False when any member's loss was not ``finite``."""
        return sum_gradients_flat(self, parameters, finite)

    def broadcast_(self, tensors: list[torch.Tensor]) -> None:
        """Every member takes the leader's values of ``tensors`` (in place)."""
        try:
            for tensor in tensors:
                self.pg.broadcast(tensor, 0).wait()
        except Exception as exc:
            raise GroupBroken(f"the learner group lost a member (broadcast failed: {exc})") from exc

    def end(self) -> None:
        """The leader ends the group on purpose (its run stops between two steps): it marks the end in the store,
        which it keeps serving, and drops its process group, whose connections close with it. A member in a step
        the leader will not take then fails at once (measured: the moment the leader dropped it) instead of after
        :data:`GROUP_TIMEOUT_S`, which outlasted the runner's wait for its thread, and :meth:`ended` tells it why."""
        try:
            self.store.set(ended_key(self.generation), "1")
        except Exception:  # a store that failed already: the members' collectives fail all the same
            pass
        self.close()

    def ended(self) -> bool:
        """Whether the leader ended this group on purpose (asked after a collective failed; False when the
        leader's store does not answer: the leader is gone)."""
        try:
            return bool(self.store.check([ended_key(self.generation)]))
        except Exception:
            return False

    def close(self) -> None:
        self.pg = None
        self.store = None


def ended_key(generation: int) -> str:
    """Where the leader marks that it ended group ``generation`` on purpose."""
    return f"daskrl-gen{generation}-ended"


def gpu_identity(device: torch.device) -> str:
    """Which physical GPU ``device`` is, the same string in every process that uses it (the host and the device's
    UUID; the index where torch gives no UUID)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    return f"{socket.gethostname()}:{uuid if uuid is not None else index}"


def _gpu_shared(store: Any, rank: int, world: int, device: torch.device) -> bool:
    """True when two members train on one GPU (``--num-learners 2`` on a one-GPU machine): NCCL refuses that
    ("Duplicate GPU detected") at the first collective, so such a group sums through gloo, which takes CUDA
    tensors too (staged through host memory: slower, but the learners on one GPU then work)."""
    store.set(f"gpu{rank}", gpu_identity(device))
    found = [store.get(f"gpu{r}").decode() for r in range(world)]
    return len(set(found)) < world


def open_store(host: str, world: int) -> Any:
    """The leader's side of forming a group: a ``TCPStore`` on a free port of ``host`` (read ``.port``)."""
    return dist.TCPStore(host, 0, world, True, timeout=datetime.timedelta(seconds=GROUP_TIMEOUT_S),
                         wait_for_workers=False)
