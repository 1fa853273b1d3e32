"""``--env-backend jax``: gymnax's envs stepped in one jitted call step as gymnasium's do from the same state, end and
restart their episodes as the slots expect, give gymnasium's episode statistics, rebuild after a step that raised,
refuse what they cannot play in one line, and a run trains on them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from daskrl.config import Config
from daskrl.envs import probe_env
from daskrl.errors import EnvError, EnvStepError

from ..helpers import (
    assert_cartpole_steps_as_gymnasiums,
    assert_pendulum_cut_keeps_its_final_observation,
    slot_arrays,
    slow,
)

pytest.importorskip("gymnax", reason="gymnax is not installed (pip install 'daskrl[jax]', then pip install "
                                     "--no-deps gymnax)")

from daskrl.envs.groups import check_backend  # noqa: E402
from daskrl.envs.suites.jax_group import JaxGroup  # noqa: E402


def test_cartpole_steps_as_gymnasiums_cartpole_from_each_state_and_ends_its_episodes_alike():
    """JAX draws its first states from its own keys, so the two cannot start alike; from every state gymnax reaches,
    gymnasium's CartPole given that state and the same action lands on gymnax's next state (gymnax computes in
    float32, gymnasium in float64: agreement to float32's rounding)."""
    group = JaxGroup.from_spec("CartPole-v1", 8, seed=1, spaces=probe_env("CartPole-v1"))
    ends, compared = assert_cartpole_steps_as_gymnasiums(group, 8, atol=1e-5, first_state_bound=0.05)
    assert ends >= 40 and compared > 2000
    group.close()


def test_random_cartpole_episodes_last_as_long_as_gymnasiums():
    """The same policy (uniformly random) gives the same distribution of episode lengths on both backends: over
    1,500 episodes each, the means agree within 10% (about 8 standard errors: random CartPole lasts 22 +- 12 steps)."""
    import gymnasium as gym

    group = JaxGroup.from_spec("CartPole-v1", 64, seed=3)
    obs, reward, terminated, truncated = slot_arrays(64, (4,))
    group.reset(obs)
    rng, lengths = np.random.default_rng(1), []
    while len(lengths) < 1500:
        group.step(rng.integers(0, 2, 64), obs, reward, terminated, truncated)
        lengths += [length for _, length, _ in group.pop_episode_stats()]
    env, reference = gym.make("CartPole-v1"), []
    env.reset(seed=3)
    env.action_space.seed(3)
    length = 0
    while len(reference) < 1500:
        _, _, done, cut, _ = env.step(env.action_space.sample())
        length += 1
        if done or cut:
            reference.append(length)
            length = 0
            env.reset()
    assert math.isclose(np.mean(lengths), np.mean(reference), rel_tol=0.1), (np.mean(lengths), np.mean(reference))
    assert min(lengths) >= 8 and max(lengths) <= 500


def test_a_time_limit_cut_keeps_the_final_observation_and_the_next_episode_starts_at_once():
    group = JaxGroup.from_spec("Pendulum-v1", 3, seed=2, spaces=probe_env("Pendulum-v1"))
    assert_pendulum_cut_keeps_its_final_observation(group, 200)
    group.close()


def test_env_seeds_give_repeatable_first_states_and_each_env_its_own():
    def first_states(seed: int, worker: int) -> np.ndarray:
        obs = slot_arrays(4, (4,))[0]
        JaxGroup.from_spec("CartPole-v1", 4, seed=seed, worker_index=worker).reset(obs)
        return obs

    assert np.array_equal(first_states(5, 0), first_states(5, 0))
    assert not np.array_equal(first_states(5, 0), first_states(5, 1))
    assert len({tuple(row) for row in first_states(5, 0)}) == 4


def test_a_step_that_raises_restarts_the_group_and_past_the_limit_stops_the_run():
    """As the gymnasium backend rebuilds an env that raised: every env of the group restarts from new keys, the
    step's rows end as truncated, a failure per env is reported; with rebuilding off, the error stops the run."""
    group = JaxGroup.from_spec("CartPole-v1", 4, seed=0, max_consecutive_failures=2)
    obs, reward, terminated, truncated = slot_arrays(4, (4,))
    group.reset(obs)
    for _ in range(5):
        group.step(np.ones(4, np.int64), obs, reward, terminated, truncated)
    working_step = group._step

    def raising_step(*args):
        raise RuntimeError("XlaRuntimeError: the env's step failed")

    group._step = raising_step
    group.step(np.ones(4, np.int64), obs, reward, terminated, truncated)
    assert truncated.all() and not terminated.any() and not reward.any()
    assert np.abs(obs).max() <= 0.05  # restarted: CartPole's first states
    failures = group.pop_failures()
    assert [f.env_index for f in failures] == [0, 1, 2, 3] and "the env's step failed" in failures[0].summary
    assert group.pop_episode_stats() == []  # the cut episodes are dropped, as an env that raised loses its own
    group._step = working_step
    group.step(np.ones(4, np.int64), obs, reward, terminated, truncated)
    assert not truncated.any() and reward.all()
    strict = JaxGroup.from_spec("CartPole-v1", 2, seed=0)
    strict.reset(slot_arrays(2, (4,))[0])
    strict._step = raising_step
    with pytest.raises(EnvStepError, match="the env's step failed"):
        strict.step(np.ones(2, np.int64), *slot_arrays(2, (4,)))


def test_what_gymnax_cannot_play_as_the_gymnasium_path_is_refused_in_one_line():
    check_backend("jax", "Acrobot-v1", {})
    for env, kwargs, says in (("LunarLander-v3", {}, "plays the gymnasium ids gymnax has"),
                              ("CartPole-v1", {"sutton_barto_reward": True}, "cannot pass --env-kwargs")):
        with pytest.raises(EnvError, match=says) as err:
            check_backend("jax", env, kwargs)
        assert len(str(err.value).splitlines()) == 1


@slow("a CartPole run on gymnax's envs")
def test_a_cartpole_run_on_the_jax_backend_learns(tmp_path):
    from daskrl import train

    config = Config().replace(env="CartPole-v1", env_backend="jax", num_workers=1, num_envs_per_worker=32,
                              train_for_env_steps=0, train_for_seconds=120.0, stop_at_return=400.0,
                              train_dir=str(tmp_path), experiment="jax", dashboard_address="")
    summary = train(config)
    assert "reached --stop-at-return 400" in summary["stop_reason"], summary["stop_reason"]
    assert summary["episode_return_mean"] >= 400.0 and summary["episodes"] > 100
