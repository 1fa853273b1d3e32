"""The episode recorder (--record-dataset) on real CartPole envs stepped into slot-shaped arrays as a rollout worker
steps them: every recorded transition is one CartPole's physics gives, episodes span slots, each keeps its real final
observation, quotas take each env's first episodes, and an env that raised loses its cut episode."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from daskrl.envs.vector import EnvGroup
from daskrl.sampling.slots.episode_recorder import EpisodeRecorder, episode_recorder, stacked_infos
from daskrl.testing.environments.envs import InfoReportingEnv

ROLLOUT = 8  # shorter than the episodes: most of them span several slots


def fill_slots(group: EnvGroup, recorder: EpisodeRecorder, slots: int) -> None:
    """Step ``group`` through ``slots`` slots of one split, telling ``recorder`` what the rollout worker tells it.
    Each action is a function of its env's observation that looks random (an env's episodes do not depend on which
    group steps it)."""
    n = group.num_envs
    obs = np.zeros((ROLLOUT + 1, n, *group.spaces.obs_shape), np.float32)
    group.reset(obs[0])  # as the rollout worker does before its first step (the envs are tapped by now)
    for _ in range(slots):
        actions = np.zeros((ROLLOUT, n), np.int64)
        rewards = np.zeros((ROLLOUT, n), np.float32)
        terminated, truncated = (np.zeros((ROLLOUT, n), np.uint8) for _ in range(2))
        for t in range(ROLLOUT):
            actions[t] = (np.abs(obs[t, :, 0]) * 1e4).astype(np.int64) % 2
            group.step(actions[t], obs[t + 1], rewards[t], terminated[t], truncated[t])
            recorder.step_taken(0, t)
            for failure in group.pop_failures():
                recorder.env_failed(0, t, failure.env_index)
        recorder.slot_filled(0, obs, actions, rewards, terminated, truncated)
        obs[0] = obs[ROLLOUT]


def physics_problems(episode: tuple) -> list[str]:
    """Where a recorded CartPole episode differs from what CartPole's physics gives from each recorded state."""
    observations, actions, rewards, terminated, truncated, _ = episode
    env = gym.make("CartPole-v1").unwrapped
    env.reset(seed=0)
    problems = []
    for t, action in enumerate(actions):
        env.state = observations[t].astype(np.float64)
        obs, reward, ended, _, _ = env.step(int(action))
        if not np.allclose(obs, observations[t + 1], atol=1e-5) or reward != rewards[t]:
            problems.append(f"step {t}: {observations[t]} -> {observations[t + 1]}, physics gives {obs}")
        last = t == len(actions) - 1
        if bool(terminated[t]) != (ended and last):
            problems.append(f"step {t}: terminated {terminated[t]}, physics says {ended}")
    if not (terminated[-1] or truncated[-1]) or truncated[:-1].any():
        problems.append("the episode does not end at its last step only")
    return problems


def test_recorded_episodes_follow_the_physics_across_slots_with_their_final_observations():
    group = EnvGroup.from_spec("CartPole-v1", 3, seed=1, env_kwargs={"max_episode_steps": 20})
    recorder = EpisodeRecorder([group], [-1] * 3)
    fill_slots(group, recorder, slots=30)
    episodes = recorder.news()["dataset_episodes"]
    assert len(episodes) >= 10
    assert sum(episode[4][-1] for episode in episodes) >= 1, "no episode met the 20-step time limit"
    assert sum(episode[3][-1] for episode in episodes) >= 1
    assert any(len(episode[2]) > ROLLOUT for episode in episodes), "no episode spanned two slots"
    for episode in episodes:
        assert len(episode[0]) == len(episode[1]) + 1  # the final observation
        assert physics_problems(episode) == []
    assert recorder.news()["dataset_episodes"] == []  # handed over once


def test_quotas_record_each_envs_first_episodes_only():
    group = EnvGroup.from_spec("CartPole-v1", 3, seed=2, env_kwargs={"max_episode_steps": 12})
    recorder = EpisodeRecorder([group], [2, 0, 1])
    fill_slots(group, recorder, slots=12)
    recorded = recorder.news()["dataset_episodes"]
    firsts = []  # each env alone (the same seed as in the group), every episode it played, in order
    for env, quota in enumerate([2, 0, 1]):
        alone = EnvGroup.from_spec("CartPole-v1", 1, seed=2, first_env_index=env, env_kwargs={"max_episode_steps": 12})
        everything = EpisodeRecorder([alone], [-1])
        fill_slots(alone, everything, slots=12)
        played = everything.news()["dataset_episodes"]
        assert len(played) > quota
        firsts += played[:quota]
    assert len(recorded) == len(firsts) == 3
    assert recorder.infos[0][1] == [] and sum(map(len, recorder.ended_infos[0])) == 0  # nothing kept past a quota
    key = sorted(episode[0].tobytes() for episode in recorded)
    assert key == sorted(episode[0].tobytes() for episode in firsts)


def test_infos_are_arrays_over_the_reset_and_the_steps_and_an_episode_begun_by_a_rebuilt_env_has_none():
    """InfoReportingEnv reports ``distance`` (t / 10) at every step and a nested dict at an episode's end; its
    reset reports nothing (NaN there). The env that raised loses its cut episode and has no infos for the next one."""
    RaisesAtStep.armed = True
    group = EnvGroup([RaisesAtStep(InfoReportingEnv(limit=12)) for _ in range(2)],
                     rebuild=lambda i: InfoReportingEnv(limit=12), max_consecutive_failures=3)
    recorder = EpisodeRecorder([group], [-1, -1])
    fill_slots(group, recorder, slots=8)
    episodes = recorder.news()["dataset_episodes"]
    with_infos = [e for e in episodes if e[5] is not None]
    assert len(episodes) - len(with_infos) == 1  # the rebuilt env's first episode
    assert len(with_infos) >= 4
    for *_, infos in with_infos:
        assert list(infos) == ["distance"]  # the nested episode_extra_stats is no array over the episode
        np.testing.assert_allclose(infos["distance"], [np.nan, *(np.arange(1, 13) / 10)])


def nested_and_text_infos(steps: int) -> list[dict]:
    """A reset's info, then each step's: a number, a nested dict (whose ``y`` the reset lacks), text, and a list
    that grows (no array over the episode)."""
    reset = {"t": 0, "pose": {"x": 0.0}, "note": "start"}
    return [reset, *({"t": t, "pose": {"x": t / 2, "y": -t}, "note": f"step {t}", "seen": list(range(t))}
                     for t in range(1, steps + 1))]


def test_nested_dicts_and_text_in_infos_are_kept_and_ragged_values_left_out():
    infos = stacked_infos(nested_and_text_infos(3))
    assert list(infos) == ["note", "pose", "t"]  # "seen" grows each step: no array over the episode
    np.testing.assert_array_equal(infos["t"], [0, 1, 2, 3])
    np.testing.assert_array_equal(infos["pose"]["x"], [0.0, 0.5, 1.0, 1.5])
    np.testing.assert_array_equal(infos["pose"]["y"], [np.nan, -1, -2, -3])  # the reset has none: NaN
    assert list(infos["note"]) == ["start", "step 1", "step 2", "step 3"]
    assert stacked_infos([None, *nested_and_text_infos(2)[1:]]) is None  # the reset's not known: no infos


def test_a_dataset_keeps_nested_and_text_infos_that_minari_reads_back(tmp_path, monkeypatch):
    """Through the run's writer into a real Minari dataset: the nested dict as nested arrays, the text as UTF-8."""
    minari = pytest.importorskip("minari", reason="the datasets extra is not installed: pip install 'daskrl[datasets]'")
    from daskrl.config import EnvConfig
    from daskrl.monitor.outputs.dataset_file import DatasetWriter

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    steps = 3
    episode = (np.zeros((steps + 1, 4), np.float32), np.zeros(steps, np.int64), np.ones(steps, np.float32),
               np.array([False, False, True]), np.zeros(steps, bool), stacked_infos(nested_and_text_infos(steps)))
    writer = DatasetWriter("test/cartpole/infos-v0", EnvConfig(env="CartPole-v1"), "nested and text infos")
    writer.take({"dataset_episodes": [episode]})
    writer.close()
    assert writer.error is None, writer.error
    read = next(minari.load_dataset("test/cartpole/infos-v0").iterate_episodes()).infos
    np.testing.assert_array_equal(read["pose"]["x"], [0.0, 0.5, 1.0, 1.5])
    assert [text.decode() for text in read["note"]] == ["start", "step 1", "step 2", "step 3"]


class RaisesAtStep(gym.Wrapper):
    """CartPole that raises at its 5th step after each reset (only while ``armed``)."""

    armed = True

    def reset(self, **kwargs):
        self.steps = 0
        return self.env.reset(**kwargs)

    def step(self, action):
        self.steps += 1
        if RaisesAtStep.armed and self.steps == 5:
            RaisesAtStep.armed = False
            raise RuntimeError("the simulator lost its state")
        return self.env.step(action)


def test_an_env_that_raised_loses_its_cut_episode_and_the_others_stay_whole():
    RaisesAtStep.armed = True  # the first env to reach its 5th step raises there, once
    envs = [RaisesAtStep(gym.make("CartPole-v1", max_episode_steps=15)) for _ in range(2)]
    for i, env in enumerate(envs):
        env.reset(seed=i)
    group = EnvGroup(envs, rebuild=lambda i: RaisesAtStep(gym.make("CartPole-v1", max_episode_steps=15)),
                     max_consecutive_failures=3)
    recorder = EpisodeRecorder([group], [-1, -1])
    fill_slots(group, recorder, slots=10)
    news = recorder.news()
    assert news["dataset_dropped"] == 1
    assert news["dataset_episodes"]
    for episode in news["dataset_episodes"]:
        assert physics_problems(episode) == []


def test_no_recorder_when_no_dataset_is_recorded():
    group = EnvGroup.from_spec("CartPole-v1", 1, seed=0)
    recorder = episode_recorder([group], None)
    assert recorder.news() == {} and group.recorded_finals is None


def test_the_dataset_options_are_refused_where_they_cannot_act():
    from daskrl.config import Config, ConfigError

    for values, problem in [
        ({"sampling_epsilon": 0.1}, "--sampling-epsilon acts in a sampling-only run"),
        ({"sampling_deterministic": True}, "--sampling-deterministic acts in a sampling-only run"),
        ({"record_episodes": 10}, "--record-episodes counts the episodes of --record-dataset"),
        ({"record_dataset": "a/b/c-v0", "env_backend": "envpool"}, "--env-backend gymnasium"),
        ({"record_dataset": "no version"}, "--record-dataset must be a Minari dataset id"),
    ]:
        with pytest.raises(ConfigError, match=problem):
            Config().replace(**values).validate()
    Config().replace(record_dataset="mine/cartpole/expert-v0", record_episodes=5).validate()
    Config().replace(sampling_only=True, sampling_epsilon=0.2, sampling_deterministic=True).validate()


def test_a_multi_agent_env_or_a_taken_id_is_refused_before_a_dataset_is_recorded(tmp_path, monkeypatch):
    from daskrl.config import ConfigError
    from daskrl.driver.launch.preflight import check_recordable
    from daskrl.envs import probe_env

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    pytest.importorskip("minari", reason="the datasets extra is not installed: pip install 'daskrl[datasets]'")
    check_recordable("mine/cartpole/a-v0", "CartPole-v1", probe_env("CartPole-v1"))
    with pytest.raises(ConfigError, match="is a multi-agent env"):
        check_recordable("mine/two/a-v0", "daskrl.testing.environments.envs:twin_cartpoles",
                         probe_env("daskrl.testing.environments.envs:twin_cartpoles"))
    (tmp_path / "mine" / "cartpole" / "a-v0").mkdir(parents=True)
    with pytest.raises(ConfigError, match="a dataset with that id exists"):
        check_recordable("mine/cartpole/a-v0", "CartPole-v1", probe_env("CartPole-v1"))


def test_a_trained_policy_played_by_a_sampling_run_takes_enjoys_actions_with_the_noise_asked():
    from daskrl.config import Config
    from daskrl.driver.fleet.role_setups import sampler_exploration
    from daskrl.envs import probe_env
    from daskrl.sampling.policies.exploration import NoisyActing, exploring
    from daskrl.setups import EpsilonGreedy, SamplingNoise

    cartpole, pendulum = probe_env("CartPole-v1"), probe_env("Pendulum-v1")
    dqn = Config().replace(env="CartPole-v1", algo="dqn")
    assert isinstance(sampler_exploration(dqn, cartpole, 0, 0), EpsilonGreedy)  # training: its own exploration
    played = sampler_exploration(dqn.replace(sampling_only=True, init_checkpoint="x.pt", sampling_epsilon=0.25),
                                 cartpole, 0, 0)
    assert played == SamplingNoise(True, 0.25, 2, (), ())  # DQN plays greedily, as enjoy does
    sac = Config().replace(env="Pendulum-v1", algo="sac", sampling_only=True, init_checkpoint="x.pt")
    assert sampler_exploration(sac, pendulum, 0, 0) == SamplingNoise(False, 0.0, 0, (-2.0,), (2.0,))

    asked = []

    def policy(obs, state=None, deterministic=False):
        asked.append(deterministic)
        return np.full((len(obs), 1), 0.5, np.float32), np.zeros(len(obs), np.float32), None

    greedy = exploring(policy, SamplingNoise(True, 0.0, 0, (-2.0,), (2.0,)), seed=0)
    assert isinstance(greedy, NoisyActing) and np.all(greedy(np.zeros((64, 3)))[0] == 0.5) and asked == [True]
    noisy = exploring(policy, SamplingNoise(False, 0.5, 0, (-2.0,), (2.0,)), seed=0)
    actions = noisy(np.zeros((4000, 3)))[0]
    replaced = actions != 0.5
    assert asked[-1] is False and 0.45 < replaced.mean() < 0.55
    assert actions.min() >= -2.0 and actions.max() <= 2.0 and actions[replaced].std() > 1.0  # uniform in the box
    discrete = exploring(lambda obs, state=None, deterministic=False: (np.zeros(len(obs), np.int64),) * 2 + (None,),
                         SamplingNoise(True, 1.0, 3, (), ()), seed=0)
    assert set(np.unique(discrete(np.zeros((300, 4)))[0])) == {0, 1, 2}


def test_the_last_line_says_when_no_episode_ended_whole_and_no_dataset_was_created():
    from daskrl.datasets.record_command import describe_dataset

    summary = {"dataset": "me/cartpole/x-v0", "dataset_episodes": 0, "dataset_steps": 0}
    assert "Minari dataset me/cartpole/x-v0 was not created" in describe_dataset(summary)
    summary.update(dataset_episodes=3, dataset_steps=60)
    assert describe_dataset(summary).startswith("daskrl: wrote 3 episodes (60 steps) into Minari dataset me/cartpole")
