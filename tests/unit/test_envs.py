"""Envs without a run: specs and the one-line errors of a bad one, seeds, spaces, EnvGroup bookkeeping (autoreset,
episode stats, clipped actions, an env that raises in its thread), the built-in test envs (Counting, Catch, light),
Atari's frame stacks, ViZDoom scenarios when vizdoom is installed, and the env families' default options."""

from __future__ import annotations

import pickle

import gymnasium as gym
import msgpack
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from daskrl.envs import (
    CatchEnv,
    EnvError,
    EnvGroup,
    EnvSpaces,
    EnvStepError,
    env_seed,
    make_env,
    probe_env,
    register_env,
    registered_factory,
)

COUNTING = "daskrl/Counting-v0"


CATCH = "daskrl/Catch-v0"


def _buffers(group: EnvGroup) -> tuple[np.ndarray, ...]:
    n, sp = group.num_envs, group.spaces
    return (
        np.zeros((n, *sp.obs_shape), dtype=sp.obs_dtype),
        np.zeros(n, dtype=np.float32),
        np.zeros(n, dtype=bool),
        np.zeros(n, dtype=bool),
    )


def _boom_factory(**kwargs):
    raise RuntimeError("simulator license expired")


class _StepFails(gym.Env):
    observation_space = gym.spaces.Box(0.0, 1.0, shape=(2,), dtype=np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action):
        raise ValueError("bad physics\nsecond line")


class _RecordAction(gym.Env):
    """Box-action env that remembers the last action it received."""

    observation_space = gym.spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
    action_space = gym.spaces.Box(-1.0, 2.0, shape=(2,), dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, dtype=np.float32), {}

    def step(self, action):
        self.last_action = np.array(action, copy=True)
        return np.zeros(1, dtype=np.float32), 0.0, False, False, {}


def test_unknown_gym_id_suggests_closest():
    with pytest.raises(EnvError) as info:
        make_env("CartPol-v1")
    msg = str(info.value)
    assert "Unknown environment 'CartPol-v1'" in msg
    assert "register_env" in msg and "module:factory" in msg
    assert "did you mean 'CartPole-v1'?" in msg
    assert isinstance(info.value, ValueError)


def test_unknown_id_suggests_registered_daskrl_env():
    with pytest.raises(EnvError, match="did you mean 'daskrl/Counting-v0'"):
        make_env("daskrl/Countng-v0")


def test_unknown_id_without_match_says_how_to_fix():
    with pytest.raises(EnvError, match="register it with daskrl.register_env"):
        make_env("zzzzqqqq")


def test_module_factory_spec_with_kwargs():
    env = make_env("daskrl.envs.suites.demo:CountingEnv", env_kwargs={"episode_length": 2})
    obs, _ = env.reset()
    env.step(0)
    _, _, terminated, _, _ = env.step(0)
    assert terminated
    assert obs.tolist() == [0.0, -1.0, 0.0]


def test_gymnasium_id_and_render_mode():
    env = make_env("CartPole-v1", seed=3, render_mode="rgb_array")
    assert env.render_mode == "rgb_array"
    assert env.spec.id == "CartPole-v1"
    env.close()


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("no_such_pkg_xyz.mod:make", "cannot import module 'no_such_pkg_xyz.mod'"),
        ("daskrl.envs.suites.demo:NoSuchFactory", "has no attribute 'NoSuchFactory'"),
        ("daskrl.envs.suites.demo:CatchEnv.SIZE", "'CatchEnv.SIZE' is a int, not a callable"),
        (":factory", "must look like 'package.module:factory'"),
    ],
)
def test_bad_module_paths(spec, expected):
    with pytest.raises(EnvError, match=expected):
        make_env(spec)


def test_raising_factory_gives_clear_chained_error():
    register_env("test/Boom-v0", _boom_factory)
    with pytest.raises(EnvError) as info:
        make_env("test/Boom-v0")
    assert (
        str(info.value)
        == "Environment 'test/Boom-v0' failed to build: RuntimeError: simulator license expired"
    )
    assert isinstance(info.value.__cause__, RuntimeError)


def test_bad_kwargs_reported_as_build_failure():
    with pytest.raises(EnvError, match=r"'daskrl/Counting-v0' failed to build: TypeError"):
        make_env(COUNTING, env_kwargs={"no_such_kwarg": 1})


def test_env_seed_distinct_and_deterministic():
    seeds = {env_seed(7, w, e) for w in range(16) for e in range(64)}
    assert len(seeds) == 16 * 64
    assert all(0 <= s < 2**31 for s in seeds)
    assert env_seed(7, 3, 5) == env_seed(7, 3, 5)
    other_run = {env_seed(8, w, e) for w in range(16) for e in range(64)}
    assert len(seeds & other_run) < 5
    with pytest.raises(ValueError):
        env_seed(0, 0, -1)


def test_seeded_envs_reproduce_and_differ():
    def first_ball_columns(seed: int) -> list[int]:
        env = make_env(CATCH, seed=seed)
        cols = []
        for _ in range(5):
            obs, _ = env.reset()
            cols.append(int(np.argmax(obs[0:4, :, 0].max(axis=0))))
        return cols

    assert first_ball_columns(1) == first_ball_columns(1)
    assert first_ball_columns(1) != first_ball_columns(2)


def test_probe_env_reads_spaces():
    spaces = probe_env(COUNTING)
    assert spaces.obs_shape == (3,) and spaces.action_kind == "discrete" and spaces.num_actions == 3
    assert probe_env(CATCH).is_image


@pytest.mark.parametrize("spec", ["CartPole-v1", "Pendulum-v1", CATCH, COUNTING])
def test_spaces_msgpack_round_trip(spec):
    spaces = probe_env(spec)
    decoded = msgpack.unpackb(msgpack.packb(spaces.to_dict()))
    assert EnvSpaces.from_dict(decoded) == spaces


def test_box_and_multidiscrete_spaces():
    box = probe_env("Pendulum-v1")
    assert (box.action_kind, box.action_shape, box.low, box.high) == ("box", (1,), [-2.0], [2.0])
    assert not box.is_image
    md = EnvSpaces.from_spaces(
        gym.spaces.Box(0, 1, shape=(4,), dtype=np.float32), gym.spaces.MultiDiscrete([3, 5])
    )
    assert (md.action_kind, md.nvec, md.action_shape) == ("multi_discrete", [3, 5], (2,))
    assert EnvSpaces.from_dict(msgpack.unpackb(msgpack.packb(md.to_dict()))) == md


@pytest.mark.parametrize(
    "obs_space",
    [
        # as spaces alone (a multi-agent env's agents'); a single-agent env's come as a Dict (tests/test_index_obs.py)
        gym.spaces.Discrete(4),
        gym.spaces.Tuple((gym.spaces.Discrete(2),)),
        gym.spaces.Text(5),
    ],
)
def test_unsupported_obs_space_names_what_daskrl_takes(obs_space):
    with pytest.raises(EnvError, match=type(obs_space).__name__) as info:
        EnvSpaces.from_spaces(obs_space, gym.spaces.Discrete(2))
    assert "daskrl takes Box, MultiBinary and Dict observations" in str(info.value)
    assert "wrap the env" in str(info.value)


def test_unsupported_action_space():
    # a Dict of Discrete is supported now (tests/test_action_spaces.py); a Text space is not
    with pytest.raises(EnvError, match="Unsupported action space"):
        EnvSpaces.from_spaces(gym.spaces.Box(0, 1, shape=(2,)), gym.spaces.Text(4))


def test_envgroup_obs_follows_action_and_autoreset_marks():
    length = 4
    group = EnvGroup.from_spec(COUNTING, 3, seed=0, env_kwargs={"episode_length": length})
    obs, rew, term, trunc = _buffers(group)
    group.reset(obs)
    assert obs[:, 0].tolist() == [0, 0, 0] and obs[:, 1].tolist() == [-1, -1, -1]
    start_episode = obs[:, 2].copy()

    rng = np.random.default_rng(0)
    for t in range(3 * length):
        step_in_ep = t % length
        actions = rng.integers(0, 3, size=3)
        prev_episode = obs[:, 2].copy()
        group.step(actions, obs, rew, term, trunc)
        np.testing.assert_array_equal(rew, (actions == step_in_ep % 3).astype(np.float32))
        assert not trunc.any()
        if step_in_ep == length - 1:
            # Episode ended: flagged, and obs is already the new episode's first observation.
            assert term.all()
            assert obs[:, 0].tolist() == [0, 0, 0] and obs[:, 1].tolist() == [-1, -1, -1]
            np.testing.assert_array_equal(obs[:, 2], prev_episode + 1)
        else:
            assert not term.any()
            np.testing.assert_array_equal(obs[:, 0], step_in_ep + 1)
            np.testing.assert_array_equal(obs[:, 1], actions)
    np.testing.assert_array_equal(obs[:, 2], start_episode + 3)
    assert group.finished_episodes and len(group.finished_episodes) == 9


def test_envgroup_episode_stats():
    group = EnvGroup.from_spec(COUNTING, 2, env_kwargs={"episode_length": 3})
    obs, rew, term, trunc = _buffers(group)
    group.reset(obs)
    # Env 0 plays optimally (action == step % 3), env 1 always plays 2 (right only at step 2).
    for t in range(3):
        group.step(np.array([t % 3, 2]), obs, rew, term, trunc)
    stats = group.pop_episode_stats()
    assert sorted(stats) == [(1.0, 3, 1), (3.0, 3, 0)]  # (return, length, env column)
    assert group.pop_episode_stats() == []
    group.step(np.array([0, 0]), obs, rew, term, trunc)
    assert group.finished_episodes == []


def test_envgroup_clips_box_actions():
    env = _RecordAction()
    group = EnvGroup([env])
    obs = np.zeros((1, 1), dtype=np.float32)
    group.reset(obs)
    r, t, tr = np.zeros(1), np.zeros(1, bool), np.zeros(1, bool)
    group.step(np.array([[5.0, -3.0]]), obs, r, t, tr)
    np.testing.assert_array_equal(env.last_action, [2.0, -1.0])


def test_envgroup_passes_discrete_actions_as_numpy_scalars_like_gymnasium_vector_envs():
    seen = []

    class _Spy(_StepFails):
        def step(self, action):
            seen.append(action)
            return np.zeros(2, dtype=np.float32), 0.0, False, False, {}

    group = EnvGroup([_Spy(), _Spy()])
    obs, rew, term, trunc = _buffers(group)
    group.reset(obs)
    group.step(np.array([1, 0], dtype=np.int64), obs, rew, term, trunc)
    assert seen == [1, 0] and all(type(a) is np.int64 for a in seen)
    # the same type SyncVectorEnv hands its envs, so an env that works there works here
    space = gym.spaces.MultiDiscrete([2, 2])
    assert [type(a) for a in gym.vector.utils.iterate(space, np.array([1, 0]))] == [np.int64, np.int64]


def test_envgroup_step_error_names_env_and_is_picklable():
    group = EnvGroup([make_env(COUNTING), _StepFails()], spaces=probe_env(COUNTING))
    obs = np.zeros((2, 3), dtype=np.float32)
    group.envs[1].reset()
    rew, term, trunc = np.zeros(2), np.zeros(2, bool), np.zeros(2, bool)
    with pytest.raises(EnvStepError) as info:
        group.step(np.array([0, 1]), obs, rew, term, trunc)
    err = info.value
    assert err.env_index == 1 and err.phase == "step"
    assert "ValueError: bad physics second line" in str(err)
    assert "\n" not in str(err) and "test_envs.py" in str(err)
    assert isinstance(err.__cause__, ValueError)
    clone = pickle.loads(pickle.dumps(err))
    assert str(clone) == str(err) and clone.env_index == 1


@pytest.mark.parametrize("spec", [COUNTING, CATCH])
def test_builtin_envs_pass_gymnasium_checker(spec):
    check_env(make_env(spec), skip_render_check=True)


def test_catch_frames_show_ball_and_paddle_and_episode_ends():
    env = make_env(CATCH, seed=5, render_mode="rgb_array")
    obs, _ = env.reset()
    assert obs.shape == (84, 84, 1) and obs.dtype == np.uint8
    ball_cols = np.flatnonzero(obs[0:4, :, 0].max(axis=0) == 255)
    assert len(ball_cols) == CatchEnv.BALL
    paddle_cols = np.flatnonzero(obs[-1, :, 0] == 255)
    assert paddle_cols.tolist() == list(range(36, 48))
    assert obs[4:80].max() == 0  # nothing between the ball and the paddle rows

    frame = env.render()
    assert frame.shape == (84, 84, 3) and frame.dtype == np.uint8
    np.testing.assert_array_equal(frame[..., 0], obs[..., 0])

    # Track the ball with the paddle: caught after ~19 steps.
    steps, terminated, reward = 0, False, 0.0
    while not terminated:
        paddle_center = env.unwrapped.paddle_x + CatchEnv.PADDLE_WIDTH / 2
        ball_center = env.unwrapped.ball_x + CatchEnv.BALL / 2
        action = 1 if abs(ball_center - paddle_center) < 2 else (2 if ball_center > paddle_center else 0)
        obs, reward, terminated, truncated, _ = env.step(action)
        steps += 1
        assert steps <= 30 and not truncated
    assert steps == 19 and reward == 1.0
    assert obs[76:80, ball_cols, 0].min() == 255  # the ball sits just above the paddle


def test_catch_miss_gives_minus_one():
    env = make_env(CATCH, seed=0)
    env.reset()
    env.unwrapped.ball_x = 0  # far left; running right can never catch it
    total, terminated = 0.0, False
    while not terminated:
        _, r, terminated, _, _ = env.step(2)
        total += r
    assert total == -1.0


def test_atari_frames_are_stacked_hwc_newest_last_and_seeded():
    env = make_env("atari/Breakout", seed=7)
    obs, _ = env.reset(seed=7)
    assert obs.shape == (84, 84, 4) and obs.dtype == np.uint8 and env.observation_space.contains(obs)
    assert all(np.array_equal(obs[..., 0], obs[..., k]) for k in range(4)), "reset fills the stack with one frame"
    assert obs.std() > 0, "a blank frame: the game did not render"
    frames = [obs]
    for _ in range(6):
        obs, reward, terminated, truncated, _ = env.step(1)  # FIRE: the ball is served and moves
        assert not (terminated or truncated)
        frames.append(obs)
    for before, after in zip(frames[:-1], frames[1:], strict=True):
        np.testing.assert_array_equal(after[..., :3], before[..., 1:])  # the stack shifts by one frame per step
    assert not np.array_equal(frames[-1][..., 3], frames[-1][..., 0]), "four steps apart, the frames are equal"
    again = make_env("atari/Breakout", seed=7)
    np.testing.assert_array_equal(again.reset(seed=7)[0], frames[0])


class _CountingFrames(gym.Env):
    """2-D uint8 frames whose every pixel differs per step, so a stack shows which frame sits where."""

    observation_space = gym.spaces.Box(0, 255, (5, 6), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def _frame(self) -> np.ndarray:
        return ((np.arange(30).reshape(5, 6) * 7 + 37 * self.t) % 256).astype(np.uint8)

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return self._frame(), {}

    def step(self, action):
        self.t += 1
        return self._frame(), 0.0, False, False, {}


@pytest.mark.parametrize("num_frames", [4, 3])  # 4: one uint32 per pixel; 3: the strided copy
def test_frame_stack_holds_the_last_frames_newest_last(num_frames):
    from daskrl.envs.suites.atari import StackFramesHwc

    inner = _CountingFrames()
    env = StackFramesHwc(inner, num_frames)
    obs, _ = env.reset()
    seen = [inner._frame()]
    stacks = [obs]
    for _ in range(7):
        obs, *_ = env.step(0)
        seen.append(inner._frame())
        stacks.append(obs)
    stacks[0][:] = 0  # a caller writing into an observation must not change the ones after it
    for t, stack in enumerate(stacks[1:], start=1):
        assert stack.shape == (5, 6, num_frames) and stack.dtype == np.uint8
        for k in range(num_frames):  # channel k holds the frame of step t - (num_frames - 1 - k), reset-filled
            np.testing.assert_array_equal(stack[..., k], seen[max(0, t - (num_frames - 1 - k))])


def test_atari_game_names_are_registered_and_a_typo_suggests_the_game():
    assert all(registered_factory(f"atari/{game}") is not None for game in ("Breakout", "Pong", "SpaceInvaders"))
    with pytest.raises(EnvError, match="atari/Breakout"):
        make_env("atari/Breakot")


def test_a_family_fills_only_the_options_the_user_did_not_set():
    from daskrl.config import Config
    from daskrl.config.env_defaults import apply_env_defaults, describe, family_of

    assert family_of("HalfCheetah-v5").name == "MuJoCo" and family_of("gymnasium:Walker2d-v5").name == "MuJoCo"
    assert family_of("Hopper-v5").name == "MuJoCo"  # its own settings come from a rule of the family, not a name
    assert family_of("CartPole-v1") is None and family_of("Pendulum-v1").name == "Pendulum"
    config = Config().replace(env="HalfCheetah-v5", learning_rate=1e-3)  # given: it wins
    family = family_of("HalfCheetah-v5")
    applied = apply_env_defaults(config)
    assert "learning_rate" not in applied and config.learner.learning_rate == 1e-3
    assert applied and all(config.flat()[k] == v for k, v in applied.items())
    assert config.learner.num_epochs == family.options["num_epochs"]
    config.validate()  # a family's values are valid options
    assert "defaults for MuJoCo envs" in describe(config) and "--num-epochs" in describe(config)
    plain = Config().replace(env="HalfCheetah-v5", env_defaults=False)
    assert apply_env_defaults(plain) == {} and plain.learner.num_epochs == Config().learner.num_epochs
    # a config file names every option: nothing of a family overrides a saved run's settings
    saved = Config.from_json(Config().replace(env="Hopper-v5").to_json())
    assert apply_env_defaults(saved) == {}


def test_a_family_rule_reads_the_task_not_its_name():
    """The MuJoCo family gives CleanRL's recipe to a task whose random episodes end by termination at once (a body
    that falls: Hopper, Walker2d), whatever its name; a task that does not fall (HalfCheetah) or falls slowly (Ant)
    keeps the family's settings."""
    from daskrl.config import Config
    from daskrl.config.env_defaults import apply_env_defaults
    from daskrl.config.task_profile import TaskProfile

    falls = TaskProfile(horizon=1000, random_length=22.0, terminated_share=1.0)
    slowly = TaskProfile(horizon=1000, random_length=153.0, terminated_share=0.93)
    never = TaskProfile(horizon=1000, random_length=1000.0, terminated_share=0.0)
    assert falls.falls_at_once and not slowly.falls_at_once and not never.falls_at_once
    for env, profile, sync, hidden in [("Swimmer-v5", falls, True, [64, 64]), ("Hopper-v5", never, False, [256, 256]),
                                       ("Ant-v5", slowly, False, [256, 256])]:
        config = Config().replace(env=env)
        apply_env_defaults(config, profile)
        assert (config.learner.sync, config.model.hidden_sizes) == (sync, hidden), env
        config.validate()
    given = Config().replace(env="Hopper-v5", gamma=0.999)  # an option the user gave still wins over the rule
    apply_env_defaults(given, falls)
    assert given.learner.gamma == 0.999 and given.learner.sync


def test_a_task_profile_is_measured_from_random_play():
    from daskrl.envs.task_probe import profile_task

    cartpole = profile_task("CartPole-v1")
    assert cartpole.horizon == 500 and cartpole.terminated_share == 1.0 and 10 < cartpole.random_length < 40
    pendulum = profile_task("Pendulum-v1")  # no termination: every episode runs to its 200-step limit
    assert pendulum.terminated_share == 0.0 and pendulum.random_length == 200 and not pendulum.falls_at_once
    assert profile_task("CartPole-v1") is cartpole  # measured once


def test_a_sampling_only_run_keeps_every_rollout_worker_the_family_gave_to_the_learner():
    """The MuJoCo families' single rollout worker leaves a core to the learner; `daskrl sample` has no learner, so
    it keeps the global worker count (and so measures the sampler's ceiling)."""
    from daskrl.config import Config
    from daskrl.config.env_defaults import apply_env_defaults

    training = Config().replace(env="HalfCheetah-v5")
    assert apply_env_defaults(training)["num_workers"] == 1
    config = Config().replace(env="HalfCheetah-v5", sampling_only=True)
    applied = apply_env_defaults(config)
    assert "num_workers" not in applied and config.sampler.num_workers == Config().sampler.num_workers
    assert config.learner.batch_size == training.learner.batch_size != Config().learner.batch_size  # the rest applies


def test_every_family_sets_valid_options():
    from daskrl.config import Config
    from daskrl.config.env_defaults import FAMILIES

    defaults = Config().flat()
    for family in FAMILIES:
        Config().replace(**family.options).validate()
        # a family names only what differs: an option at its global value would be noise in the printed line
        assert not [k for k, v in family.options.items() if defaults[k] == v], family.name


def test_an_unknown_doom_scenario_is_one_line_naming_the_known_ones():
    with pytest.raises(EnvError) as err:  # no vizdoom needed: the names are registered without importing it
        make_env("doom/basics")
    message = str(err.value)
    assert len(message.splitlines()) == 1, message
    assert all(f"doom/{name}" in message for name in ("basic", "defend_the_center", "health_gathering",
                                                        "my_way_home", "deadly_corridor", "defend_the_line", "battle"))


def test_doom_health_gathering_adds_one_per_health_gain_and_reports_the_game_return():
    pytest.importorskip("vizdoom", reason="vizdoom is not installed (pip install 'daskrl[doom]')")
    env = make_env("doom/health_gathering", seed=5)
    rng = np.random.default_rng(0)
    gains = 0
    for _ in range(3):
        _, info = env.reset()
        health, shaped, done = info["HEALTH"], 0.0, False
        while not done:  # mostly forward (action 3), turning now and then: medkits get picked up
            _, reward, terminated, truncated, info = env.step(3 if rng.random() < 0.7 else int(rng.integers(0, 5)))
            done = terminated or truncated
            if not done:
                gains += info["HEALTH"] > health
                shaped += reward - (info["HEALTH"] > health)
                health = info["HEALTH"]
            else:
                shaped += reward
        # the game's own return (living reward, death penalty) is what remains once the +1s are taken off
        assert info["episode_extra_stats"]["true_objective"] == pytest.approx(shaped)
    env.close()
    assert gains > 0  # the shaping was exercised


def test_doom_games_step_from_a_thread_each_as_they_would_in_turn():
    """VizDoom releases the GIL while a game computes, so a group steps its games from a thread each: the same
    observations, rewards and episode ends as stepping them one after the other, from the same seeds and actions."""
    pytest.importorskip("vizdoom", reason="vizdoom is not installed (pip install 'daskrl[doom]')")
    threaded, in_turn = EnvGroup.from_spec("doom/basic", 3, seed=4), EnvGroup.from_spec("doom/basic", 3, seed=4)
    assert threaded._threads is not None
    in_turn._threads.shutdown()
    in_turn._threads = None
    results = []
    for group in (threaded, in_turn):
        obs = np.zeros((3, 72, 128, 3), np.uint8)
        group.reset(obs)
        frames, rewards, ends = [], np.zeros(3, np.float32), np.zeros(3, bool)
        steps = []
        for t in range(60):
            group.step(np.array([t % 4, 3, (t // 3) % 4]), obs, rewards, ends, np.zeros(3, bool))
            frames.append(obs.copy())
            steps.append((rewards.copy(), ends.copy()))
        results.append((frames, steps, sorted(group.pop_episode_stats())))
        group.close()
    (frames_a, steps_a, episodes_a), (frames_b, steps_b, episodes_b) = results
    assert episodes_a == episodes_b and episodes_a, "no episode ended: the comparison would miss the resets"
    for a, b in zip(frames_a, frames_b, strict=True):
        np.testing.assert_array_equal(a, b)
    for (ra, ea), (rb, eb) in zip(steps_a, steps_b, strict=True):
        np.testing.assert_array_equal(ra, rb)
        np.testing.assert_array_equal(ea, eb)


class _RaisingRemoteEnv(gym.Env):
    """An env that says it steps in another process, and raises at its third step when asked to."""

    daskrl_steps_in_another_process = True
    observation_space = gym.spaces.Box(0, 1, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, fail: bool) -> None:
        self.fail, self.steps = fail, 0

    def reset(self, *, seed=None, options=None):
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.steps += 1
        if self.fail and self.steps == 3:
            raise RuntimeError("the game went away")
        return np.ones(2, np.float32), 1.0, False, False, {}


def test_an_env_that_raises_in_its_thread_is_one_line_naming_it_or_rebuilt():
    group = EnvGroup([_RaisingRemoteEnv(False), _RaisingRemoteEnv(True)])
    assert group._threads is not None
    outs = (np.zeros((2, 2), np.float32), np.zeros(2, np.float32), np.zeros(2, bool), np.zeros(2, bool))
    group.reset(outs[0])
    with pytest.raises(EnvStepError, match="env 1 raised in step: RuntimeError: the game went away"):
        for _ in range(3):
            group.step(np.zeros(2, np.int64), *outs)
    group.close()
    rebuilt = EnvGroup([_RaisingRemoteEnv(False), _RaisingRemoteEnv(True)], rebuild=lambda i: _RaisingRemoteEnv(False),
                       max_consecutive_failures=2)
    rebuilt.reset(outs[0])
    for _ in range(4):
        rebuilt.step(np.zeros(2, np.int64), *outs)
    assert [f.env_index for f in rebuilt.pop_failures()] == [1]
    rebuilt.close()


def test_doom_frames_are_resized_by_nearest_neighbour_as_sample_factorys():
    """Every pixel of the 128x72 observation is a pixel of the game's 160x120 frame (Sample Factory's resize, the
    cheap one): area interpolation would blend neighbours into values the frame does not hold there."""
    pytest.importorskip("vizdoom", reason="vizdoom is not installed (pip install 'daskrl[doom]')")
    env = make_env("doom/basic", seed=3)
    obs, _ = env.reset()
    for _ in range(5):
        obs, *_ = env.step(1)  # move: the view changes
    frame = env.unwrapped._frame  # the game's last screen
    env.close()
    rows = (np.arange(72) * 120) // 72  # the source pixel nearest-neighbour resizing takes for each target pixel
    cols = (np.arange(128) * 160) // 128
    assert obs.shape == (72, 128, 3)
    np.testing.assert_array_equal(obs, frame[rows][:, cols])


def test_the_light_env_has_fixed_episodes_and_a_known_best_return():
    """daskrl.testing.environments.envs:light (benchmarks/scale_simulation.py): a valid gymnasium env through
    daskrl's registry, every episode exactly ``length`` steps, reward 1 exactly when the action matches the first
    entry's sign."""
    env = make_env("daskrl.testing.environments.envs:light", env_kwargs={"length": 5, "size": 3})
    check_env(env.unwrapped, skip_render_check=True)
    assert env.observation_space.shape == (3,) and env.action_space.n == 2
    obs, _ = env.reset(seed=3)
    for episode in range(3):
        total = 0.0
        for t in range(5):
            best = int(obs[0] >= 0)
            obs, reward, terminated, truncated, _ = env.step(best if episode else 1 - best)
            total += reward
            assert not terminated and truncated == (t == 4) and env.observation_space.contains(obs)
        assert total == (5.0 if episode else 0.0)
        obs, _ = env.reset()
    with pytest.raises(ValueError, match="length >= 1"):
        make_env("daskrl.testing.environments.envs:light", env_kwargs={"length": 0})
