"""Versioned parameters: the learner publishes a state dict and gets a version; readers take the newest.

Same host: one shared-memory block holds the weights, and a small header holds a sequence counter and the
version (a seqlock: the writer makes the counter odd while it copies, readers retry if it changed), so a
reader's check for a new version is one integer read and costs no message at all.
Other hosts: each version is also scattered from the learner's worker (``hash=False``, the data stays there)
and its future is published in a Dask ``Variable``; readers pull it peer to peer. The two previous futures
are kept alive so a slow reader never finds its version gone.
A host relay (``--param-relay auto``, :mod:`daskrl.sampling.policies.param_relay`) spares the scheduler those polls: told of
each version by a bus message, it fetches the version once from the learner's worker (:func:`fetch`, one
consistent copy under the seqlock) into a :class:`RelayBlock` on its own host, laid out as the learner's block plus
a heartbeat; readers there read it in place, and fall back to the Variable while its heartbeat is stale.

Values are plain dicts of numpy arrays (the runtime never imports torch models).
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import numpy as np

from daskrl.runtime.actors.signals import signal_topic
from daskrl.runtime.memory import shm

#: a relay block whose heartbeat is older than this is presumed dead: its host's readers take the direct path
RELAY_STALE_S = 1.0
#: seconds a sampler waits for a version over comms; one no worker holds is skipped, never waited out
REMOTE_READ_TIMEOUT_S = 30.0
#: copies of each parameter block (by its data segment's name) that this process served to relays
_served: dict[str, int] = {}


def _layout(state: dict[str, np.ndarray]) -> tuple[list, int]:
    layout, offset = [], 0
    for key, value in state.items():
        value = np.asarray(value)
        offset = (offset + 63) // 64 * 64  # cache-line aligned views
        layout.append([key, offset, list(value.shape), value.dtype.str])
        offset += value.nbytes
    return layout, max(offset, 1)


class ParameterPublisher:
    """Learner side. ``publish(state)`` returns the new version (1, 2, ...)."""

    def __init__(self, component, example: dict[str, np.ndarray], remote: bool = False) -> None:
        self.component = component
        self.layout, nbytes = _layout(example)
        self.header = component.create_array((2,), np.int64, "params_hdr")  # [seq, version]
        self.data = component.create_array((nbytes,), np.uint8, "params")
        self.version = 0
        self.remote = remote or shm.force_comms()
        # one variable per block: a learner publishes its policy's block and each self-play snapshot's, and a reader
        # on another host of a snapshot must get the snapshot's versions, not the newest policy's
        self.variable_name = f"daskrl-params-{component.run_id}-{component.name}-{self.data.name}"
        self._futures: deque = deque(maxlen=3)
        #: the bus topic relays take new versions from (the learner declares the signal ``params_published``)
        self.topic = signal_topic(component.bus_name, "params_published")

    @property
    def desc(self) -> dict:
        return {"header": self.header.desc, "data": self.data.desc, "layout": self.layout,
                "variable": self.variable_name if self.remote else None}

    def publish(self, state: dict[str, np.ndarray]) -> int:
        header, buf = self.header.array, self.data.array
        header[0] += 1  # odd: write in progress
        for key, offset, _shape, dtype in self.layout:
            value = np.ascontiguousarray(state[key], dtype=dtype)
            buf[offset:offset + value.nbytes] = value.reshape(-1).view(np.uint8)
        self.version += 1
        header[1] = self.version
        header[0] += 1  # even: consistent
        if self.remote:
            self._publish_remote(state)
        self._notify_relays()
        return self.version

    @property
    def served(self) -> int:
        """Copies of this block fetched by relays on other hosts (one per version per relay, at most)."""
        return _served.get(self.data.name, 0)

    def _notify_relays(self) -> None:
        """Tell the relays (if any are wired) that a version is out: one bus message, no scheduler round trip. A
        run without relays has no route for the topic, so this costs one dict look-up."""
        bus = self.component.bus
        route = bus.routes.get(self.topic)
        if route and route["subs"]:
            bus.publish(self.topic, {"block": self.data.name, "version": self.version})

    def publish_remote_now(self, state: dict[str, np.ndarray]) -> None:
        """Publish the current version over comms too (the publisher just became ``remote``)."""
        self._publish_remote(state)

    def _publish_remote(self, state: dict[str, np.ndarray]) -> None:
        from distributed import Variable, get_client

        client = get_client()
        payload = {"version": self.version, "state": {k: np.asarray(v) for k, v in state.items()}}
        [future] = client.scatter([payload], hash=False)
        self._futures.append(future)
        Variable(self.variable_name, client=client).set(future)


class ParameterReader:
    """Reader side (rollout or inference worker). ``newer_than(v)`` -> ``(version, state)`` or None.

    Each new version taken counts in the component's counters as ``params_shm_reads`` (in place, the learner's own
    block on the same host), ``params_relay_reads`` (in place, the block of this host's relay) or
    ``params_comms_reads`` (pulled over Dask comms from another host: no relay, or its heartbeat is stale), so a
    run's statistics show which path its parameters took.
    """

    #: a reader on another host asks the scheduler for the newest version at most this often (each check is a
    #: round trip to the scheduler: asking on every env step would cost the sampler more than the envs do)
    remote_poll_s = 0.05

    def __init__(self, component, desc: dict) -> None:
        """``desc``: the publisher's :attr:`ParameterPublisher.desc`, with ``relays`` ({host: relay block desc})
        where the run has relays."""
        self.component = component
        self.layout = desc["layout"]
        here = shm.host_of(component.worker.address)
        self.local = desc["data"]["host"] == here and not shm.force_comms()
        self.relay: RelayView | None = None
        if self.local:
            self.header = shm.attach(desc["header"], component.worker.address)
            self.data = shm.attach(desc["data"], component.worker.address)
            return
        if not desc.get("variable"):
            raise shm.SharedMemoryError(
                "parameters live on another host but the publisher was not created with remote=True"
            )
        from distributed import Variable, get_client

        self._variable = Variable(desc["variable"], client=get_client())
        self._last_key = None
        self._next_poll = 0.0
        self.relay = RelayView.attach(component, (desc.get("relays") or {}).get(here))

    def newer_than(self, version: int) -> tuple[int, dict[str, np.ndarray]] | None:
        if self.local:
            block, way = self, "params_shm_reads"
        elif self.relay is not None and self.relay.fresh():
            block, way = self.relay, "params_relay_reads"
        else:  # no relay on this host, or it is presumed dead: the direct path (counts its own reads)
            return self._read_remote(version)
        got = read_block(block.header.array, block.data.array, version)
        if got is None:
            return None
        self.component.counters[way] += 1
        return got[0], self._unpack(got[1])

    def first(self, timeout: float = 60.0) -> tuple[int, dict[str, np.ndarray]]:
        """The first version, waited for: a sampler that has no weights of its own (the numpy path builds no model)
        acts from it. The learner publishes its initial weights as version 1 when it is created, so on its host
        this returns at once; on another host a relay may not have fetched it yet, and the direct path serves."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.newer_than(0)
            if got is None and not self.local and self.relay is not None:
                got = self._read_remote(0)
            if got is not None:
                return got
            if time.monotonic() > deadline:
                raise TimeoutError(f"no parameters from the learner within {timeout:.0f} s (is its worker alive? see "
                                   "the learner's log lines)")
            time.sleep(0.01)

    def _unpack(self, raw: np.ndarray) -> dict[str, np.ndarray]:
        out = {}
        for key, offset, shape, dtype in self.layout:
            dt = np.dtype(dtype)
            count = int(np.prod(shape)) if shape else 1
            out[key] = raw[offset:offset + count * dt.itemsize].view(dt).reshape(shape)
        return out

    def _read_remote(self, version: int) -> tuple[int, dict[str, Any]] | None:
        now = time.monotonic()
        if version >= 0 and now < self._next_poll:
            return None
        self._next_poll = now + self.remote_poll_s
        try:
            future = self._variable.get(timeout=5)
        except TimeoutError:  # nothing published yet: the Variable has no value to hand out
            return None
        except Exception as exc:  # the scheduler did not answer: tried again at the next poll, but told
            self.component.incidents.note("params-read-failed", exc)
            return None
        if future.key == self._last_key:
            return None
        if not self._held(future):  # its publisher's worker died (a learner restarting): a later poll sees the
            return None  # new learner's version, where waiting for this one would stall sampling for the timeout
        try:
            payload = future.result(timeout=REMOTE_READ_TIMEOUT_S)
        except Exception as exc:  # the publisher's worker is gone (a restarting learner): tried again later
            self.component.incidents.note("params-read-failed", exc)
            return None
        self._last_key = future.key
        if payload["version"] <= version:
            return None
        self.component.counters["params_comms_reads"] += 1
        return payload["version"], payload["state"]

    def _held(self, future: Any) -> bool:
        """Whether some worker still holds the version ``future`` names. Versions are scattered, never computed:
        once the learner's worker is gone nothing can make its last one again, and ``result()`` would wait out its
        whole timeout."""
        try:
            holders = self._variable.client.who_has([future])
        except Exception as exc:  # the scheduler did not answer: tried again at the next poll, but told
            self.component.incidents.note("params-read-failed", exc)
            return False
        if holders.get(future.key):
            return True
        self._last_key = future.key  # never readable again: not asked about twice
        self.component.incidents.note("params-version-lost", f"no worker holds {future.key}")
        return False


def read_block(header: np.ndarray, data: np.ndarray, version: int) -> tuple[int, np.ndarray] | None:
    """A consistent copy of a parameter block's bytes if its version is newer than ``version`` (the seqlock: retry
    while the writer holds the counter odd, or when it moved during the copy)."""
    for _ in range(1000):
        seq = int(header[0])
        if seq % 2:
            time.sleep(0.0001)
            continue
        current = int(header[1])
        if current <= version:
            return None
        raw = data.copy()
        if int(header[0]) == seq:
            return current, raw
    raise TimeoutError("parameter block stayed locked for 1000 tries (writer died mid-publish?)")


class RelayView:
    """A reader's view of its host's relay block: read in place while the relay's heartbeat is fresh."""

    def __init__(self, header: shm.SharedArray, data: shm.SharedArray) -> None:
        self.header, self.data = header, data

    @classmethod
    def attach(cls, component, desc: dict | None) -> RelayView | None:
        """The relay block ``desc`` (None: this host has no relay). A block that is gone (its relay died and the
        segment was swept) is told about, and the reader takes the direct path until it is given a new one."""
        if desc is None:
            return None
        try:
            return cls(shm.attach(desc["header"], component.worker.address),
                       shm.attach(desc["data"], component.worker.address))
        except shm.SharedMemoryError as exc:
            component.incidents.note("relay-block-gone", exc)
            return None

    def fresh(self) -> bool:
        """Whether the relay beat within :data:`RELAY_STALE_S` (CLOCK_MONOTONIC is one clock per host)."""
        return time.monotonic_ns() - int(self.header.array[2]) < RELAY_STALE_S * 1e9


class RelayBlock:
    """A relay's copy of one parameter block on its host: the learner's layout, header ``[seq, version,
    heartbeat ns]``, written under the same seqlock."""

    def __init__(self, component, source: dict) -> None:
        """``source``: the learner's block (:attr:`ParameterPublisher.desc`)."""
        self.source = source
        self.fetched = -1  # the source's version last copied here (-1: none since following this source)
        self.header = component.create_array((3,), np.int64, "relay_hdr")
        self.data = component.create_array((int(source["data"]["shape"][0]),), np.uint8, "relay")
        self.beat()

    def follow(self, source: dict) -> None:
        """Copy from ``source`` from now on (a restarted learner's new block, whose versions may go back)."""
        self.source, self.fetched = source, -1

    @property
    def version(self) -> int:
        return int(self.header.array[1])

    @property
    def desc(self) -> dict:
        return {"header": self.header.desc, "data": self.data.desc}

    def beat(self) -> None:
        self.header.array[2] = time.monotonic_ns()

    def write(self, version: int, raw: bytes) -> None:
        header = self.header.array
        header[0] += 1  # odd: write in progress
        self.data.array[:] = np.frombuffer(raw, dtype=np.uint8)
        header[1] = version
        header[0] += 1
        header[2] = time.monotonic_ns()
        self.fetched = version


def fetch(rpc, source: dict, have: int) -> tuple[int, bytes] | None:
    """The newest version of the learner's block ``source`` and its bytes, if newer than ``have``: one RPC to the
    learner's worker (``rpc(address, op, **kwargs)``), tried again while the learner was mid-publish."""
    for _ in range(100):
        reply = rpc(source["data"]["address"], "daskrl_params_fetch", header=source["header"]["name"],
                    data=source["data"]["name"], have=have)
        if reply["version"] <= max(have, 0):
            return None
        if "data" in reply:
            return reply["version"], reply["data"]
        time.sleep(0.001)
    raise TimeoutError("the learner's parameter block stayed locked for 100 fetches")


def serve_fetch(header: str, data: str, have: int) -> dict:
    """Owner side of :func:`fetch` (a worker RPC handler, on the event loop): the block's bytes if its version is
    newer than ``have`` and the copy is consistent; only ``version`` when it is not newer or the writer was busy."""
    hdr, buf = shm.owned_array(header).array, shm.owned_array(data).array
    seq, version = int(hdr[0]), int(hdr[1])
    if version <= max(have, 0) or seq % 2:  # (version 0: nothing published yet)
        return {"version": version}
    raw = buf.tobytes()
    if int(hdr[0]) != seq:
        return {"version": version}
    _served[data] = _served.get(data, 0) + 1
    return {"version": version, "data": raw}
