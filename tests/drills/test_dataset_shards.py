"""``--dataset minari:ID`` on two network-namespace hosts of ``dask worker`` processes: the learner on host 1, a
rollout worker on each host, so ``--replay-shards auto`` keeps a shard on each. Each shard preloads its half of a
dataset of real Pendulum episodes (whole episodes, within one episode of half the transitions), and the learner
trains on minibatches drawn from both, each row of the dataset's share of a minibatch from the dataset."""

from __future__ import annotations

import csv
import warnings

import gymnasium as gym
import numpy as np
import pytest

from daskrl import train

from ..helpers import run_config, slow, start_two_hosts

minari = pytest.importorskip("minari", reason="the datasets extra is not installed: pip install 'daskrl[datasets]'")

#: the dataset's episodes: Pendulum played with random actions, each cut at its own length
LENGTHS = [120, 200, 80, 150, 200, 60, 190, 100]


def write_pendulum_dataset(dataset_id: str) -> None:
    from minari.data_collector import EpisodeBuffer

    env = gym.make("Pendulum-v1")
    env.action_space.seed(0)
    buffers = []
    for episode, steps in enumerate(LENGTHS):
        obs, _ = env.reset(seed=episode)
        observations, actions, rewards = [obs], [], []
        for _ in range(steps):
            action = env.action_space.sample()
            obs, reward, *_ = env.step(action)
            observations.append(obs)
            actions.append(action)
            rewards.append(reward)
        buffers.append(EpisodeBuffer(observations=np.stack(observations), actions=np.stack(actions),
                                     rewards=np.array(rewards), terminations=np.zeros(steps, bool),
                                     truncations=np.r_[np.zeros(steps - 1, bool), True]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        minari.create_dataset_from_buffers(dataset_id, buffers, env=gym.spec("Pendulum-v1"), algorithm_name="random")


@slow("network namespaces and dask CLI processes, a short SAC run with a dataset split over two hosts")
def test_each_hosts_shard_holds_half_the_dataset_and_the_learner_trains_from_both(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    write_pendulum_dataset("test/pendulum/random-v0")
    (tmp_path / "hosts").mkdir()
    with start_two_hosts(tmp_path / "hosts", [(0, "a-learner", ["--resources", "learner=1"]),
                                              (0, "a-r0", ["--resources", "rollout=1"]),
                                              (1, "b-r1", ["--resources", "rollout=1"])]) as hosts:
        h1, h2 = hosts["net"].hosts
        summary = train(run_config(tmp_path, "offline", scheduler=hosts["address"], env="Pendulum-v1", algo="sac",
                                   num_workers=2, num_envs_per_worker=4, train_for_env_steps=400,
                                   dataset="minari:test/pendulum/random-v0", report_interval=0.5, elastic=False))
    shards = summary["replay_shards"]
    assert [s["host"] for s in shards] == [h1, h2], shards
    total = sum(LENGTHS)
    assert sum(s["dataset_size"] for s in shards) == total and sum(s["dataset_episodes"] for s in shards) == 8
    for shard in shards:
        assert abs(shard["dataset_size"] - total / 2) <= max(LENGTHS), shards  # within one episode of half
        # the learner trained on this shard's draws, half of each 256-row minibatch from the dataset
        assert shard["trained_on"] and shard["served"] > 0, shards
        assert shard["dataset_rows_drawn"] == shard["served"] * 128, shards
    with open(tmp_path / "offline" / "metrics.csv") as f:
        last = list(csv.DictReader(f))[-1]
    assert int(last["replay_dataset_size"]) == total and int(last["replay_dataset_episodes"]) == 8
