"""Small real components for the runtime's tests and the bus benchmark (importable on every worker).

Each is configured like a production component, with a frozen setup (``None`` where it needs none).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from daskrl.runtime.actors.component import Component
from daskrl.runtime.actors.signals import signal, signal_topic, slot
from daskrl.runtime.memory.params import ParameterPublisher, ParameterReader


class Emitter(Component):
    """Emits numbered signals and work-queue items from its own thread."""

    @signal
    def tick(self, payload: dict) -> None:
        """{"i": sequence number, "src": emitter name, "t": send time}"""

    async def burst(self, n: int, queue: str | None = None, start: int = 0) -> None:
        """Emit ``n`` ticks (or queue items) on the component thread, after anything already queued."""
        self.deliver("_do_burst", {"n": n, "queue": queue, "start": start})

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


@dataclass(frozen=True)
class RecorderSetup:
    fail_on: int | None = None  # the item number whose delivery raises (a failing slot)
    work_s: float = 0.0  # seconds each delivery keeps the component's thread busy (a learner's step, say)


class Recorder(Component):
    """Records what arrives at its slots, with arrival times."""

    def on_configure(self, setup: RecorderSetup | None) -> None:
        setup = setup or RecorderSetup()
        self.items: list = []
        self.latencies: list[float] = []
        self.fail_on, self.work_s = setup.fail_on, setup.work_s

    @slot
    def on_tick(self, payload: dict) -> None:
        if self.fail_on is not None and payload.get("i") == self.fail_on:
            raise ValueError(f"refusing item {payload['i']}")
        if self.work_s:
            time.sleep(self.work_s)
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
        return (await self.on_own_thread(lambda: self.attach_array(desc).read())).tolist()

    async def attached_kind(self, desc: dict) -> str:
        return type(await self.on_own_thread(self.attach_array, desc)).__name__


@dataclass(frozen=True)
class ParamWriterSetup:
    size: int = 1000  # float32 weights per version
    remote: bool = False  # also publish over Dask comms


class ParamWriter(Component):
    """Publishes parameter versions (a learner stand-in for the parameter-store tests and benchmark)."""

    def on_configure(self, setup: ParamWriterSetup) -> None:
        self.example = {"w": np.zeros(setup.size, np.float32), "step": np.zeros((), np.int64)}
        self.publisher = ParameterPublisher(self, self.example, remote=setup.remote)

    async def desc(self) -> dict:
        return self.publisher.desc

    async def publish_n(self, n: int, interval_s: float = 0.002) -> None:
        self.deliver("_do_publish", {"n": n, "interval": interval_s})

    def _do_publish(self, args: dict) -> None:
        for _ in range(args["n"]):
            version = self.publisher.version + 1
            state = {"w": np.full_like(self.example["w"], version), "step": np.asarray(version)}
            self.publisher.publish(state)
            time.sleep(args["interval"])

    async def version(self) -> int:
        return self.publisher.version


class ParamWatcher(Component):
    """Polls for newer parameter versions in its hot loop and records what it saw; its setup is the parameter
    block's description."""

    def on_configure(self, setup: dict) -> None:
        self.desc = setup
        self.seen: list[list] = []
        self.version = 0
        self.reader = None

    def run_once(self) -> bool:
        if self.reader is None:
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


class Bencher(Component):
    """Drives the bus benchmark from inside a worker: paced signals, shared-memory and actor-argument handoffs."""

    @signal
    def handoff(self, payload: dict) -> None:
        """{"desc": segment description, "t0": time the write started}"""

    async def paced(self, n: int, interval_s: float) -> None:
        self.deliver("_do_paced", {"n": n, "interval": interval_s})

    def _do_paced(self, args: dict) -> None:
        # publishing directly, not through self.tick: the benchmark measures the bus, not the signal call's own cost
        bus, interval, topic = self.bus, args["interval"], signal_topic(self.bus_name, "tick")
        for i in range(args["n"]):
            bus.publish(topic, {"i": i, "src": self.name, "t": time.time()})
            if interval:
                time.sleep(interval)

    @signal
    def tick(self, payload: dict) -> None:
        """paced ticks for latency"""

    async def shm_handoff(self, nbytes: int, reps: int) -> None:
        self.deliver("_do_shm_handoff", {"nbytes": nbytes, "reps": reps})

    def _do_shm_handoff(self, args: dict) -> None:
        source = np.random.default_rng(0).integers(0, 255, args["nbytes"], dtype=np.uint8)
        segment = self.create_array((args["nbytes"],), np.uint8, "bench")
        for _ in range(args["reps"]):
            t0 = time.time()
            np.copyto(segment.array, source)  # the producer writes its trajectory in place
            self.handoff({"desc": segment.desc, "t0": t0})
            time.sleep(0.05)

    async def actor_handoff(self, nbytes: int, reps: int, address: str, key: str) -> list:
        """Hand the same bytes to the receiver actor as a method argument; returns per-call seconds."""
        from distributed.actor import Actor

        receiver = Actor(Receiver, address, key, worker=self.worker)
        source = np.random.default_rng(0).integers(0, 255, nbytes, dtype=np.uint8)
        out = []
        for _ in range(reps):
            data = source.copy()  # a fresh array each time, as a producer would send
            t0 = time.time()
            arrival = await receiver.take(data, t0)
            out.append(arrival - t0)
        return out


class Receiver(Component):
    """The receiving side of :class:`Bencher`: records one-way times."""

    def on_configure(self, setup: None) -> None:
        self.delays: list[float] = []
        self.count = 0
        self.first_sent = None
        self.last_arrival = None
        self._attached: dict[str, Any] = {}

    @slot
    def on_tick(self, payload: dict) -> None:
        now = time.time()
        if self.first_sent is None:
            self.first_sent = payload["t"]
        self.last_arrival = now
        self.count += 1
        self.delays.append(now - payload["t"])

    @slot
    def on_handoff(self, payload: dict) -> None:
        desc = payload["desc"]
        array = self._attached.get(desc["name"])
        if array is None:
            array = self._attached[desc["name"]] = self.attach_array(desc)
        view = array.array if hasattr(array, "array") else array.read()
        assert view.nbytes == desc["shape"][0]
        self.delays.append(time.time() - payload["t0"])

    def take(self, data: np.ndarray, t0: float) -> float:
        assert data.nbytes > 0
        return time.time()

    async def results(self, with_delays: bool = False) -> dict:
        out = {"count": self.count, "handoffs": len(self.delays) - self.count,
               "first_sent": self.first_sent, "last_arrival": self.last_arrival}
        if with_delays:
            out["delays"] = list(self.delays)
        return out

    async def reset(self) -> None:
        self.on_configure(None)

    async def noop(self, i: int) -> int:
        return i


@dataclass(frozen=True)
class SlowSetup:
    seconds: float = 0.0  # spent in configure
    start_s: float = 0.0  # spent in on_start
    fail: bool = False  # raise in configure instead


class SlowToConfigure(Component):
    """Takes ``seconds`` to configure, as a rollout worker building 32 Atari envs does (14 s here), then
    ``start_s`` in ``on_start`` before its loop turns (resetting them: 0.6 s)."""

    def on_configure(self, setup: SlowSetup) -> None:
        began = time.time()
        time.sleep(setup.seconds)
        if setup.fail:
            raise RuntimeError("this component was told to fail in configure")
        self.span = (began, time.time())
        self.start_s = setup.start_s

    async def configure_span(self) -> tuple[float, float]:
        """(began, ended) of configure, in wall-clock seconds: comparable across processes on one host."""
        return self.span

    def on_start(self) -> None:
        time.sleep(self.start_s)
