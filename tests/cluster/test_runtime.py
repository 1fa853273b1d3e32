"""The runtime core on real clusters: bus, queues, shared memory, parameters, spawning components, and the errors and
incidents they report. Each test gets a fresh cluster whose workers are threads of this process (the ``inproc``
fixture), except where worker processes are the point (a SIGKILLed worker)."""

from __future__ import annotations

import itertools
import logging
import os
import signal as os_signal
import time

import numpy as np
import pytest
from distributed import Client

from daskrl.runtime import (
    ComponentError,
    ConnectError,
    PayloadError,
    SignalRef,
    SlotRef,
    add_consumer,
    connect,
    connect_cluster,
    dask_internals,
    disconnect,
    spawn,
    spawn_all,
)
from daskrl.runtime.actors.incidents import Incidents
from daskrl.runtime.memory.shm import list_segments
from daskrl.runtime.messaging.bus import check_payload
from daskrl.testing.components import (
    Bencher,
    Emitter,
    ParamWatcher,
    ParamWriter,
    ParamWriterSetup,
    Receiver,
    Recorder,
    RecorderSetup,
    SlowSetup,
    SlowToConfigure,
)

from ..helpers import set_worker_env, slow, wait_for

_ids = itertools.count()


def start(session, cls, worker, setup=None):
    handle = spawn(session.client, cls, f"{cls.__name__.lower()}{next(_ids)}", run_id=session.run_id, worker=worker,
                   setup=setup)
    handle.call("start")
    return handle


@pytest.fixture
def session(inproc):
    return inproc


@pytest.fixture
def workers(inproc):
    return sorted(dask_internals.cluster_workers(inproc.client))


def stop_all(*handles):
    for h in handles:
        h.call("stop")


def test_broadcast_reaches_receivers_on_two_workers(session, workers):
    emitter = start(session, Emitter, workers[0])
    near = start(session, Recorder, workers[0])
    far = start(session, Recorder, workers[1])
    assert near.address != far.address
    connect(emitter.tick, near.on_tick, session.client)
    connect(emitter.tick, far.on_tick, session.client)
    emitter.call("burst", 50)
    wait_for(lambda: len(far.call("received")) == 50 and len(near.call("received")) == 50)
    expected = [[emitter.name, i] for i in range(50)]
    assert near.call("received") == expected
    assert far.call("received") == expected
    stop_all(emitter, near, far)


def test_the_bus_benchmarks_ticks_and_handoffs_reach_its_receiver(session, workers):
    """benchmarks/bench_bus.py's sender publishes its ticks on the bus itself (no per-signal call): on the topic its
    ``tick`` signal names, which runs scope (it published on the unscoped name, where nobody listened, for days)."""
    sender = start(session, Bencher, workers[0])
    receiver = start(session, Receiver, workers[1])
    connect(sender.tick, receiver.on_tick, session.client)
    connect(sender.handoff, receiver.on_handoff, session.client)
    sender.call("paced", 200, 0.0)
    wait_for(lambda: receiver.call("results")["count"] == 200, timeout=30)
    sender.call("shm_handoff", 4096, 2)
    wait_for(lambda: receiver.call("results")["handoffs"] == 2, timeout=30)
    assert receiver.call("results")["count"] == 200
    stop_all(sender, receiver)


def test_ten_thousand_signals_arrive_complete_and_in_order(session, workers):
    emitters = [start(session, Emitter, w) for w in workers]
    receiver = start(session, Recorder, workers[1])
    for e in emitters:
        connect(e.tick, receiver.on_tick, session.client)
    for e in emitters:
        e.call("burst", 10_000)
    wait_for(lambda: len(receiver.call("received")) >= 20_000, timeout=60)
    time.sleep(0.2)
    got = receiver.call("received")
    assert len(got) == 20_000
    for e in emitters:  # FIFO per sender/receiver pair: the local one and the remote one
        assert [i for src, i in got if src == e.name] == list(range(10_000))
    stop_all(receiver, *emitters)


def test_late_subscriber_gets_what_is_sent_after_it_joins(session, workers):
    emitter = start(session, Emitter, workers[0])
    early = start(session, Recorder, workers[1])
    connect(emitter.tick, early.on_tick, session.client)
    emitter.call("burst", 100)
    wait_for(lambda: len(early.call("received")) == 100)
    late = start(session, Recorder, workers[1])
    connect(emitter.tick, late.on_tick, session.client)
    emitter.call("burst", 100, start=100)
    wait_for(lambda: len(late.call("received")) == 100)
    assert [i for _, i in late.call("received")] == list(range(100, 200))
    # and unsubscribing while running stops delivery to that slot only
    disconnect(emitter.tick, late.on_tick, session.client)
    emitter.call("burst", 10, start=200)
    wait_for(lambda: len(early.call("received")) == 210)
    time.sleep(0.2)
    assert len(late.call("received")) == 100
    stop_all(emitter, early, late)


def test_work_queue_hands_each_item_to_exactly_one_consumer(session, workers):
    producer = start(session, Emitter, workers[0])
    consumers = [start(session, Recorder, w) for w in workers]
    for c in consumers:
        add_consumer("jobs", c.on_tick, session.client)
    producer.call("burst", 10_000, queue="jobs")
    wait_for(lambda: sum(len(c.call("received")) for c in consumers) >= 10_000, timeout=60)
    time.sleep(0.2)
    taken = [[i for _, i in c.call("received")] for c in consumers]
    assert all(len(t) > 0 for t in taken), "both consumers should take work"
    assert sorted(taken[0] + taken[1]) == list(range(10_000))
    assert not set(taken[0]) & set(taken[1])
    stop_all(producer, *consumers)


@slow("waits out a heartbeat timeout")
def test_heartbeat_counts_from_start_not_from_a_long_configure(session, workers):
    """Building envs is not silence: the runner's "silent" warning must not fire for a component that took
    longer than --heartbeat-timeout to configure and has just started its loop."""
    handle = start(session, SlowToConfigure, workers[0], SlowSetup(seconds=2.0, start_s=1.0))
    assert handle.call("stats")["heartbeat_age_s"] < 1.0, "the heartbeat was counted from before configure"
    time.sleep(1.3)
    # an idle loop turns (and beats) every 0.1 s; counted from before configure, the age would be 1.3 s or more
    assert handle.call("stats")["heartbeat_age_s"] < 1.0, "the loop did not beat since it started"
    stop_all(handle)


def test_a_loop_kept_busy_by_queued_messages_still_beats(session, workers):
    """Forty messages of 50 ms each, all queued at once: the loop handles them a turn of about 0.1 s at a time, so
    its heartbeat stays fresh while they are handled (in one turn, the age would reach 2 s)."""
    emitter = start(session, Emitter, workers[0])
    busy = start(session, Recorder, workers[1], RecorderSetup(work_s=0.05))
    connect(emitter.tick, busy.on_tick, session.client)
    emitter.call("burst", 40)
    ages = []
    while len(busy.call("received")) < 40:
        ages.append(busy.call("stats")["heartbeat_age_s"])
        time.sleep(0.05)
    assert len(ages) > 10 and max(ages) < 0.5, ages
    stop_all(emitter, busy)


def test_spawn_all_configures_components_at_the_same_time(session, workers):
    """Rollout workers build their envs in configure: created together, those builds overlap in time."""
    specs = [(SlowToConfigure, f"slow{next(_ids)}", worker, SlowSetup(seconds=1.5)) for worker in workers[:2]]
    handles = spawn_all(session.client, specs, run_id=session.run_id)
    (began0, ended0), (began1, ended1) = (handle.call("configure_span") for handle in handles)
    assert max(began0, began1) < min(ended0, ended1), "the components were configured one after the other"
    stop_all(*handles)


def test_spawn_all_names_the_component_that_failed_and_hands_back_every_actor(session, workers):
    created: list = []
    good, bad = f"good{next(_ids)}", f"bad{next(_ids)}"
    with pytest.raises(ComponentError, match=rf"component '{bad}' .*configure\(\) failed: RuntimeError: this "
                                             "component was told to fail"):
        spawn_all(session.client, [(SlowToConfigure, good, workers[0], SlowSetup()),
                                   (SlowToConfigure, bad, workers[1], SlowSetup(fail=True))],
                  run_id=session.run_id, created=created)
    assert [handle.name for handle in created] == [good, bad], "a caller could not stop what was created"
    stop_all(*created)


def test_array_written_in_one_worker_is_read_in_another(session, workers):
    writer = start(session, Emitter, workers[0])
    reader = start(session, Recorder, workers[1])
    desc = writer.call("write_array", [64, 3], 2.5)
    assert reader.call("attached_kind", desc) == "SharedArray"
    data = np.asarray(reader.call("read_array", desc), dtype=np.float32)
    expected = np.full((64, 3), 2.5, np.float32)
    expected.reshape(-1)[:: (64 * 3) // 7] = np.arange(len(expected.reshape(-1)[:: (64 * 3) // 7]))
    np.testing.assert_array_equal(data, expected)
    name = desc["name"]
    assert name in list_segments(session.run_id)
    stop_all(writer, reader)
    assert name not in list_segments(session.run_id), "the owner unlinks its segments when it stops"


def test_forced_remote_path_delivers_identical_data(session, workers):
    writer = start(session, Emitter, workers[0])
    reader = start(session, Recorder, workers[1])
    desc = writer.call("write_array", [1000, 7], -1.25)
    local = reader.call("read_array", desc)
    set_worker_env(session.client, "DASKRL_FORCE_COMMS", "1")
    try:
        assert reader.call("attached_kind", desc) == "RemoteArray"
        remote = reader.call("read_array", desc)
    finally:
        set_worker_env(session.client, "DASKRL_FORCE_COMMS", None)
    assert remote == local
    stop_all(writer, reader)


@pytest.mark.parametrize("force_comms", [False, True], ids=["shared-memory", "comms"])
def test_parameter_versions_arrive_in_increasing_order(session, workers, force_comms):
    if force_comms:
        set_worker_env(session.client, "DASKRL_FORCE_COMMS", "1")
    try:
        writer = start(session, ParamWriter, workers[0], ParamWriterSetup(size=50_000))
        desc = writer.call("desc")
        watcher = start(session, ParamWatcher, workers[1], desc)
        writer.call("publish_n", 200, interval_s=0.002 if not force_comms else 0.01)
        wait_for(lambda: writer.call("version") == 200, timeout=60)
        wait_for(lambda: (watcher.call("seen_versions") or [[0]])[-1][0] == 200, timeout=30)
        seen = watcher.call("seen_versions")
    finally:
        if force_comms:
            set_worker_env(session.client, "DASKRL_FORCE_COMMS", None)
    versions = [v for v, _ in seen]
    assert versions == sorted(set(versions)), "versions must strictly increase"
    assert all(ok for _, ok in seen), "every version read must be internally consistent"
    assert len(versions) >= 2
    stop_all(writer, watcher)


def test_connecting_to_a_missing_slot_or_signal_is_a_clear_error(session, workers):
    emitter = start(session, Emitter, workers[0])
    receiver = start(session, Recorder, workers[1])
    with pytest.raises(ConnectError, match=r"has no signal or slot 'on_tock'.*slots are: on_tick"):
        receiver.on_tock  # noqa: B018  (attribute access validates against the class)

    # by hand, a reference names a component by its name on the bus (scoped by its run: handle.bus_name)
    with pytest.raises(ConnectError, match=rf"component '{receiver.bus_name}' \(Recorder\) has no slot 'nope'"):
        connect(emitter.tick, SlotRef(receiver.bus_name, "nope"), session.client)
    with pytest.raises(ConnectError, match="no signal 'tock'"):
        connect(SignalRef(emitter.bus_name, "tock"), receiver.on_tick, session.client)
    with pytest.raises(ConnectError, match="no component named 'ghost'"):
        connect(emitter.tick, SlotRef("ghost", "on_tick"), session.client)
    stop_all(emitter, receiver)


def test_bad_payload_and_raising_slot_leave_the_bus_working(session, workers):
    emitter = start(session, Emitter, workers[0])
    receiver = start(session, Recorder, workers[1], RecorderSetup(fail_on=3))
    connect(emitter.tick, receiver.on_tick, session.client)
    with pytest.raises(ComponentError, match=rf"'{emitter.name}'.*signal 'tick'.*numpy.ndarray.*not msgpack-native"):
        emitter.call("emit_now", {"x": np.zeros(3)})
    with pytest.raises(PayloadError):
        check_payload({"a": [1, {"b": object()}]}, "here")
    emitter.call("burst", 10)
    wait_for(lambda: len(receiver.call("received")) == 9)
    assert [i for _, i in receiver.call("received")] == [0, 1, 2, 4, 5, 6, 7, 8, 9]
    errors = receiver.call("stats")["errors"]
    assert len(errors) == 1
    message = errors[0]["message"]
    assert receiver.name in message and "on_tick" in message and f"{emitter.name}.tick" in message
    assert "refusing item 3" in message
    stop_all(emitter, receiver)


def test_no_segment_left_after_sigkill_of_a_worker_mid_run():
    """A worker killed with SIGKILL cannot clean up; the restarted worker's sweep and the close must."""
    with connect_cluster(n_workers=2, dashboard_address=None) as s:
        workers = sorted(dask_internals.cluster_workers(s.client))
        victim = start(s, Emitter, workers[0])
        survivor_tx = start(s, Emitter, workers[1])
        survivor_rx = start(s, Recorder, workers[1])
        connect(survivor_tx.tick, survivor_rx.on_tick, s.client)
        desc = victim.call("write_array", [256, 256], 1.0)
        pid = victim.call("stats")["pid"]
        assert desc["name"] in list_segments(s.run_id)
        t0 = time.monotonic()
        os.kill(pid, os_signal.SIGKILL)
        with pytest.raises(ComponentError, match=rf"component '{victim.name}' \(Emitter"):
            victim.call("stats", timeout=20)
        assert time.monotonic() - t0 < 20, "a dead component must not hang its caller"
        # the other components keep working
        survivor_tx.call("burst", 20)
        wait_for(lambda: len(survivor_rx.call("received")) == 20)
        # the nanny restarts the worker; its bus plugin sweeps segments of dead processes
        wait_for(lambda: len(dask_internals.cluster_workers(s.client)) == 2, timeout=30)
        wait_for(lambda: desc["name"] not in list_segments(s.run_id), timeout=30)
        events = s.client.get_events("daskrl-faults")
        assert any(e["component"] == victim.bus_name for _, e in events)
        run_id = s.run_id
    assert list_segments(run_id) == []


def test_existing_cluster_is_left_open(session):
    """connect_cluster(client) closes only what it opened."""
    client = Client(session.client.scheduler.address, direct_to_workers=True)
    try:
        with connect_cluster(client) as inner:
            assert inner.client is client and not inner.embedded
        assert client.status == "running"
        assert client.submit(lambda x: x + 1, 1).result() == 2
    finally:
        client.close()


def test_dropped_messages_and_incidents_are_counted_and_logged(session, workers, caplog):
    emitter = start(session, Emitter, workers[0])
    emitter.call("burst", 5)  # nobody is connected to its signal
    wait_for(lambda: emitter.call("stats")["bus"]["dropped"] >= 5, what="5 drops counted in the stats")
    incidents = Incidents(logging.getLogger("daskrl.test"), "test")
    with caplog.at_level(logging.DEBUG, logger="daskrl.test"):
        for _ in range(3):
            incidents.note("event-not-sent", TimeoutError("scheduler busy"))
    assert incidents.snapshot() == {"event-not-sent": 3}
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "event-not-sent" in warnings[0].getMessage() and "scheduler busy" in \
        warnings[0].getMessage(), "the first of a kind is a warning with its cause, later ones are debug lines"
