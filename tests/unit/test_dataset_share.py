"""--dataset minari:ID without a cluster: the split by episode, an episode's n-step transitions, Dict observations
packed as the slots pack them, minibatches drawn half from the dataset and half from the ring, and the checks that
refuse a dataset before a run starts."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

from daskrl.config import Config, EnvConfig
from daskrl.envs.layouts.dict_obs import pack_into, pack_rows, read_dict_space, unpack
from daskrl.errors import ConfigError
from daskrl.replay.dataset_share import (
    DATASET_ROW,
    DatasetPart,
    dataset_problems,
    dataset_shares,
    episode_part,
    split_by_episode,
)
from daskrl.replay.n_step import slot_transitions
from daskrl.replay.sampler import PrioritizedSampler
from daskrl.replay.store import TransitionStore, numpy_arrays, store_shapes
from daskrl.setups import DatasetShare


def test_each_part_holds_whole_episodes_in_order_within_one_episode_of_an_equal_share():
    rng = np.random.default_rng(0)
    for _ in range(200):
        lengths = rng.integers(1, 300, rng.integers(1, 40))
        parts = int(rng.integers(1, 6))
        ranges = split_by_episode(lengths, parts)
        assert len(ranges) == parts and ranges[0][0] == 0 and ranges[-1][1] == len(lengths)
        # contiguous, in order, nothing twice
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
        steps = [int(lengths[first:stop].sum()) for first, stop in ranges]
        assert all(abs(s - lengths.sum() / parts) <= lengths.max() for s in steps), (lengths, ranges)
    assert split_by_episode([200, 200], 2) == [(0, 1), (1, 2)]
    assert split_by_episode([5], 3) == [(0, 0), (0, 1), (1, 1)]  # fewer episodes than parts: some hold none


class Episode:
    """What Minari's EpisodeData gives the reader."""

    def __init__(self, observations, actions, rewards, terminated: bool) -> None:
        steps = len(rewards)
        self.observations, self.actions, self.rewards = observations, np.asarray(actions), np.asarray(rewards)
        self.terminations = np.zeros(steps, bool)
        self.truncations = np.zeros(steps, bool)
        (self.terminations if terminated else self.truncations)[-1] = True


def test_an_episode_becomes_the_transitions_of_one_envs_slot():
    obs = np.arange(5.0)[:, None].astype(np.float32)  # 4 steps and the final observation
    cut = slot_transitions(episode_part(Episode(obs, [0, 1, 0, 1], [1.0, 1.0, 1.0, 1.0], False), ()), 2, 0.5)
    np.testing.assert_allclose(cut.rewards, [1.5, 1.5, 1.5, 1.0])
    np.testing.assert_allclose(cut.discounts, [0.25, 0.25, 0.25, 0.5])  # the truncated end bootstraps...
    np.testing.assert_allclose(cut.next_obs[:, 0], [2, 3, 4, 4])  # ...from the real final observation
    ended = slot_transitions(episode_part(Episode(obs, [0, 1, 0, 1], [1.0, 1.0, 1.0, 1.0], True), ()), 2, 0.5)
    np.testing.assert_allclose(ended.discounts, [0.25, 0.25, 0.0, 0.0])  # a terminated one does not
    np.testing.assert_array_equal(ended.actions, [0, 1, 0, 1])


def test_dict_observations_are_packed_as_the_slots_pack_them():
    space = gym.spaces.Dict({"clock": gym.spaces.Box(0, 1, (1,), np.float32),
                             "view": gym.spaces.Box(0, 255, (2, 2, 1), np.uint8), "cue": gym.spaces.Discrete(3)})
    keys, _ = read_dict_space(space)
    space.seed(0)
    samples = [space.sample() for _ in range(6)]
    columns = {name: np.stack([s[name] for s in samples]) for name in space.spaces}
    rows = pack_rows(columns, keys, 6)
    one_by_one = np.stack([pack_into(np.zeros(rows.shape[1], np.uint8), s, keys) for s in samples])
    np.testing.assert_array_equal(rows, one_by_one)
    for name, values in unpack(rows, keys).items():
        np.testing.assert_array_equal(values.reshape(6, -1), columns[name].reshape(6, -1).astype(values.dtype))


def _ring(values: float, size: int = 40) -> TransitionStore:
    store = TransitionStore(numpy_arrays(store_shapes(size, (1,), "float32", (), "int64")))
    obs = np.full((size + 1, 1, 1), values, np.float32)
    store.add(slot_transitions({"obs": obs, "actions": np.zeros((size, 1), np.int64),
                                "rewards": np.zeros((size, 1)), "terminated": np.zeros((size, 1), bool),
                                "truncated": np.zeros((size, 1), bool)}, 1, 0.9))
    return store


class FixedPart(DatasetPart):
    """A dataset part over a given store (the reading of a Minari dataset is the other tests')."""

    def __init__(self, store: TransitionStore, fraction: float) -> None:
        from daskrl.replay.sampler import UniformSampler

        self.share = DatasetShare("t/x/y-v0", "", 0, 1, store.size, fraction)
        self.store, self.sampler, self.drawn = store, UniformSampler(store.capacity, seed=1), 0
        self.fraction = fraction


def test_each_minibatch_takes_its_share_of_rows_from_the_dataset_and_the_rest_from_the_ring():
    ring, part = _ring(1.0), FixedPart(_ring(-1.0, 30), 0.25)
    sampler = PrioritizedSampler(ring.capacity, seed=0)
    sampler.added(np.arange(ring.size))
    sampler.update(np.arange(ring.size), np.linspace(0.1, 4.0, ring.size))
    out = numpy_arrays(store_shapes(3 * 8, (1,), "float32", (), "int64"))
    out = {name: array.reshape(3, 8, *array.shape[1:]) for name, array in out.items()}
    positions, stamps, weights = part.draw_beside(ring, sampler, 3, out)
    assert part.rows(8) == 2 and part.drawn == 6
    assert (out["obs"][:, :6] == 1.0).all() and (out["obs"][:, 6:] == -1.0).all()
    rows = positions.reshape(3, 8)
    assert (rows[:, 6:] == DATASET_ROW).all() and (rows[:, :6] >= 0).all()
    np.testing.assert_array_equal(stamps.reshape(3, 8)[:, :6], ring.stamps[rows[:, :6]])
    np.testing.assert_allclose(weights.reshape(3, 8)[:, 6:], 1.0)
    np.testing.assert_allclose(weights.reshape(3, 8)[:, :6].reshape(-1),
                               sampler.weights(rows[:, :6].reshape(-1), ring.size))  # the ring's own weights
    only = FixedPart(_ring(-1.0, 30), 1.0)  # --dataset-fraction 1: every row from the dataset
    positions, _, _ = only.draw_beside(ring, sampler, 3, out)
    assert (positions == DATASET_ROW).all() and (out["obs"] == -1.0).all()


def test_a_shards_part_of_the_dataset_must_fit_its_worker():
    from daskrl.driver.launch.sizing import dataset_memory_problems as memory_problems
    from daskrl.driver.launch.sizing import transition_bytes
    from daskrl.envs import probe_env

    spaces = probe_env("Pendulum-v1", {}, (), None)
    assert transition_bytes(spaces) == 3 * 4 * 2 + 4 + 4 + 4  # obs and next obs, action, reward, discount
    config = Config.from_flat({"algo": "sac", "dataset": "minari:a/b-v0"})
    [line] = memory_problems(config, spaces, 10_000, 1_000)  # one shard on this machine: 36,000 bytes
    assert "a replay shard would hold 1,000 of its transitions" in line and "--replay-shards" in line
    split = Config.from_flat({"algo": "sac", "dataset": "minari:a/b-v0", "replay_shards": 4, "num_workers": 4})
    assert memory_problems(split, spaces, 10_000, 1_000) == []  # 250 each: 9,000 bytes
    assert memory_problems(config, spaces, None, 1_000) == []  # no limit known


# ---- with Minari: a real dataset, read by episode ----

minari = pytest.importorskip("minari", reason="the datasets extra is not installed: pip install 'daskrl[datasets]'")


def _write(dataset_id: str, env_id: str, lengths: list[int]) -> None:
    from minari.data_collector import EpisodeBuffer

    env = gym.make(env_id)
    buffers = []
    for episode, steps in enumerate(lengths):
        env.action_space.seed(episode)
        obs = np.stack([env.observation_space.sample() for _ in range(steps + 1)])
        obs[:, 0] = episode  # which episode a transition came from
        buffers.append(EpisodeBuffer(observations=obs, actions=np.stack([env.action_space.sample()
                                                                         for _ in range(steps)]),
                                     rewards=np.full(steps, float(episode)), terminations=np.zeros(steps, bool),
                                     truncations=np.r_[np.zeros(steps - 1, bool), True]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        minari.create_dataset_from_buffers(dataset_id, buffers, env=gym.spec(env_id), algorithm_name="test")


def test_shards_read_only_their_own_episodes(tmp_path, monkeypatch):
    from daskrl.envs import probe_env

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    _write("t/pendulum/parts-v0", "Pendulum-v1", [10, 30, 20, 25, 15])
    shares = dataset_shares("minari:t/pendulum/parts-v0", 0.5, 2)
    # steps 10 30 | 20 25 15: the boundary at 40 is as near to 50 as the one at 60, and comes first
    assert [(s.first, s.stop, s.transitions) for s in shares] == [(0, 2, 40), (2, 5, 60)]
    spaces = probe_env("Pendulum-v1", {}, (), None)
    parts = [DatasetPart(share, spaces, 1, 0.99, 2.0, 25.0, seed=0) for share in shares]
    assert [p.size for p in parts] == [40, 60]
    assert set(np.unique(parts[0].store.arrays["obs"][:, 0])) == {0, 1}
    assert set(np.unique(parts[1].store.arrays["obs"][:, 0])) == {2, 3, 4}
    assert set(np.unique(parts[1].store.arrays["rewards"])) == {4.0, 6.0, 8.0}  # scaled by 2 (the clip at 25 holds)
    assert parts[0].stats() == {"dataset": "t/pendulum/parts-v0", "dataset_size": 40, "dataset_episodes": 2,
                                "dataset_rows_drawn": 0}


def test_a_missing_dataset_or_one_of_another_env_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    _write("t/cartpole/random-v0", "CartPole-v1", [5, 5])
    [missing] = dataset_problems("minari:t/pendulum/nothing-v0", EnvConfig(env="Pendulum-v1"))
    assert "no Minari dataset t/pendulum/nothing-v0 at" in missing and "minari list local" in missing
    other = dataset_problems("minari:t/cartpole/random-v0", EnvConfig(env="Pendulum-v1"))
    assert len(other) == 2 and "holds observations in Box" in other[0] and "--env Pendulum-v1" in other[0]
    assert dataset_problems("minari:t/cartpole/random-v0", EnvConfig(env="CartPole-v1")) == []


def test_dataset_options_are_checked_with_the_others():
    def problems(**flat) -> str:
        with pytest.raises(ConfigError) as info:
            Config.from_flat(flat).validate()
        return str(info.value)

    assert "--algo appo has none: use --algo sac, td3 or dqn" in problems(dataset="minari:a/b-v0")
    assert "name the dataset too" in problems(algo="sac", dataset_fraction=0.3)
    assert "a sampling-only run has no learner" in problems(algo="sac", dataset="minari:a/b-v0", sampling_only=True)
    assert "minari:mine/pendulum/expert-v0" in problems(algo="sac", dataset="a/b-v0")  # the prefix is asked for
    Config.from_flat({"algo": "sac", "dataset": "minari:a/b-v0", "dataset_fraction": 1.0}).validate()
