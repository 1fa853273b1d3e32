"""Reads of another host's shared-memory arrays, started ahead and sent in bulk.

A reader that asks for another host's data one blocking round trip at a time pays, per read, the hand-over from its
thread to the worker's event loop and back, the RPC's round trip, and the wait for the owner's event loop, which
shares its process (and the GIL) with a busy component thread. :class:`RemoteReads` takes those costs off the
reader's thread and shares them among many reads: :meth:`RemoteReads.read` queues a read and returns a future at
once (the caller goes on, and waits only when it needs the data), and the worker's event loop sends the reads
queued for one owner in one ``daskrl_shm_read_many`` RPC, one RPC in flight per owner: whatever was asked for
while it was in flight goes together in the next (so a burst of k slots costs about one round trip, not k).

The reply's bytes are turned into arrays on the thread that waits (:func:`~daskrl.runtime.memory.shm.decode_parts`), not
on the event loop.
"""

from __future__ import annotations

import concurrent.futures
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from daskrl.errors import SharedMemoryError
from daskrl.runtime.memory.shm import RemoteArray, encode_index

#: at most this many bytes (estimated: one leading row of each array per read) go in one RPC; a read larger than
#: that goes alone
BULK_BYTES = 64 * 2**20


@dataclass
class _Read:
    arrays: list[RemoteArray]
    index: list
    nbytes: int
    future: concurrent.futures.Future


class RemoteReads:
    """The remote reads of one worker's components (see the module docstring). Thread-safe."""

    def __init__(self, worker: Any, bulk_bytes: int = BULK_BYTES) -> None:
        self.worker = worker
        self.bulk_bytes = bulk_bytes
        self._lock = threading.Lock()
        self._queued: dict[str, list[_Read]] = {}  # owner address -> reads not sent yet
        self._sending: set[str] = set()  # owners with a drain running on the event loop
        self.rpcs = 0  # RPCs sent, and the reads they carried: reads / rpcs is the bulk achieved
        self.reads = 0

    def read(self, arrays: list[RemoteArray], index: Any) -> concurrent.futures.Future:
        """``[array.read(index) for array in arrays]`` (arrays of one owner), started now: the future's result is
        the reply's raw parts, for :func:`~daskrl.runtime.memory.shm.decode_parts` with the same ``arrays``; it fails as
        the RPC did."""
        owners = {array.address for array in arrays}
        if len(owners) != 1:
            raise SharedMemoryError(f"a remote read needs arrays of one owner, got {sorted(owners)}")
        owner = owners.pop()
        nbytes = sum(int(np.prod(a.shape[1:], dtype=np.int64)) * a.dtype.itemsize for a in arrays)
        read = _Read(arrays, encode_index(index), nbytes, concurrent.futures.Future())
        with self._lock:
            self._queued.setdefault(owner, []).append(read)
            start = owner not in self._sending
            self._sending.add(owner)
        if start:
            self.worker.loop.add_callback(self._drain, owner)
        return read.future

    def stats(self) -> dict[str, int]:
        return {"rpcs": self.rpcs, "reads": self.reads}

    def _next_bulk(self, owner: str) -> list[_Read]:
        """The queued reads of ``owner`` that go in the next RPC (none: the drain ends)."""
        with self._lock:
            queued = self._queued.get(owner, [])
            taken, nbytes = 0, 0
            while taken < len(queued) and (taken == 0 or nbytes + queued[taken].nbytes <= self.bulk_bytes):
                nbytes += queued[taken].nbytes
                taken += 1
            bulk, self._queued[owner] = queued[:taken], queued[taken:]
            if not bulk:
                self._queued.pop(owner, None)
                self._sending.discard(owner)
            return bulk

    async def _drain(self, owner: str) -> None:
        """On the event loop: send ``owner``'s queued reads, one RPC at a time, until none is left."""
        while bulk := self._next_bulk(owner):
            try:
                reply = await self.worker.rpc(owner).daskrl_shm_read_many(
                    reads=[[array.name, read.index] for read in bulk for array in read.arrays])
                parts = iter(reply["parts"])
                results = [[next(parts) for _ in read.arrays] for read in bulk]
            except Exception as exc:  # the owner is gone, or no longer has the segment: every read of it fails
                for read in bulk:
                    _settle(read.future, exception=exc)
                continue
            self.rpcs += 1
            self.reads += len(bulk)
            for read, result in zip(bulk, results, strict=True):
                _settle(read.future, result=result)


def _settle(future: concurrent.futures.Future, result: Any = None, exception: BaseException | None = None) -> None:
    if future.done():  # (nobody cancels these; a reader that gave up leaves it)
        return
    if exception is not None:
        future.set_exception(exception)
    else:
        future.set_result(result)

