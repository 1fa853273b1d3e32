"""``--env-backend envpool`` for the gymnasium ids envpool shares (classic control, MuJoCo): its envs step as the
gymnasium envs do from the same state, keep what a time limit cut, refuse what they cannot play in one line, and a
run trains on them (Atari's envpool path: tests/cluster/test_atari.py)."""

from __future__ import annotations

import numpy as np
import pytest

from daskrl.config import Config
from daskrl.envs import probe_env
from daskrl.envs.vector import EnvGroup
from daskrl.errors import EnvError

from ..helpers import (
    assert_cartpole_steps_as_gymnasiums,
    assert_pendulum_cut_keeps_its_final_observation,
    slot_arrays,
    slow,
)

pytest.importorskip("envpool", reason="envpool is not installed (pip install 'daskrl[envpool]')")

from daskrl.envs.groups import check_backend  # noqa: E402
from daskrl.envs.suites.envpool_group import EnvpoolGroup  # noqa: E402


def test_cartpole_steps_as_gymnasiums_cartpole_from_each_state_and_ends_its_episodes_alike():
    """envpool draws its resets from its own generator, so the two cannot start alike; from every state envpool
    reaches, gymnasium's CartPole given that state and the same action lands on envpool's next state (float32)."""
    group = EnvpoolGroup.from_spec("CartPole-v1", 4, seed=1, spaces=probe_env("CartPole-v1"))
    ends, compared = assert_cartpole_steps_as_gymnasiums(group, 4, atol=1e-6)
    assert ends >= 20 and compared > 1000
    group.close()


def test_halfcheetah_from_the_same_state_agrees_with_gymnasiums_until_chaos_separates_them():
    """With no reset noise both start from MuJoCo's initial state; envpool's MuJoCo is its own build, so the same
    actions give the same states to about 1e-14 for tens of steps, after which the dynamics amplify the rounding
    (by step 100 they differ in the fourth digit): the comparison stops at step 20."""
    kwargs = {"reset_noise_scale": 0.0}
    spaces = probe_env("HalfCheetah-v5", kwargs)
    gym_group = EnvGroup.from_spec("HalfCheetah-v5", 2, seed=3, env_kwargs=kwargs, spaces=spaces)
    pool_group = EnvpoolGroup.from_spec("HalfCheetah-v5", 2, seed=3, env_kwargs=kwargs, spaces=spaces)
    a, b = slot_arrays(2, spaces.obs_shape), slot_arrays(2, spaces.obs_shape)
    gym_group.reset(a[0])
    pool_group.reset(b[0])
    np.testing.assert_array_equal(a[0], b[0])
    rng = np.random.default_rng(0)
    for t in range(20):
        actions = rng.uniform(-1.5, 1.5, (2, 6)).astype(np.float32)  # beyond the box: both clip into it
        gym_group.step(actions, *a)
        pool_group.step(actions, *b)
        np.testing.assert_allclose(b[0], a[0], rtol=1e-5, atol=1e-6, err_msg=f"observations at step {t}")
        np.testing.assert_allclose(b[1], a[1], rtol=1e-5, atol=1e-6, err_msg=f"rewards at step {t}")
        assert not (a[2] | a[3] | b[2] | b[3]).any()
    gym_group.close()
    pool_group.close()


def test_a_time_limit_cut_keeps_the_final_observation_and_the_next_episode_starts_at_once():
    group = EnvpoolGroup.from_spec("Pendulum-v1", 3, seed=2, env_kwargs={"max_episode_steps": 20})
    assert_pendulum_cut_keeps_its_final_observation(group, 20)
    group.close()


def test_what_envpool_cannot_play_as_the_gymnasium_path_is_refused_in_one_line():
    check_backend("envpool", "MountainCarContinuous-v0", {})
    check_backend("envpool", "HalfCheetah-v5", {"ctrl_cost_weight": 0.2, "max_episode_steps": 500})
    for env, kwargs, says in (("Taxi-v4", {}, "has no 'Taxi-v4'"),
                              ("HalfCheetah-v5", {"camera": 1}, "cannot pass 'camera' of --env-kwargs")):
        with pytest.raises(EnvError, match=says) as err:
            check_backend("envpool", env, kwargs)
        assert len(str(err.value).splitlines()) == 1
    with pytest.raises(EnvError, match=r"envpool's FrozenLake-v1 observes \(\) .* use --env-backend gymnasium"):
        EnvpoolGroup.from_spec("FrozenLake-v1", 2, seed=0, spaces=probe_env("FrozenLake-v1"))


@slow("a CartPole run on envpool's envs")
def test_a_cartpole_run_on_envpool_learns(tmp_path):
    from daskrl import train

    config = Config().replace(env="CartPole-v1", env_backend="envpool", num_workers=1, num_envs_per_worker=32,
                              train_for_env_steps=0, train_for_seconds=120.0, stop_at_return=400.0,
                              train_dir=str(tmp_path), experiment="envpool", dashboard_address="")
    summary = train(config)
    assert "reached --stop-at-return 400" in summary["stop_reason"], summary["stop_reason"]
    assert summary["episode_return_mean"] >= 400.0 and summary["episodes"] > 100
