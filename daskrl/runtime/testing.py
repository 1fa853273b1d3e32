"""Small real components for the runtime's tests and the bus benchmark (importable on every worker)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from daskrl.runtime.component import Component, signal, slot


class Emitter(Component):
    """Emits numbered signals and work-queue items from its own thread."""

    @signal
    def tick(self, payload: dict) -> None:
        """{"i": sequence number, "src": emitter name, "t": send time}"""

    async def burst(self, n: int, queue: str | None = None, start: int = 0) -> None:
        """Emit ``n`` ticks (or queue items) on the component thread, after anything already queued."""
        self.enqueue("_do_burst", {"n": n, "queue": queue, "start": start})

    def _do_burst(self, args: dict) -> None:
        for i in range(args["start"], args["start"] + args["n"]):
            payload = {"i": i, "src": self.name, "t": time.time()}
            if args["queue"]:
                self.put(args["queue"], payload)
            else:
                self.tick(payload)
        self.counters["emitted"] += args["n"]

    async def emit_now(self, payload: Any) -> int:
        """Emit one signal from the event loop (used to check payload validation)."""
        return self.tick(payload)

    async def write_array(self, shape: list, value: float) -> dict:
        array = self.create_array(tuple(shape), np.float32, "test")
        array.array[:] = value
        array.array.reshape(-1)[:: max(1, array.array.size // 7)] = np.arange(
            len(array.array.reshape(-1)[:: max(1, array.array.size // 7)]), dtype=np.float32
        )
        return array.desc


class Recorder(Component):
    """Records what arrives at its slots, with arrival times."""

    def on_configure(self, fail_on: int | None = None, **_: Any) -> None:
        self.items: list = []
        self.latencies: list[float] = []
        self.fail_on = fail_on

    @slot
    def on_tick(self, payload: dict) -> None:
        if self.fail_on is not None and payload.get("i") == self.fail_on:
            raise ValueError(f"refusing item {payload['i']}")
        self.latencies.append(time.time() - payload["t"])
        self.items.append([payload["src"], payload["i"]])

    async def received(self) -> list:
        return list(self.items)

    async def latency(self) -> list:
        return list(self.latencies)

    async def clear(self) -> None:
        self.items, self.latencies = [], []

    async def read_array(self, desc: dict) -> list:
        """Read a segment by its descriptor on the component thread (shared memory or comms)."""
        return (await self._run_in_thread(lambda: self.attach_array(desc).read())).tolist()

    async def attached_kind(self, desc: dict) -> str:
        return type(await self._run_in_thread(self.attach_array, desc)).__name__


class ParamWriter(Component):
    """Publishes parameter versions (a learner stand-in for the parameter-store tests and benchmark)."""

    def on_configure(self, size: int = 1000, remote: bool = False, **_: Any) -> None:
        from daskrl.runtime.params import ParameterPublisher

        self.example = {"w": np.zeros(size, np.float32), "step": np.zeros((), np.int64)}
        self.publisher = ParameterPublisher(self, self.example, remote=remote)

    async def desc(self) -> dict:
        return self.publisher.desc

    async def publish_n(self, n: int, interval_s: float = 0.002) -> None:
        self.enqueue("_do_publish", {"n": n, "interval": interval_s})

    def _do_publish(self, args: dict) -> None:
        for _ in range(args["n"]):
            version = self.publisher.version + 1
            state = {"w": np.full_like(self.example["w"], version), "step": np.asarray(version)}
            self.publisher.publish(state)
            time.sleep(args["interval"])

    async def version(self) -> int:
        return self.publisher.version


class ParamWatcher(Component):
    """Polls for newer parameter versions in its hot loop and records what it saw."""

    def on_configure(self, desc: dict | None = None, **_: Any) -> None:
        self.desc = desc
        self.seen: list[list] = []
        self.version = 0
        self.reader = None

    def run_once(self) -> bool:
        if self.reader is None:
            from daskrl.runtime.params import ParameterReader

            self.reader = ParameterReader(self, self.desc)
        got = self.reader.newer_than(self.version)
        if got is None:
            time.sleep(0.0005)
            return False
        version, state = got
        consistent = bool(np.all(state["w"] == version)) and int(state["step"]) == version
        self.seen.append([version, consistent])
        self.version = version
        return True

    async def seen_versions(self) -> list:
        return list(self.seen)
