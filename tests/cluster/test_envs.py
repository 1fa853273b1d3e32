"""ViZDoom scenarios end to end, when vizdoom is installed: ``doom/basic``'s frames fill a rollout worker's slots, and
``doom/health_gathering`` with ``game_variables`` gives a Dict observation of the frame and the game's variables;
each is followed by a short sampling run through daskrl.train on its embedded cluster."""

from __future__ import annotations

import numpy as np
import pytest

from daskrl.envs import (
    EnvGroup,
    make_env,
    probe_env,
)

from ..helpers import slow


@slow("a ViZDoom sampling run")
def test_doom_basic_slots_hold_its_frames_and_a_sampling_run_fills_them(tmp_path):
    pytest.importorskip("vizdoom", reason="vizdoom is not installed (pip install 'daskrl[doom]')")
    from daskrl import train
    from daskrl.config import Config
    from daskrl.config.env_defaults import family_of
    from daskrl.sampling.slots.trajectories import SlotLayout

    spaces = probe_env("doom/basic")
    assert spaces.obs_shape == (72, 128, 3) and spaces.obs_dtype == "uint8" and spaces.is_image
    assert spaces.action_kind == "discrete" and spaces.num_actions == 4  # none, left, right, attack
    assert probe_env("doom/deadly_corridor").nvec == [3, 3, 3, 2]  # turn, move, strafe, attack
    shapes = SlotLayout.for_worker(spaces, 4, 1, 8, 2).shapes()
    assert shapes["obs"] == ((2, 9, 4, 72, 128, 3), "uint8") and shapes["actions"] == ((2, 8, 4), "int64")

    group = EnvGroup.from_spec("doom/basic", 2, seed=0)
    obs = np.zeros((2, 72, 128, 3), np.uint8)
    rew, term, trunc = np.zeros(2, np.float32), np.zeros(2, bool), np.zeros(2, bool)
    group.reset(obs)
    assert obs.std() > 10  # a real frame (the room, the monster), not a blank screen
    for _ in range(75):  # basic ends at 300 tics = 75 steps of 4 tics
        group.step(np.array([0, 0]), obs, rew, term, trunc)  # stand still: -1 a tic, summed over the 4 tics of a step
    assert trunc.all() and not term.any()  # a time limit, not a death
    # games stepped from threads record the episodes ending in one step in the order they finished
    assert sorted(group.pop_episode_stats(), key=lambda e: e[2]) == [(-300.0, 75, 0), (-300.0, 75, 1)]
    group.close()

    config = Config().replace(env="doom/basic", sampling_only=True, train_for_seconds=8.0, train_dir=str(tmp_path),
                              experiment="doom", dashboard_address="", num_envs_per_worker=4, num_workers=1)
    assert family_of("doom/basic").options["reward_scale"] == 0.01
    summary = train(config)
    assert summary["env_steps"] > 200 and summary["episodes"] > 0, summary
    assert not any(summary["incidents"].values()), summary["incidents"]


@slow("a ViZDoom sampling run")
def test_doom_game_variables_are_an_observation_key_when_asked(tmp_path):
    """``game_variables``: a Dict of the frame and the scenario's variables (health here), packed into the slots as
    any Dict observation is; the values in the slot are the ones the game reports in ``info``; a short training run
    builds the CNN plus MLP model and samples with it."""
    pytest.importorskip("vizdoom", reason="vizdoom is not installed (pip install 'daskrl[doom]')")
    from daskrl import train
    from daskrl.config import Config
    from daskrl.envs.layouts.dict_obs import unpack

    assert probe_env("doom/health_gathering").is_image  # off by default
    kwargs = {"game_variables": True}
    spaces = probe_env("doom/health_gathering", kwargs)
    assert [k.name for k in spaces.obs_keys] == ["game_variables", "screen"]
    assert spaces.key("screen").shape == (72, 128, 3) and spaces.key("game_variables").shape == (1,)
    env = make_env("doom/health_gathering", seed=1, env_kwargs=kwargs)
    group = EnvGroup([env], spaces=spaces)
    obs = np.zeros((1, *spaces.obs_shape), np.uint8)
    rew, term, trunc = np.zeros(1, np.float32), np.zeros(1, bool), np.zeros(1, bool)
    group.reset(obs)
    healths = []
    for _ in range(40):  # health falls over time in health gathering (the floor hurts)
        group.step(np.array([0]), obs, rew, term, trunc)
        healths.append(float(unpack(obs, spaces.obs_keys)["game_variables"][0, 0]))
        assert healths[-1] == env.unwrapped._variables["HEALTH"]
    assert healths[0] > healths[-1] and unpack(obs, spaces.obs_keys)["screen"].std() > 10
    group.close()
    summary = train(Config().replace(env="doom/health_gathering", env_kwargs=kwargs, sampling_only=True,
                                     train_for_seconds=8.0, train_dir=str(tmp_path), experiment="doomvars",
                                     dashboard_address="", num_envs_per_worker=4, num_workers=1))
    assert summary["env_steps"] > 100 and not any(summary["incidents"].values()), summary
