"""--record-dataset on a run in this process: a sampling run of a Dict-observation env writes a Minari dataset key by
key, each episode whole (its final observation included), each env's first episodes only, and a DQN run trains with
it preloaded (--dataset)."""

from __future__ import annotations

import numpy as np
import pytest

from daskrl import train

from ..helpers import run_config

minari = pytest.importorskip("minari", reason="the datasets extra is not installed: pip install 'daskrl[datasets]'")

#: CueEnv: 8 steps, then truncated; ``clock`` is t / 8, every ``view`` pixel 10 t, ``cue`` fixed for the episode and
#: rewarded when the action equals it; ``note`` (Text) has no fixed shape and is dropped
CUE = "daskrl.testing.environments.envs:cue"


def test_a_sampling_run_records_dict_observations_key_by_key(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    summary = train(run_config(tmp_path, "cue", env=CUE, sampling_only=True, num_workers=1, num_envs_per_worker=4,
                               rollout=4, train_for_env_steps=0, record_dataset="test/cue/sampled-v0",
                               record_episodes=10))
    assert summary["dataset_episodes"] == 10 and summary["dataset_steps"] == 80
    assert summary["stop_reason"].startswith("recorded 10 episodes")
    dataset = minari.load_dataset("test/cue/sampled-v0")
    assert dataset.total_episodes == 10 and dataset.total_steps == 80
    assert sorted(dataset.observation_space.spaces) == ["clock", "cue", "view"]
    firsts = set()
    for episode in dataset.iterate_episodes():
        obs = episode.observations
        assert len(episode.rewards) == 8 and episode.truncations[-1] and not episode.terminations.any()
        np.testing.assert_allclose(obs["clock"][:, 0], np.arange(9) / 8)  # the real final observation last
        assert (obs["view"][:, 0, 0, 0] == 10 * np.arange(9)).all() and obs["view"].dtype == np.uint8
        cue = obs["cue"]
        assert (cue == cue[0]).all() and 0 <= cue[0] < 3
        np.testing.assert_array_equal(episode.rewards, (episode.actions == cue[0]).astype(float))
        firsts.add(int(cue[0]))
    assert len(firsts) > 1  # the envs' own cues, not one episode ten times
    # trained on: DQN (prioritized replay) with the dataset preloaded, its Dict observations packed as the slots pack
    # them; the TD errors of the dataset's rows come back with the ring's, and the shard drops them
    summary = train(run_config(tmp_path, "cue_dqn", env=CUE, algo="dqn", num_workers=1, num_envs_per_worker=4,
                               rollout=4, batch_size=32, learning_starts=64, replay_ratio=0.25,
                               train_for_env_steps=512, dataset="minari:test/cue/sampled-v0"))
    [shard] = summary["replay_shards"]
    assert (shard["dataset_size"], shard["dataset_episodes"]) == (80, 10)
    assert shard["served"] > 0 and shard["dataset_rows_drawn"] == shard["served"] * 16
    assert summary["policy_version"] > 0  # trained (a shard that failed on a priority would have failed the run)


def test_frames_are_recorded_exactly_as_the_env_gave_them(tmp_path, monkeypatch):
    """32 x 32 frames, which Minari would JPEG-encode by default: every frame keeps one quadrant at 255 and the rest
    at 0, and each reward says whether the action named the lit quadrant of the frame before it."""
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    train(run_config(tmp_path, "frames", env="daskrl.testing.environments.envs:bright_quadrant",
                     env_kwargs={"size": 32}, sampling_only=True, num_workers=1, num_envs_per_worker=2, rollout=4,
                     train_for_env_steps=0, record_dataset="test/quadrant/sampled-v0", record_episodes=4))
    dataset = minari.load_dataset("test/quadrant/sampled-v0")
    assert dataset.total_episodes == 4
    for episode in dataset.iterate_episodes():
        frames = episode.observations
        assert frames.shape == (9, 32, 32, 1) and frames.dtype == np.uint8
        assert set(np.unique(frames)) == {0, 255} and ((frames == 255).sum(axis=(1, 2, 3)) == 16 * 16).all()
        lit = np.array([2 * (f[:16].max() == 0) + (f[:, :16].max() == 0) for f in frames[:-1, ..., 0]])
        np.testing.assert_array_equal(episode.rewards, (episode.actions == lit).astype(float))


def test_infos_that_are_numbers_are_kept_as_minari_keeps_them(tmp_path, monkeypatch):
    """InfoReportingEnv reports ``distance`` (t / 10) at every step, nothing at its reset (NaN there)."""
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    train(run_config(tmp_path, "infos", env="daskrl.testing.environments.envs:info_reporting", env_kwargs={"limit": 6},
                     sampling_only=True, num_workers=1, num_envs_per_worker=2, rollout=4, train_for_env_steps=0,
                     record_dataset="test/infos/sampled-v0", record_episodes=4))
    dataset = minari.load_dataset("test/infos/sampled-v0")
    for episode in dataset.iterate_episodes():
        np.testing.assert_allclose(episode.infos["distance"], [np.nan, *(np.arange(1, 7) / 10)])
