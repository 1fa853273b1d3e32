"""Slots of another host read ahead and in bulk (daskrl/runtime/memory/remote_reads.py, the batcher's RemoteSlots) on a
real cluster of worker processes with DASKRL_FORCE_COMMS=1 (each worker treats the other as another host): the bulk
path returns exactly what one round trip per slot returns and what the owner holds, for every field of a recurrent,
tagged slot; the learner's reader takes the same of them either way; a read of an owner that stopped fails with one
readable error; a training run whose rollout worker is SIGKILLed while the learner reads its slots over comms goes
on (the reads of the lost worker fail alone) and reaches its budget."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from daskrl import train
from daskrl.runtime import connect_cluster, spawn
from daskrl.runtime.memory.shm import list_segments
from daskrl.testing.slot_pools import ALL_FIELDS, SlotCopier, SlotPool

from ..helpers import REPORT_OFTEN, Killer, recovery_of, run_config, set_worker_env, slow

_ids = itertools.count()
SLOTS, ROLLOUT, ENVS = 6, 8, 5


@pytest.fixture(scope="module")
def forced(session):
    set_worker_env(session.client, "DASKRL_FORCE_COMMS", "1")
    yield session
    set_worker_env(session.client, "DASKRL_FORCE_COMMS", None)


def start(session, cls, worker):
    handle = spawn(session.client, cls, f"{cls.__name__.lower()}{next(_ids)}", run_id=session.run_id, worker=worker)
    handle.call("start")
    return handle


@pytest.fixture
def pool_and_copier(forced, workers):
    pool, copier = start(forced, SlotPool, workers[0]), start(forced, SlotCopier, workers[1])
    descs = pool.call("create", SLOTS, ROLLOUT, ENVS, seed=next(_ids))
    yield pool, copier, descs
    for handle in (copier, pool):
        handle.call("stop")


def assert_same(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for name in a:
        np.testing.assert_array_equal(np.asarray(a[name]), np.asarray(b[name]), err_msg=name)
        assert np.asarray(a[name]).dtype == np.asarray(b[name]).dtype, name


def test_bulk_reads_return_what_one_round_trip_per_slot_returns_and_the_owner_holds(pool_and_copier):
    pool, copier, descs = pool_and_copier
    assert copier.call("attach", descs) == "RemoteSlots"
    slots = [4, 0, 5, 2, 3]  # out of order, as slots arrive
    truth = pool.call("truth", slots, list(ALL_FIELDS))
    bulk = copier.call("read", slots, True)
    one_by_one = copier.call("read", slots, False)
    for expected, got_bulk, got_single in zip(truth, bulk, one_by_one, strict=True):
        assert_same(got_bulk, expected)
        assert_same(got_single, expected)
    assert copier.call("read_stats") == {"rpcs": 1, "reads": len(slots)}, "the slots asked for together went apart"


def test_each_rpc_carries_at_most_its_byte_cap_and_a_larger_read_goes_alone(pool_and_copier):
    pool, copier, descs = pool_and_copier
    copier.call("attach", descs, bulk_bytes=1)
    slots = [1, 2, 3]
    bulk = copier.call("read", slots, True)
    for expected, got in zip(pool.call("truth", slots, list(ALL_FIELDS)), bulk, strict=True):
        assert_same(got, expected)
    assert copier.call("read_stats") == {"rpcs": 3, "reads": 3}


@pytest.mark.parametrize("tagged", [True, False], ids=["tagged-policy-1", "whole"])
def test_the_learners_reader_takes_the_same_either_way(pool_and_copier, tagged):
    pool, copier, descs = pool_and_copier
    copier.call("attach", descs if tagged else pool.call("create", SLOTS, ROLLOUT, ENVS, seed=7, tagged=False))
    slots = [3, 1, 0]
    bulk = copier.call("take", slots, True, 1, tagged)
    one_by_one = copier.call("take", slots, False, 1, tagged)
    for got_bulk, got_single in zip(bulk, one_by_one, strict=True):
        assert "rnn_states" in got_bulk and "valid" in got_bulk
        assert_same(got_bulk, got_single)


def test_a_read_of_a_stopped_owner_fails_with_one_readable_error(forced, workers):
    pool, copier = start(forced, SlotPool, workers[0]), start(forced, SlotCopier, workers[1])
    try:
        copier.call("attach", pool.call("create", SLOTS, ROLLOUT, ENVS, seed=1))
        pool.call("stop")  # its segments are unlinked: the owner's worker no longer serves them
        with pytest.raises(Exception, match="gone or was replaced"):
            copier.call("read", [0, 1], True)
    finally:
        copier.call("stop")


@slow("a run on a cluster of its own, with a kill")
def test_a_rollout_worker_killed_while_its_slots_come_over_comms_is_recreated_and_training_goes_on(tmp_path):
    """Every slot comes over comms (DASKRL_FORCE_COMMS=1, read ahead and in bulk); rollout_1's process is SIGKILLed
    mid-run: reads of its slots in flight or queued fail alone (counted in ``slots_lost_reads``), the batcher goes on
    with rollout_0's, and the run reaches its budget with the recreated rollout_1."""
    budget = 120_000
    with connect_cluster(n_workers=3, dashboard_address=None) as session:
        set_worker_env(session.client, "DASKRL_FORCE_COMMS", "1")
        config = run_config(tmp_path, "kill_remote", base=REPORT_OFTEN, num_workers=2, train_for_env_steps=budget,
                            train_for_seconds=150)
        killer = Killer("rollout_1", ready=lambda row: row["env_steps"] >= 20_000)
        summary = train(config, on_report=killer, client=session.client)
        killer.check()
        run_id = session.run_id
    assert summary["stop_reason"].startswith("reached"), summary["stop_reason"]
    assert summary["env_steps"] >= budget
    recovery_of(summary, "rollout_1")
    path = summary["data_path"]
    assert path["slots_comms"] > 0 and path["slots_shm"] == 0, path
    assert path["remote_reads"] >= path["slots_comms"] and 0 < path["remote_read_rpcs"] <= path["remote_reads"], path
    print(f"\nslots over comms {path['slots_comms']}, reads {path['remote_reads']} in {path['remote_read_rpcs']} "
          f"RPCs, lost reads {path['slots_lost_reads']}")
    assert list_segments(run_id) == []


@slow("a run on a cluster of its own")
def test_a_learner_group_over_comms_reads_its_shares_in_bulk_and_trains(tmp_path):
    """Two learners with every slot over comms: the leader reads its share of each batch, the member the share the
    leader assigned it, each share's slots started together; both copy slots, the run trains without incidents."""
    with connect_cluster(n_workers=4, dashboard_address=None) as session:
        set_worker_env(session.client, "DASKRL_FORCE_COMMS", "1")
        summary = train(run_config(tmp_path, "group_comms", base=REPORT_OFTEN, num_learners=2, num_workers=2,
                                   train_for_env_steps=60_000, train_for_seconds=120), client=session.client)
        run_id = session.run_id
    assert summary["env_steps"] >= 60_000 and summary["policy_version"] > 3, summary["stop_reason"]
    path = summary["data_path"]
    assert path["slots_shm"] == 0 and path["slots_lost_reads"] == 0, path
    assert all(path["components"][name]["slots_comms"] > 0 for name in ("learner", "learner_1")), path
    assert path["remote_read_rpcs"] <= path["remote_reads"], path
    print(f"\nslots over comms {path['slots_comms']}, reads {path['remote_reads']} in {path['remote_read_rpcs']} RPCs")
    assert not summary["incidents"], summary["incidents"]
    assert list_segments(run_id) == []
