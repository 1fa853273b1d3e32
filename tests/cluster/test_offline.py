"""Offline runs on the embedded cluster: a dataset recorded by a sampling run, then --algo iql, cql and bc trained
from it alone (no rollout worker, no env step), stopped by --train-for-updates, evaluated every
--eval-interval-updates, resumed from their checkpoints, steered, exported and played by enjoy; and SAC and DQN
trained from a dataset alone before they sample (--online-after)."""

from __future__ import annotations

import math
import time

import pytest

import daskrl
from daskrl import train
from daskrl.evaluation.episodes import enjoy, trained_for
from daskrl.evaluation.export import export_policy

from ..helpers import Killer, recovery_of, run_config, slow, wait_for

pytest.importorskip("minari", reason="the datasets extra is not installed: pip install 'daskrl[datasets]'")

#: small networks and minibatches: what is tested is the run, not how well it learns (benchmarks/ measures that)
SMALL = {"hidden_sizes": [32, 32], "batch_size": 64, "report_interval": 0.5}


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """Random Pendulum and CartPole episodes recorded by sampling runs (an untrained policy), once per module."""
    root = tmp_path_factory.mktemp("offline")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINARI_DATASETS_PATH", str(root / "datasets"))
        for env, dataset in (("Pendulum-v1", "test/pendulum/random-v0"), ("CartPole-v1", "test/cartpole/random-v0")):
            train(run_config(root, f"record_{env}", env=env, sampling_only=True, num_workers=1,
                             num_envs_per_worker=4, rollout=16, train_for_env_steps=0, record_dataset=dataset,
                             record_episodes=8))
    return root


def test_iql_trains_from_the_dataset_alone_and_resumes_in_updates(datasets, tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(datasets / "datasets"))
    options = {**SMALL, "env": "Pendulum-v1", "algo": "iql", "dataset": "minari:test/pendulum/random-v0",
               "eval_interval_updates": 150, "eval_episodes": 2}
    summary = train(run_config(tmp_path, "iql", train_for_updates=400, **options))
    assert summary["offline"] and summary["env_steps"] == 0 and summary["episodes"] == 0
    # the learner asks for no minibatches past the budget: it ends within one answer (16 minibatches) of it
    assert summary["stop_reason"].startswith("reached") and 400 <= summary["learner_updates"] < 400 + 16
    [shard] = summary["replay_shards"]
    assert shard["dataset_size"] == 1600 and shard["added"] == 0 and shard["rollout_workers"] == []
    assert shard["dataset_rows_drawn"] == shard["served"] * 64  # every row from the dataset
    evaluation = summary["last_evaluation"]
    assert evaluation["eval_updates"] >= 150 and evaluation["eval_env_steps"] == 0
    assert evaluation["eval_episodes"] == 2 and math.isfinite(evaluation["eval_return_mean"])
    assert not [name for name in summary["data_path"]["components"] if name.startswith(("rollout", "inference"))]
    resumed = train(run_config(tmp_path, "iql", train_for_updates=700, resume=True, **options))
    assert 700 <= resumed["learner_updates"] < 700 + 16  # on from the checkpoint's count, not from 0
    names = sorted(path.name for path in (tmp_path / "iql" / "checkpoints").glob("checkpoint_*.pt"))
    assert names[-1] == f"checkpoint_{resumed['learner_updates']:012d}.pt"  # named by updates: none overwritten


def test_cql_is_steered_and_exported_and_discrete_bc_is_played(datasets, tmp_path, monkeypatch):
    """A live CQL run takes a new learning rate between two updates and refuses rollout workers it has no use for;
    its export and a BC policy's enjoy say what they were trained for in updates."""
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(datasets / "datasets"))
    with daskrl.start(run_config(tmp_path, "cql", env="Pendulum-v1", algo="cql", train_for_updates=1_000_000,
                                 dataset="minari:test/pendulum/random-v0", **SMALL)) as run:
        wait_for(lambda: run.status()["learner_updates"] >= 50, timeout=60, what="50 updates")
        with pytest.raises(ValueError, match="offline run .* no rollout workers"):
            run.scale(rollout_workers=2)
        after = run.set(learning_rate=0.00123)["after_train_step"]
        learner = run._run.fleet.teams.leaders[0]
        wait_for(lambda: [s for s in learner.call("stats")["step_hyperparams"] if s[0] > after + 2], timeout=60,
                 what="updates after the change")
        for step, hp in learner.call("stats")["step_hyperparams"]:
            assert (hp["learning_rate"] == 0.00123) == (step > after), (step, hp, after)
        cql = run.stop()
    assert cql["env_steps"] == 0 and cql["policy_version"] > 1
    exported = export_policy(cql["experiment_dir"], "pt2")  # checked against the torch policy as it is written
    assert exported["offline"] and exported["updates_trained"] >= cql["learner_updates"] - 16
    assert trained_for(exported) == f"{exported['updates_trained']:,} updates from its dataset"
    bc = train(run_config(tmp_path, "bc", env="CartPole-v1", algo="bc", dataset="minari:test/cartpole/random-v0",
                          train_for_updates=100, **SMALL))
    assert bc["learner_updates"] >= 100
    played = enjoy(bc["experiment_dir"], episodes=2)
    assert len(played["returns"]) == 2 and played["checkpoint"] == "latest"
    assert played["offline"] and played["env_steps_trained"] == 0 and played["updates_trained"] >= 100


@pytest.mark.parametrize(("algo", "env", "dataset"), [("sac", "Pendulum-v1", "test/pendulum/random-v0"),
                                                      ("dqn", "CartPole-v1", "test/cartpole/random-v0")])
def test_online_after_trains_from_the_dataset_alone_then_samples(datasets, tmp_path, monkeypatch, algo, env,
                                                                 dataset):
    """--online-after 150: no env step until the learner made 150 updates, then the rollout workers sample and
    each minibatch draws half its rows from the dataset, half from the new experience."""
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(datasets / "datasets"))
    rows = []
    summary = train(run_config(tmp_path, "online", env=env, algo=algo, num_workers=1, dataset=f"minari:{dataset}",
                               online_after=150, train_for_env_steps=512, learning_starts=64, **SMALL),
                    on_report=rows.append)
    switched = summary["online_after_updates"]
    assert switched >= 150 and summary["env_steps"] >= 512
    assert all(row["env_steps"] == 0 for row in rows if row["learner_updates"] < 150)  # nothing sampled before
    assert any(row["env_steps"] > 0 for row in rows)
    [shard] = summary["replay_shards"]
    assert shard["added"] >= 512 and shard["rollout_workers"] == ["rollout_0"]
    # every update the learner had counted when the run switched trained on a draw the shard served before it
    before = shard["offline_served"]
    assert before >= switched
    # each draw before the switch took all 64 rows from the dataset, each one after it 32 (the rows of an answer
    # being drawn while the shard's statistics were read may be counted, its draws not yet: up to 16 more)
    assert 0 <= shard["dataset_rows_drawn"] // 32 - shard["served"] - before <= 16
    assert shard["served"] - before > 0 and summary["learner_updates"] > switched  # trained on after it


@slow("a rollout worker killed while --online-after holds sampling, recovered, then released")
def test_a_rollout_worker_lost_while_sampling_is_held_comes_back_held(datasets, tmp_path, monkeypatch):
    """SIGKILL of the only rollout worker before the switch: its successor starts held as it was (no env step while
    the learner is short of --online-after's updates, after the successor is up as before), and samples from the
    switch on."""
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(datasets / "datasets"))
    after_updates = 1000  # the learner makes about 160 updates a second here: the recovery takes about 1.5 s
    killer = Killer("rollout_0", ready=lambda row: row["learner_updates"] >= 50)
    timed: list[tuple[float, dict]] = []

    def report(row: dict) -> None:
        timed.append((time.time(), row))
        killer(row)

    summary = train(run_config(tmp_path, "held", env="Pendulum-v1", algo="sac", num_workers=1,
                               dataset="minari:test/pendulum/random-v0", online_after=after_updates,
                               train_for_env_steps=512, learning_starts=64, **SMALL), on_report=report)
    killer.check()
    recovered = recovery_of(summary, "rollout_0")
    assert recovered["role"] == "rollout"
    held = [row for t, row in timed if t > recovered["time"] and row["learner_updates"] < after_updates]
    assert held, "the successor came up after the switch: nothing shows it held"
    assert all(row["env_steps"] == 0 for _, row in timed if row["learner_updates"] < after_updates)
    assert summary["online_after_updates"] >= after_updates and summary["env_steps"] >= 512
