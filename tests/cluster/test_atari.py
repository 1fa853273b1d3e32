"""The Atari family's training defaults, AleFrames against gymnasium's preprocessing, and the envpool backend
against the gymnasium path."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from daskrl.cli import _config_from_args, build_parser
from daskrl.config import Config
from daskrl.config.env_defaults import apply_env_defaults, describe, family_of
from daskrl.envs import EnvError, EnvGroup, probe_env

from ..helpers import slow

# ---- the Atari family: defaults sized for a 2-core CPU ----


def test_every_atari_game_gets_the_atari_family_and_it_is_printed():
    family = family_of("atari/Pong")
    assert family is not None and family.name == "Atari" and family_of("atari/Breakout") is family
    assert family_of("Pong-v5") is None  # a gymnasium id without the atari/ wrappers is not this family
    line = describe(Config().replace(env="atari/Breakout"))
    assert line.startswith("defaults for Atari envs:") and "--batch-size 256" in line and "--num-envs-per-worker" not in line


def test_the_atari_family_sizes_a_training_step_the_cpu_learner_keeps_up_with():
    config = Config().replace(env="atari/Pong")
    applied = apply_env_defaults(config)
    lrn = config.learner
    # 1,024 samples a step in one pass (the global defaults' 4,096 took a CPU learner several seconds a step)
    assert lrn.batch_size * lrn.num_batches_per_epoch * lrn.num_epochs == 1024
    # the global 2 rollout workers x 32 envs (policy batches of 32: sampling keeps up with the learner), 1 thread
    assert config.sampler.num_workers == 2 and config.sampler.num_envs_per_worker == 32 and lrn.learner_threads == 1
    assert lrn.reward_clip == 1.0 and lrn.entropy_coef == 0.01 and lrn.clip_ratio == 0.1
    assert applied == family_of("atari/Pong").options
    config.validate()


def test_flags_given_on_the_command_line_win_over_the_atari_family():
    args = build_parser().parse_args(["train", "--env", "atari/Pong", "--batch-size", "512", "--num-workers", "2",
                                      "--reward-clip", "0"])
    config = _config_from_args(args)
    applied = apply_env_defaults(config)
    assert config.learner.batch_size == 512 and config.sampler.num_workers == 2 and config.learner.reward_clip == 0
    assert not {"batch_size", "num_workers", "reward_clip"} & set(applied)
    assert config.learner.num_batches_per_epoch == 4 and config.learner.learning_rate == 2.5e-4  # the rest applies
    assert "--batch-size" not in describe(config) and "--clip-ratio 0.1" in describe(config)
    plain = _config_from_args(build_parser().parse_args(["train", "--env", "atari/Pong", "--no-env-defaults"]))
    assert apply_env_defaults(plain) == {} and plain.learner.batch_size == Config().learner.batch_size


# ---- the gymnasium path: ALE stepped directly, as gymnasium's preprocessing steps it ----


@pytest.mark.parametrize("game", ["Breakout", "Pong"])
def test_ale_frames_play_as_gymnasiums_atari_preprocessing_with_sticky_actions_and_no_ops(game):
    """The same seed, the same random actions: every observation, reward, end and info of AleFrames (each emulator
    frame one ``ale.act``) equals gymnasium's AtariPreprocessing over AtariEnv, through game overs and resets, with
    ALE's sticky actions and the random no-ops on (Breakout loses its 5 lives in about 250 random steps)."""
    pytest.importorskip("ale_py", reason="ale-py is not installed (pip install 'daskrl[atari]')")
    import gymnasium as gym

    from daskrl.envs.suites.atari import AleFrames, make_atari

    ours, theirs = make_atari(game), make_atari(game)  # built alike; theirs steps with the parent's step
    assert isinstance(ours.env, AleFrames)
    theirs.env.step = functools.partial(gym.wrappers.AtariPreprocessing.step, theirs.env)
    a, b = ours.reset(seed=11), theirs.reset(seed=11)
    rng, ends, rewarded = np.random.default_rng(0), 0, 0
    for t in range(600):
        np.testing.assert_array_equal(a[0], b[0], err_msg=f"observation at step {t}")
        assert a[1:] == b[1:], (t, a[1:], b[1:])  # (reward, terminated, truncated, info), or a reset's info
        if len(a) == 5 and (a[2] or a[3]):
            ends += 1
            a, b = ours.reset(), theirs.reset()
            continue
        action = int(rng.integers(ours.action_space.n))
        a, b = ours.step(action), theirs.step(action)
        rewarded += a[1] != 0
    assert a[0].std() > 1 and rewarded > 0  # real frames, and points scored or lost
    assert ends >= 1 or game == "Pong", ends
    ours.close()
    theirs.close()


# ---- --env-backend envpool: the same observations as the gymnasium path ----

#: no randomness in either backend (one no-op after a reset, no sticky actions): the same seed, the same pixels
DETERMINISTIC = {"noop_max": 1, "sticky_actions": 0.0}


def _needs_envpool() -> None:
    pytest.importorskip("envpool", reason="envpool is not installed (pip install 'daskrl[envpool]')")
    pytest.importorskip("ale_py", reason="ale-py is not installed (pip install 'daskrl[atari]')")


def _arrays(n: int, shape: tuple) -> tuple[np.ndarray, ...]:
    return np.zeros((n, *shape), np.uint8), np.zeros(n, np.float32), np.zeros(n, bool), np.zeros(n, bool)


def test_envpool_observations_match_the_gymnasium_path_step_for_step_through_episode_ends():
    """Breakout under random actions loses its 5 lives in about 250 steps, so the 400 steps cover game overs and
    the reset in the same step (envpool's own reset comes a call later)."""
    _needs_envpool()
    from daskrl.envs.suites.envpool_group import EnvpoolGroup

    spaces = probe_env("atari/Breakout", DETERMINISTIC)
    gym_group = EnvGroup.from_spec("atari/Breakout", 2, seed=3, env_kwargs=DETERMINISTIC, spaces=spaces)
    pool_group = EnvpoolGroup.from_spec("atari/Breakout", 2, seed=3, env_kwargs=DETERMINISTIC, spaces=spaces)
    a, b = _arrays(2, spaces.obs_shape), _arrays(2, spaces.obs_shape)
    gym_group.reset(a[0])
    pool_group.reset(b[0])
    assert a[0].shape == (2, 84, 84, 4) and a[0].std() > 1  # a real frame
    np.testing.assert_array_equal(a[0], b[0])
    rng = np.random.default_rng(0)
    ends = 0
    for t in range(400):
        actions = rng.integers(0, spaces.num_actions, 2)
        gym_group.step(actions, *a)
        pool_group.step(actions, *b)
        for name, x, y in zip(("obs", "reward", "terminated", "truncated"), a, b, strict=True):
            np.testing.assert_array_equal(x, y, err_msg=f"{name} at step {t}")
        ends += int(a[2].sum())
    assert ends >= 2 and pool_group.pop_episode_stats() == gym_group.pop_episode_stats()
    gym_group.close()
    pool_group.close()


def test_envpool_keeps_the_final_observation_of_an_episode_cut_by_the_time_limit(monkeypatch):
    _needs_envpool()
    from daskrl.envs.suites import envpool_atari
    from daskrl.envs.suites.envpool_group import EnvpoolGroup

    monkeypatch.setitem(envpool_atari._AS_GYMNASIUM, "max_episode_steps", 20)
    group = EnvpoolGroup.from_spec("atari/Pong", 2, seed=1, env_kwargs=DETERMINISTIC)
    obs, rew, term, trunc = _arrays(2, (84, 84, 4))
    group.reset(obs)
    first = obs.copy()
    for _ in range(19):
        group.step(np.array([2, 3]), obs, rew, term, trunc)
    before_end = obs.copy()
    assert not (term | trunc).any()
    group.step(np.array([2, 3]), obs, rew, term, trunc)
    assert trunc.all() and not term.any()
    np.testing.assert_array_equal(obs, first)  # the slot holds the next episode's first observation...
    finals = group.pop_truncations()
    assert [i for i, _ in finals] == [0, 1]
    for i, final in finals:  # ...and the real last one is kept for the bootstrap: one step on from the one before
        assert not np.array_equal(final, first[i])
        np.testing.assert_array_equal(final[..., :3], before_end[i][..., 1:])
    assert group.pop_episode_stats() == [(0.0, 20, 0), (0.0, 20, 1)]  # (return, length, env column)
    group.close()


def test_envpool_is_refused_in_one_line_where_it_cannot_play_as_the_gymnasium_path():
    _needs_envpool()
    from daskrl.envs.groups import check_backend
    from daskrl.envs.suites.envpool_atari import envpool_options

    check_backend("gymnasium", "CartPole-v1", {})  # the default backend plays anything
    task, options = envpool_options("atari/Pong", {"screen_size": 64, "sticky_actions": 0.0})
    assert task == "Pong-v5" and options["img_height"] == options["img_width"] == 64
    assert options["repeat_action_probability"] == 0.0 and not options["use_fire_reset"]
    assert not options["episodic_life"] and options["max_episode_steps"] * 4 == 108_000
    for env, kwargs, says in (("Taxi-v4", {}, "has no 'Taxi-v4'"),
                              ("HalfCheetah-v5", {"frameskip": 2}, "cannot pass 'frameskip' of --env-kwargs"),
                              ("atari/Pong", {"frameskip": 2}, "cannot pass 'frameskip'"),
                              ("atari/Pong", {"noop_max": 0}, "at least one no-op")):
        with pytest.raises(EnvError, match=says) as err:
            check_backend("envpool", env, kwargs)
        assert len(str(err.value).splitlines()) == 1


@slow("an envpool Atari sampling run")
def test_a_sampling_run_with_the_envpool_backend_fills_slots_and_ends_episodes(tmp_path):
    _needs_envpool()
    from daskrl import train

    config = Config().replace(env="atari/Breakout", env_backend="envpool", sampling_only=True, num_workers=1,
                              num_envs_per_worker=8, train_for_seconds=12.0, train_dir=str(tmp_path),
                              experiment="envpool", dashboard_address="")
    summary = train(config)
    assert summary["env_steps"] > 1000 and summary["episodes"] > 0, summary
    assert not any(summary["incidents"].values()), summary["incidents"]


def test_the_cli_refuses_envpool_for_another_env_before_anything_starts(tmp_path, capsys):
    from daskrl.cli import main

    _needs_envpool()
    code = main(["train", "--env", "Taxi-v4", "--env-backend", "envpool", "--train-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "envpool" in err and "has no 'Taxi-v4'" in err, err
    assert not list(tmp_path.iterdir())  # nothing written, no experiment started
