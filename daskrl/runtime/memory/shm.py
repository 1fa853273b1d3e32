"""Shared-memory numpy arrays with one owner per segment, and a remote fallback over Dask comms.

Why not ``multiprocessing.shared_memory.SharedMemory``: on Python 3.11 every attaching process registers the
segment with a resource tracker that unlinks it when that process exits (under the owner's feet), and
unregistering in a LocalCluster drops the owner's registration too (a leak). So segments here are opened with
the POSIX calls directly: the owner creates and unlinks, readers attach untracked, and every name carries the
run id and the owner's pid (``daskrl_<run>_<pid>_<n>``) so a sweep can remove what dead processes left behind.

Readers on another host (or on this host with ``force_comms``) get a :class:`RemoteArray` with the same
``read``/``write`` API that moves the bytes through an RPC to the owner's worker.
"""

from __future__ import annotations

import _posixshmem
import itertools
import mmap
import os
import socket
import threading
import weakref
from typing import Any

import numpy as np

from daskrl.errors import SharedMemoryError
from daskrl.runtime.cleanup.segments import (  # noqa: F401  (re-exported: the shm API)
    SHM_DIR,
    list_segments,
    owner_pid,
    pid_alive,
    segment_name,
    sweep,
    unlink_quietly,
)

_counter = itertools.count()
_owned: dict[str, SharedArray] = {}  # segments this process created, by name
_owned_lock = threading.Lock()


def force_comms() -> bool:
    """True when ``DASKRL_FORCE_COMMS=1``: same-host readers use the comms path too (tests, benchmarks)."""
    return os.environ.get("DASKRL_FORCE_COMMS", "") not in ("", "0", "false", "False")


def host_of(address: str | None) -> str:
    """The host part of a Dask address (``tcp://10.0.0.2:4567`` -> ``10.0.0.2``; an in-process worker's
    ``inproc://10.0.0.2/<pid>/<n>`` -> ``10.0.0.2``); segments never cross hosts."""
    if not address:
        return socket.gethostname()
    scheme, _, rest = address.rpartition("://")
    if scheme == "inproc":
        return rest.split("/", 1)[0]
    return rest.rsplit(":", 1)[0].strip("[]")


class SharedArray:
    """A numpy array in a shared-memory segment. Create with :meth:`create` (owner) or :func:`attach`.

    ``desc`` is a msgpack-native description that other processes pass to :func:`attach`.
    """

    def __init__(self, name: str, shape: tuple[int, ...], dtype: str, owner: bool, address: str | None, host: str):
        self.name = name
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.owner = owner
        self.address = address
        self.host = host
        nbytes = max(int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize, 1)
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if owner else 0)
        try:
            fd = _posixshmem.shm_open("/" + name, flags, 0o600)
        except FileExistsError as exc:
            raise SharedMemoryError(f"shared-memory segment {name!r} already exists") from exc
        except FileNotFoundError as exc:
            raise SharedMemoryError(
                f"shared-memory segment {name!r} does not exist (its owner has stopped or died); "
                "attach only to segments of a running component"
            ) from exc
        try:
            if owner:
                os.ftruncate(fd, nbytes)
            self._mmap = mmap.mmap(fd, nbytes)
        except OSError as exc:
            if owner:
                _posixshmem.shm_unlink("/" + name)
            raise SharedMemoryError(
                f"cannot map {nbytes / 2**20:.1f} MiB of shared memory for {name!r}: {exc} "
                f"(is {SHM_DIR} large enough? `df -h {SHM_DIR}`)"
            ) from exc
        finally:
            os.close(fd)
        self.array: np.ndarray = np.frombuffer(self._mmap, dtype=self.dtype, count=int(np.prod(self.shape)))
        self.array = self.array.reshape(self.shape)
        self._closed = False
        if owner:
            with _owned_lock:
                _owned[name] = self
            weakref.finalize(self, unlink_quietly, name)

    @classmethod
    def create(
        cls, shape: tuple[int, ...], dtype: Any, run_id: str, tag: str = "arr", address: str | None = None
    ) -> SharedArray:
        """Create a new segment owned by this process; ``address`` is the Dask worker that serves remote reads."""
        name = segment_name(run_id, os.getpid(), f"{tag}{next(_counter)}")
        return cls(name, shape, np.dtype(dtype).str, owner=True, address=address, host=host_of(address))

    @property
    def desc(self) -> dict:
        return {
            "name": self.name,
            "shape": list(self.shape),
            "dtype": self.dtype.str,
            "address": self.address,
            "host": self.host,
        }

    def read(self, index: Any = slice(None)) -> np.ndarray:
        """A copy of ``array[index]`` (the remote path must copy, so the local one does too)."""
        return np.array(self.array[index], copy=True)

    def write(self, index: Any, value: Any) -> None:
        self.array[index] = value

    def close(self) -> None:
        """Drop the mapping; the owner also unlinks the segment."""
        if self._closed:
            return
        self._closed = True
        self.array = np.empty(0, dtype=self.dtype)
        try:
            self._mmap.close()
        except BufferError:
            pass  # a view still exists somewhere; the mapping goes when it does
        if self.owner:
            with _owned_lock:
                _owned.pop(self.name, None)
            unlink_quietly(self.name)

    def __repr__(self) -> str:
        return f"SharedArray({self.name!r}, shape={self.shape}, dtype={self.dtype}, owner={self.owner})"


class RemoteArray:
    """The :class:`SharedArray` API for a reader on another host: every read/write is an RPC to the owner.

    ``rpc_call(address, op, **kwargs)`` performs one blocking RPC (supplied by the caller's Dask context).
    """

    def __init__(self, desc: dict, rpc_call):
        self.name = desc["name"]
        self.shape = tuple(desc["shape"])
        self.dtype = np.dtype(desc["dtype"])
        self.address = desc["address"]
        self.host = desc["host"]
        self.owner = False
        self._rpc = rpc_call
        if not self.address:
            raise SharedMemoryError(f"segment {self.name!r} has no owner address, so it cannot be read remotely")

    def read(self, index: Any = slice(None)) -> np.ndarray:
        reply = self._rpc(self.address, "daskrl_shm_read", name=self.name, index=encode_index(index))
        return np.frombuffer(reply["data"], dtype=self.dtype).reshape(tuple(reply["shape"])).copy()

    def write(self, index: Any, value: Any) -> None:
        value = np.asarray(value, dtype=self.dtype)  # (ascontiguousarray would turn a scalar into shape (1,))
        self._rpc(
            self.address,
            "daskrl_shm_write",
            name=self.name,
            index=encode_index(index),
            data=np.ascontiguousarray(value).tobytes(),
            shape=list(value.shape),
        )

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"RemoteArray({self.name!r} at {self.address})"


def attach(desc: dict, local_address: str | None = None, rpc_call=None) -> SharedArray | RemoteArray:
    """Open the array described by ``desc``: mapped in place on the same host, over comms otherwise."""
    same_host = desc["host"] == host_of(local_address)
    if same_host and not force_comms():
        return SharedArray(desc["name"], tuple(desc["shape"]), desc["dtype"], False, desc["address"], desc["host"])
    if rpc_call is None:
        raise SharedMemoryError(f"segment {desc['name']!r} lives on {desc['host']}; reading it needs a Dask worker")
    return RemoteArray(desc, rpc_call)


def encode_index(index: Any) -> list:
    """A msgpack-native form of an int / slice / tuple of them, for remote reads and writes."""
    items = index if isinstance(index, tuple) else (index,)
    out = []
    for item in items:
        if isinstance(item, slice):
            out.append(["s", item.start, item.stop, item.step])
        elif isinstance(item, (list, np.ndarray)):
            out.append(["l", [int(i) for i in item]])
        else:
            out.append(["i", int(item)])
    return out


def decode_index(encoded: list) -> tuple:
    items = []
    for kind, *rest in encoded:
        if kind == "s":
            items.append(slice(*rest))
        elif kind == "l":
            items.append(np.asarray(rest[0], dtype=np.int64))
        else:
            items.append(int(rest[0]))
    return tuple(items)


def serve_read(name: str, index: list) -> dict:
    """Owner side of :meth:`RemoteArray.read` (a worker RPC handler)."""
    arr = owned_array(name)
    data = np.ascontiguousarray(arr.array[decode_index(index)])
    return {"data": data.tobytes(), "shape": list(data.shape)}


def read_together(arrays: list[RemoteArray], index: Any) -> list[np.ndarray]:
    """``array.read(index)`` of several arrays of one owner in one RPC (a trajectory slot's fields: one round trip
    instead of one per field, which is what a learner pays per slot from another host)."""
    owners = {array.address for array in arrays}
    if len(owners) != 1:
        raise SharedMemoryError(f"read_together needs arrays of one owner, got {sorted(owners)}")
    reply = arrays[0]._rpc(arrays[0].address, "daskrl_shm_read_many",
                           reads=[[array.name, encode_index(index)] for array in arrays])
    return decode_parts(arrays, reply["parts"])


def decode_parts(arrays: list[RemoteArray], parts: list[dict]) -> list[np.ndarray]:
    """The arrays of a ``daskrl_shm_read_many`` reply's parts, one per array (writable copies, as
    :meth:`RemoteArray.read` gives)."""
    return [np.frombuffer(part["data"], dtype=array.dtype).reshape(tuple(part["shape"])).copy()
            for array, part in zip(arrays, parts, strict=True)]


def serve_read_many(reads: list) -> dict:
    """Owner side of :func:`read_together`."""
    return {"parts": [serve_read(name, index) for name, index in reads]}


def serve_write(name: str, index: list, data: bytes, shape: list) -> None:
    """Owner side of :meth:`RemoteArray.write`."""
    arr = owned_array(name)
    arr.array[decode_index(index)] = np.frombuffer(data, dtype=arr.dtype).reshape(tuple(shape))


def owned_array(name: str) -> SharedArray:
    """A segment this process owns, by name (for the worker's RPC handlers)."""
    with _owned_lock:
        arr = _owned.get(name)
    if arr is None:
        raise SharedMemoryError(f"segment {name!r} is not owned by this process (its owner stopped?)")
    return arr


def close_owned() -> int:
    """Close and unlink every segment this process owns (worker teardown, process exit). Returns the count."""
    with _owned_lock:
        arrays = list(_owned.values())
    for arr in arrays:
        arr.close()
    return len(arrays)
