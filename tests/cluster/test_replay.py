"""Replay in short DQN runs through daskrl.train on embedded clusters: several minibatches per request keep the
update-to-data ratio and send back every priority, a SIGKILLed shard loses only its data, the shard saved with the
checkpoints (--checkpoint-replay) refills a resumed run, and a run whose workers all take the comms path
(DASKRL_FORCE_COMMS=1) copies slots and minibatches by RPC."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ..helpers import slow


@slow("a short DQN run whose learner asks for 4 minibatches per request, its shard watched at every poll")
def test_several_minibatches_per_request_keep_the_ratio_and_send_back_every_priority(tmp_path):
    from daskrl import Observer, train
    from daskrl.learning.checkpoints import CheckpointStore

    from ..helpers import DQN_CARTPOLE, REPORT_OFTEN, run_config

    class Watch(Observer):
        def __init__(self):
            self.polls = []

        def on_poll(self, run):
            if "replay_0" in run.ledger.last_stats:
                self.polls.append(run.ledger.last_stats["replay_0"])

    watch, starts, r = Watch(), 300, 0.25
    config = run_config(tmp_path, "k4", base={**DQN_CARTPOLE, **REPORT_OFTEN}, learning_starts=starts,
                        replay_batches_per_request=4, train_for_env_steps=4_000)
    summary = train(config, observers=[watch])
    assert watch.polls and all(p["replay"]["batches_per_request"] == 4 for p in watch.polls)
    for poll in watch.polls:  # served is read first: a later count of transitions can only allow more
        replay = poll["replay"]
        if replay["size"] < starts:
            assert replay["served"] == 0, replay  # the learner waited for learning_starts
        else:
            assert replay["served"] - 1 < 1 + r * (replay["added"] - starts), replay  # never past the ratio
        received = poll["counters"].get("priorities_kept", 0) + poll["counters"].get("priorities_dropped", 0)
        assert received <= replay["served"] * 64, (received, replay)
    last = watch.polls[-1]
    assert last["replay"]["served"] > 2 * last["replay"]["answers"]  # most answers carried several minibatches
    received = last["counters"].get("priorities_kept", 0) + last["counters"].get("priorities_dropped", 0)
    in_flight = 3 * 4 * 64  # an answer training, one drawn, one's priorities on the way
    assert received >= last["replay"]["served"] * 64 - in_flight, (received, last)  # every minibatch's came back
    trained = CheckpointStore(tmp_path / "k4" / "checkpoints").load("latest")["train_steps"]
    assert trained == pytest.approx(r * (summary["env_steps"] - starts), rel=0.15), (trained, summary["env_steps"])
    assert summary["policy_version"] >= trained // 8 - 4  # one version per 8 updates, published once per answer


@slow("a DQN run with two shards, one SIGKILLed with its worker, recovered, and the run going on to its budget")
def test_a_sigkilled_shard_loses_only_its_data_and_training_goes_on(tmp_path):
    from daskrl import train

    from ..helpers import DQN_CARTPOLE, REPORT_OFTEN, Killer, recovery_of, run_config

    config = run_config(tmp_path, "kill_shard", base={**DQN_CARTPOLE, **REPORT_OFTEN}, num_workers=2,
                        replay_shards=2, learning_starts=200, train_for_env_steps=14_000)
    killer = Killer("replay_1", ready=lambda row: row["policy_version"] >= 10)
    summary = train(config, on_report=killer)
    killer.check()
    record = recovery_of(summary, "replay_1")  # rollout_1 shared its Dask worker, and came back too
    assert record["role"] == "replay shard"
    assert summary["env_steps"] >= 14_000
    after = killer.rows[killer.rows_before_kill:]
    versions = [r["policy_version"] for r in after]
    assert versions[-1] > versions[0] + 20, versions  # training went on: replay_0 served meanwhile, then both
    assert all(math.isfinite(r["loss"]) for r in after), [r["loss"] for r in after]  # and its loss was logged
    shares = summary["time_shares"]
    assert shares["replay_1"].get("insert", 0) > 0, shares  # the new shard filled again


@slow("two short DQN runs: the first saves its shard with its checkpoints, the resumed one starts from it")
def test_replay_saved_with_the_checkpoints_refills_a_resumed_run(tmp_path):
    from daskrl import Observer, train

    from ..helpers import DQN_CARTPOLE, run_config

    base = {**DQN_CARTPOLE, "checkpoint_replay": True, "learning_starts": 200, "replay_capacity": 1_000}
    first = train(run_config(tmp_path, "replay_ckpt", base=base, train_for_env_steps=1_500))
    with np.load(tmp_path / "replay_ckpt" / "replay" / "replay_0.npz") as saved:
        nxt, size, added, served = saved["counters"].tolist()
        assert size == 1_000 and served > 0  # the ring was full: it wrapped
        # every filled slot (the stop waits for the shard to take them); the steps of the slot the worker was
        # filling when it stopped count in env_steps but were never handed over: fewer than one slot's (8 x 16)
        assert 0 <= first["env_steps"] - added < 8 * 16, (added, first["env_steps"])
        assert nxt == added % 1_000
        assert saved["obs"].shape == (1_000, 4) and len(np.unique(saved["priorities"])) > 10  # TD errors, not 1s

    class FirstSight(Observer):
        def __init__(self):
            self.replay = self.exploration = None

        def on_poll(self, run):
            if self.replay is None and "replay_0" in run.ledger.last_stats:
                self.replay = run.ledger.last_stats["replay_0"]["replay"]
                self.exploration = run.fleet.samplers.rollout[0].call("get_setup").policy.exploration

    sight = FirstSight()
    train(run_config(tmp_path, "replay_ckpt", base=base, resume=True, train_for_env_steps=1_800), observers=[sight])
    assert sight.replay["size"] == 1_000 and sight.replay["added"] >= added  # refilled before it took a slot
    assert sight.replay["served"] >= served  # the draws it served count on: no burst of owed updates
    # the one rollout worker's epsilon decays on from the run's env steps at the resume, not from 1 again
    assert sight.exploration.start_steps == first["env_steps"]


@slow("a DQN run on a cluster of its own whose workers all take the comms path")
def test_a_dqn_run_over_comms_copies_slots_and_minibatches_by_rpc(tmp_path):
    """With DASKRL_FORCE_COMMS=1 every worker treats the others as another host: the shard fetches each slot in one
    round trip and the learner reads each minibatch out of the shard's batch block by RPC; the run trains."""
    from daskrl import train
    from daskrl.runtime import connect_cluster
    from daskrl.runtime.memory.shm import list_segments

    from ..helpers import DQN_CARTPOLE, run_config

    with connect_cluster(n_workers=2, dashboard_address=None) as session:
        session.client.run(lambda: __import__("os").environ.__setitem__("DASKRL_FORCE_COMMS", "1"))
        summary = train(run_config(tmp_path, "comms", base=DQN_CARTPOLE, learning_starts=300,
                                   train_for_env_steps=3_000, train_for_seconds=90.0), client=session.client)
        run_id = session.run_id
    assert summary["env_steps"] >= 3_000
    assert summary["data_path"]["slots_comms"] > 0 and summary["data_path"]["slots_shm"] == 0
    assert summary["policy_version"] >= 0.25 * (3_000 - 300) / 8 * 0.8  # the learner drew minibatches all along
    assert not summary["incidents"], summary["incidents"]
    assert list_segments(run_id) == []
