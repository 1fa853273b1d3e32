"""Versioned parameters: the learner publishes a state dict and gets a version; readers take the newest.

Same host: one shared-memory block holds the weights, and a small header holds a sequence counter and the
version (a seqlock: the writer makes the counter odd while it copies, readers retry if it changed), so a
reader's check for a new version is one integer read and costs no message at all.
Other hosts: each version is also scattered from the learner's worker (``hash=False``, the data stays there)
and its future is published in a Dask ``Variable``; readers pull it peer to peer. The two previous futures
are kept alive so a slow reader never finds its version gone.

Values are plain dicts of numpy arrays (the runtime never imports torch models).
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import numpy as np

from daskrl.runtime import shm


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
        self.variable_name = f"daskrl-params-{component.run_id}-{component.name}"
        self._futures: deque = deque(maxlen=3)

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
        return self.version

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

    Each new version taken counts in the component's counters as ``params_shm_reads`` (in place, same host) or
    ``params_comms_reads`` (pulled over Dask comms from another host), so a run's statistics show which path
    its parameters took.
    """

    #: a reader on another host asks the scheduler for the newest version at most this often (each check is a
    #: round trip to the scheduler: asking on every env step would cost the sampler more than the envs do)
    remote_poll_s = 0.05

    def __init__(self, component, desc: dict) -> None:
        self.component = component
        self.layout = desc["layout"]
        same_host = desc["data"]["host"] == shm.host_of(component.worker.address)
        self.local = same_host and not shm.force_comms()
        if self.local:
            self.header = shm.attach(desc["header"], component.worker.address)
            self.data = shm.attach(desc["data"], component.worker.address)
        else:
            if not desc.get("variable"):
                raise shm.SharedMemoryError(
                    "parameters live on another host but the publisher was not created with remote=True"
                )
            from distributed import Variable, get_client

            self._variable = Variable(desc["variable"], client=get_client())
            self._last_key = None
            self._next_poll = 0.0

    def newer_than(self, version: int) -> tuple[int, dict[str, np.ndarray]] | None:
        got = self._read_local(version) if self.local else self._read_remote(version)
        if got is not None:
            self.component.counters["params_shm_reads" if self.local else "params_comms_reads"] += 1
        return got

    def _read_local(self, version: int) -> tuple[int, dict[str, np.ndarray]] | None:
        header = self.header.array
        for _ in range(1000):
            seq = int(header[0])
            if seq % 2:
                time.sleep(0.0001)
                continue
            current = int(header[1])
            if current <= version:
                return None
            raw = self.data.array.copy()
            if int(header[0]) == seq:
                return current, self._unpack(raw)
        raise TimeoutError("parameter block stayed locked for 1000 tries (writer died mid-publish?)")

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
        try:
            payload = future.result(timeout=30)
        except Exception as exc:  # the publisher's worker is gone (a restarting learner): tried again later
            self.component.incidents.note("params-read-failed", exc)
            return None
        self._last_key = future.key
        if payload["version"] <= version:
            return None
        return payload["version"], payload["state"]
