"""Parameter relays per host (``--param-relay auto``): the relay block on shared memory in this process, with no
cluster (daskrl/runtime/memory/params.py). A relay copies each version once and readers see it whole, a fetch in
the middle of a publish is not served torn, and a stale heartbeat (or a block a dead relay left locked) sends
readers to the direct path."""

from __future__ import annotations

import time

import numpy as np
import pytest

from daskrl.runtime.memory import params
from daskrl.runtime.memory.params import RelayBlock, RelayView, fetch, read_block, serve_fetch
from daskrl.runtime.memory.shm import SharedArray, list_segments


class ArrayOwner:
    """What a relay block needs of its component: shared arrays it owns, closed at the end (a component's
    ``create_array`` does the same on a worker)."""

    run_id = "relaytest"

    def __init__(self) -> None:
        self.arrays: list[SharedArray] = []

    def create_array(self, shape: tuple[int, ...], dtype, tag: str) -> SharedArray:
        array = SharedArray.create(shape, dtype, self.run_id, tag, address="tcp://127.0.0.1:1")
        self.arrays.append(array)
        return array

    def close(self) -> None:
        for array in self.arrays:
            array.close()


@pytest.fixture
def owner():
    made = ArrayOwner()
    yield made
    made.close()
    assert list_segments(ArrayOwner.run_id) == []


def learner_block(owner: ArrayOwner, nbytes: int) -> tuple[SharedArray, SharedArray, dict]:
    """A learner-like block ``[seq, version]`` + bytes, and its description."""
    header, data = owner.create_array((2,), np.int64, "hdr"), owner.create_array((nbytes,), np.uint8, "params")
    return header, data, {"header": header.desc, "data": data.desc}


def publish(header: SharedArray, data: SharedArray, version: int, fill: int) -> None:
    header.array[0] += 1
    data.array[:] = fill
    header.array[1] = version
    header.array[0] += 1


def test_a_relay_block_copies_each_version_once_and_readers_see_it_whole(owner):
    header, data, source = learner_block(owner, 256)
    served: list[str] = []

    def rpc(address: str, op: str, **kwargs):  # the worker's handler, called in place
        assert op == "daskrl_params_fetch" and address == source["data"]["address"]
        served.append(kwargs["data"])
        return serve_fetch(**kwargs)

    relay = RelayBlock(owner, source)
    assert fetch(rpc, source, relay.fetched) is None  # nothing published yet (version 0)
    publish(header, data, 1, 7)
    relay.write(*fetch(rpc, source, relay.fetched))
    assert relay.version == 1 and relay.fetched == 1
    assert fetch(rpc, source, relay.fetched) is None, "an unchanged version must not be copied again"
    before = params._served.get(data.name, 0)
    publish(header, data, 2, 9)
    relay.write(*fetch(rpc, source, relay.fetched))
    assert params._served[data.name] == before + 1
    view = RelayView(relay.header, relay.data)
    version, raw = read_block(view.header.array, view.data.array, 1)
    assert version == 2 and (raw == 9).all()
    assert read_block(view.header.array, view.data.array, 2) is None


def test_a_fetch_mid_publish_is_not_served_torn(owner):
    header, data, source = learner_block(owner, 64)
    publish(header, data, 3, 1)
    header.array[0] += 1  # the learner is writing version 4
    assert serve_fetch(source["header"]["name"], source["data"]["name"], 0) == {"version": 3}
    calls = []

    def rpc(address: str, op: str, **kwargs):
        calls.append(1)
        if len(calls) == 3:  # the writer finishes while the relay retries
            data.array[:] = 2
            header.array[1] = 4
            header.array[0] += 1
        return serve_fetch(**kwargs)

    version, raw = fetch(rpc, source, 0)
    assert version == 4 and np.frombuffer(raw, np.uint8).tolist() == [2] * 64 and len(calls) == 3


def test_a_stale_heartbeat_sends_readers_to_the_direct_path(owner):
    _, _, source = learner_block(owner, 8)
    relay = RelayBlock(owner, source)
    view = RelayView(relay.header, relay.data)
    assert view.fresh()
    relay.header.array[2] = time.monotonic_ns() - int((params.RELAY_STALE_S + 0.5) * 1e9)  # the relay died
    assert not view.fresh()
    relay.beat()
    assert view.fresh()
    relay.header.array[0] = 1  # a relay that died mid-write leaves the block locked: readers give up, not hang
    with pytest.raises(TimeoutError, match="stayed locked"):
        read_block(relay.header.array, relay.data.array, 0)
