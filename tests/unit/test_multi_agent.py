"""Multi-agent envs as agent columns (daskrl/envs/multi_agent.py), without a run: detection, spaces (agents of
different spaces get the union and their own part), exact bookkeeping of parallel and turn-based envs step by step,
a failing env rebuilt or one line, MPE2 and tic-tac-toe when installed, and what a multi-agent run refuses."""

from __future__ import annotations

import warnings

import msgpack
import numpy as np
import pytest

from daskrl.envs import EnvSpaces, make_env, probe_env, register_env
from daskrl.envs.layouts.dict_obs import unpack
from daskrl.envs.multi_agent import MultiAgentGroup, is_multi_agent, is_turn_based, multi_agent_spaces
from daskrl.errors import EnvError, EnvStepError
from daskrl.testing.environments.envs import StaggeredAgentsEnv, TakeTurnsEnv, staggered, take_turns


def buffers(group: MultiAgentGroup, steps: int) -> dict[str, np.ndarray]:
    """A slot's arrays for ``steps`` steps (obs has one more row), filled with garbage the group must overwrite."""
    n, spaces = group.num_envs, group.spaces
    return {"obs": np.full((steps + 1, n, *spaces.obs_shape), 77, spaces.obs_dtype),
            "rew": np.full((steps, n), 9.0, np.float32), "term": np.ones((steps, n), np.uint8),
            "trunc": np.ones((steps, n), np.uint8)}


def run(group: MultiAgentGroup, actions: list, b: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Reset, then step with ``actions[t]`` (one per column); returns the active mask after the reset and each step."""
    group.reset(b["obs"][0])
    masks = [group.active.copy()]
    for t, a in enumerate(actions):
        group.step(np.asarray(a), b["obs"][t + 1], b["rew"][t], b["term"][t], b["trunc"][t])
        masks.append(group.active.copy())
    return masks


def test_detection_tells_multi_agent_envs_from_gymnasium_ones():
    assert is_multi_agent(StaggeredAgentsEnv()) and not is_turn_based(StaggeredAgentsEnv())
    assert is_multi_agent(TakeTurnsEnv()) and is_turn_based(TakeTurnsEnv())
    cartpole = make_env("CartPole-v1")
    assert not is_multi_agent(cartpole) and not is_multi_agent(cartpole.unwrapped)
    assert not is_multi_agent(StaggeredAgentsEnv)  # the class, not an env


def test_parallel_bookkeeping_is_exact_step_by_step():
    group = MultiAgentGroup([staggered(), staggered()], info_keys=("steps",))
    assert group.num_envs == 6 and group.num_agents == 3
    assert group.agent_ids == ["a0", "a1", "a2"] * 2
    # a finished agent's action would make the env raise (it refuses actions for agents that are gone): ignored
    b = buffers(group, 5)
    masks = run(group, [[1] * 6] * 5, b)
    on, a0_gone, a01_gone = [True] * 3, [False, True, True], [False, False, True]
    assert [m.tolist() for m in masks] == [on * 2, on * 2, a0_gone * 2, a01_gone * 2, on * 2, on * 2]
    # rewards 100 * (k + 1) + t on the agent's own column while it acts, 0 after
    expected_rewards = [[101, 201, 301], [102, 202, 302], [0, 203, 303], [0, 0, 304], [101, 201, 301]]
    assert b["rew"].tolist() == [r * 2 for r in expected_rewards]
    assert b["term"].tolist() == [[0] * 6, [1, 0, 0] * 2, [0, 1, 0] * 2, [0] * 6, [0] * 6]
    assert b["trunc"].tolist() == [[0] * 6, [0] * 6, [0] * 6, [0, 0, 1] * 2, [0] * 6]
    # observations [k, t] of the agents that act next, zeros elsewhere; the env reset within step 4
    obs = b["obs"]
    assert obs[0].tolist() == [[0, 0], [1, 0], [2, 0]] * 2
    assert obs[1].tolist() == [[0, 1], [1, 1], [2, 1]] * 2 and obs[2].tolist() == [[0, 0], [1, 2], [2, 2]] * 2
    assert obs[3].tolist() == [[0, 0], [0, 0], [2, 3]] * 2
    assert obs[4].tolist() == [[0, 0], [1, 0], [2, 0]] * 2  # the new episode's first observations
    # (return, own steps, column) per agent, in the order they finished
    a0, a1, a2 = (203.0, 2), (201.0 + 202 + 203, 3), (301.0 + 302 + 303 + 304, 4)
    assert group.pop_episode_stats() == [(*a0, 0), (*a0, 3), (*a1, 1), (*a1, 4), (*a2, 2), (*a2, 5)]
    assert group.pop_episode_extras() == [{"steps": 2.0}] * 2 + [{"steps": 3.0}] * 2 + [{"steps": 4.0}] * 2
    truncations = group.pop_truncations()  # the time-limited agent's real final observation, for a bootstrap
    assert [(c, o.tolist()) for c, o in truncations] == [(2, [2, 4]), (5, [2, 4])]
    assert group.pop_new_episodes() == [0, 1, 0, 1] and group.episode_index == [1, 1]
    assert group.pop_new_episodes() == []


def test_sums_from_acting_rows_to_the_next_give_each_agents_return():
    group = MultiAgentGroup([staggered(lengths=(1, 5, 2))])
    b = buffers(group, 12)
    masks = run(group, [[0, 1, 2]] * 12, b)
    returns: dict[int, list[float]] = {0: [], 1: [], 2: []}
    running = [0.0] * 3
    for t in range(12):
        for c in range(3):
            assert masks[t][c] or (b["rew"][t, c] == 0 and not b["term"][t, c] and not b["trunc"][t, c])
            running[c] += b["rew"][t, c]
            if b["term"][t, c] or b["trunc"][t, c]:
                returns[c].append(running[c])
                running[c] = 0.0
    assert returns == {c: [r for r, _, col in group.finished_episodes if col == c] for c in range(3)}
    assert {(r, n) for r, n, _ in group.finished_episodes} == {(101.0, 1), (1015.0, 5), (603.0, 2)}


def test_turn_based_credits_the_other_players_moves_at_the_next_turn():
    group = MultiAgentGroup([take_turns(moves=5)])
    acts = [0, 1, 2, 0, 1, 2]  # one move per step; the waiting player's column is ignored
    b = buffers(group, 6)
    masks = run(group, [[a, a] for a in acts], b)
    p0, p1 = [True, False], [False, True]
    assert [m.tolist() for m in masks] == [p0, p1, p0, p1, p0, p0, p1]  # after step 4 a new game: p0 first
    a = [x + 1.0 for x in acts]
    # p0 moves at steps 0, 2, 4 (the last move ends the game: +100 / -100); each row holds what the player got
    # since it last acted, written where it is about to act again, or where it ends
    assert b["rew"][:5].tolist() == [[0, -a[0]], [10 - a[1], 0], [0, 10 - a[2]], [10 - a[3], 0],
                                     [110, 10 - a[4] - 100]]
    assert b["term"][:5].tolist() == [[0, 0]] * 4 + [[1, 1]] and not b["trunc"].any()
    assert group.pop_episode_stats() == [(-80.0 - a[0] - a[2] - a[4], 2, 1), (130.0 - a[1] - a[3], 3, 0)]
    assert b["obs"][1].tolist() == [[0, 0], [1, 1]] and b["obs"][5].tolist() == [[0, 0], [0, 0]]  # a new game
    assert group.episode_index == [1] and group.pop_new_episodes() == [0, 0]


def test_a_turn_based_time_limit_keeps_each_players_final_observation():
    group = MultiAgentGroup([take_turns(moves=2, truncate=True)])
    b = buffers(group, 2)
    run(group, [[0, 0], [0, 0]], b)
    assert b["trunc"][1].tolist() == [1, 1] and not b["term"].any()
    assert sorted((c, o.tolist()) for c, o in group.pop_truncations()) == [(0, [0, 2]), (1, [1, 2])]


def test_a_failing_env_is_rebuilt_without_touching_the_other_envs_columns():
    made = []

    def rebuild(i: int) -> StaggeredAgentsEnv:
        made.append(i)
        return staggered()

    group = MultiAgentGroup([staggered(fail_action=2), staggered(fail_action=2)], rebuild=rebuild,
                            max_consecutive_failures=2)
    b = buffers(group, 2)
    run(group, [[0] * 6, [0, 0, 0, 2, 0, 0]], b)  # env 1 raises at the second step
    assert made == [1] and [(f.env_index, f.phase) for f in group.pop_failures()] == [(1, "step")]
    assert b["rew"][1].tolist() == [102, 202, 302, 0, 0, 0]
    assert b["term"][1].tolist() == [1, 0, 0, 0, 0, 0] and b["trunc"][1].tolist() == [0, 0, 0, 1, 1, 1]
    assert b["obs"][2].tolist() == [[0, 0], [1, 2], [2, 2], [0, 0], [1, 0], [2, 0]]
    assert group.active.tolist() == [False, True, True, True, True, True]
    assert group.pop_episode_stats() == [(203.0, 2, 0)]  # env 1's partial episodes are dropped
    assert group.episode_index == [0, 1] and group.pop_new_episodes() == [0, 1, 1]


def test_a_failing_turn_based_env_cuts_the_waiting_players_episode_too():
    group = MultiAgentGroup([take_turns(fail_action=2), take_turns()], rebuild=lambda i: take_turns(),
                            max_consecutive_failures=1)
    b = buffers(group, 2)
    run(group, [[0, 0, 0, 0], [0, 2, 0, 2]], b)  # env 0's second move raises; env 1 plays it
    assert b["trunc"][1].tolist() == [1, 1, 0, 0] and b["rew"][1].tolist() == [0, 0, 10 - 3, 0]
    assert group.active.tolist() == [True, False, True, False] and group.episode_index == [1, 0]
    assert b["obs"][2].tolist() == [[0, 0], [0, 0], [0, 2], [0, 0]] and group.finished_episodes == []


def test_dict_observations_are_packed_per_agent():
    group = MultiAgentGroup([staggered(dict_obs=True)])
    assert group.spaces.is_dict and group.spaces.action_mask_key == "action_mask"
    b = buffers(group, 4)
    run(group, [[0, 0, 0]] * 4, b)
    views = unpack(b["obs"], group.spaces.obs_keys)
    assert views["state"][3].tolist() == [[0, 0], [0, 0], [2, 3]] and views["action_mask"][3].tolist() == [
        [0, 0, 0], [0, 0, 0], [1, 1, 1]]
    (c, final), = group.pop_truncations()
    assert c == 2 and unpack(final, group.spaces.obs_keys)["state"].tolist() == [2, 4]


def test_without_rebuilding_a_failing_env_raises_a_one_line_error():
    group = MultiAgentGroup([staggered(fail_action=2)])
    b = buffers(group, 1)
    with pytest.raises(EnvStepError, match=r"env 0 raised in step: RuntimeError: action 2 breaks this env"):
        run(group, [[2, 0, 0]], b)


def test_a_registered_factory_is_a_spec_and_probes_with_its_agent_count():
    register_env("test/staggered", staggered)
    env = make_env("test/staggered", seed=3, env_kwargs={"lengths": (1, 2)})
    assert type(env) is StaggeredAgentsEnv and env.resets == 1  # not wrapped; seeded through its first reset
    spaces = probe_env("test/staggered")
    assert (spaces.num_agents, spaces.agent_ids, spaces.obs_shape, spaces.num_actions) == (3, ("a0", "a1", "a2"),
                                                                                           (2,), 3)
    assert EnvSpaces.from_dict(msgpack.unpackb(msgpack.packb(spaces.to_dict()))) == spaces
    group = MultiAgentGroup.from_spec("test/staggered", 2, seed=1, spaces=spaces)
    assert group.num_envs == 6 and [e.resets for e in group.envs] == [1, 1]


def test_gymnasium_specs_are_unaffected():
    spaces = probe_env("gymnasium.envs.classic_control:CartPole-v1")
    assert (spaces.num_agents, spaces.agent_ids) == (1, ())
    assert EnvSpaces.from_dict({k: v for k, v in spaces.to_dict().items()
                                if k not in ("num_agents", "agent_ids")}) == spaces  # older records still read
    with pytest.raises(EnvError, match="not a multi-agent"):
        MultiAgentGroup.from_spec("CartPole-v1", 1)


class _Mixed(StaggeredAgentsEnv):
    def __init__(self, a1_obs: tuple[int, ...] = (3,)) -> None:
        super().__init__()
        self.a1_obs = a1_obs

    def observation_space(self, agent: str):
        import gymnasium as gym

        return gym.spaces.Box(0.0, 1.0, self.a1_obs if agent == "a1" else (2,), np.float32)


class _Uneven:
    """Two agents of different spaces (Parallel API, duck-typed): ``a0`` sees 2 floats and moves in a 1-D Box,
    ``a1`` sees 4 and moves in a 3-D one; each observation is ``t + arange(len)``; both are cut at step 2."""

    possible_agents = ["a0", "a1"]
    metadata: dict = {"name": "uneven"}

    def __init__(self) -> None:
        import gymnasium as gym

        self.obs = {"a0": gym.spaces.Box(-9.0, 9.0, (2,), np.float32), "a1": gym.spaces.Box(-9.0, 9.0, (4,), np.float32)}
        self.act = {"a0": gym.spaces.Box(-1.0, 1.0, (1,), np.float32), "a1": gym.spaces.Box(-2.0, 2.0, (3,), np.float32)}
        self.agents: list[str] = []
        self.received: list[dict] = []
        self.t = 0

    def observation_space(self, agent: str):
        return self.obs[agent]

    def action_space(self, agent: str):
        return self.act[agent]

    def _obs(self) -> dict:
        return {a: self.t + np.arange(self.obs[a].shape[0], dtype=np.float32) for a in self.agents}

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.t, self.agents = 0, list(self.possible_agents)
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions: dict) -> tuple:
        self.received.append({a: np.array(v) for a, v in actions.items()})
        self.t += 1
        obs, done = self._obs(), self.t >= 2
        flags = {a: done for a in self.agents}
        if done:
            self.agents = []
        return obs, {a: 1.0 for a in flags}, {a: False for a in flags}, flags, {a: {} for a in flags}

    def close(self) -> None:
        pass


def test_agents_with_spaces_a_slot_row_cannot_hold_are_refused_in_one_line():
    with pytest.raises(EnvError) as info:
        multi_agent_spaces(_Mixed((3, 3)))
    message = str(info.value)
    assert "\n" not in message and "'a1'" in message and "(3, 3)" in message and "(2,)" in message
    assert "flat 1-D float Boxes" in message and "pad" in message


def test_agents_with_different_flat_spaces_get_the_union_and_their_own():
    spaces = multi_agent_spaces(_Mixed())
    assert (spaces.obs_shape, spaces.obs_dtype, spaces.num_actions, spaces.agent_ids) == ((3,), "float32", 3,
                                                                                          ("a0", "a1", "a2"))
    assert [a.obs_shape for a in spaces.agent_spaces] == [(2,), (3,), (2,)]
    assert spaces.spaces_of("a1").obs_shape == (3,) and spaces.cut_for(spaces.spaces_of("a0")) == (2, 0)
    assert EnvSpaces.from_dict(msgpack.unpackb(msgpack.packb(spaces.to_dict()))) == spaces
    box = multi_agent_spaces(_Uneven())
    assert (box.obs_shape, box.action_kind, box.action_shape) == ((4,), "box", (3,))
    assert box.cut_for(box.spaces_of("a0")) == (2, 1) and box.cut_for(box.spaces_of("a1")) is None


def test_each_agent_gets_its_observation_padded_and_its_part_of_a_box_action():
    group = MultiAgentGroup([_Uneven(), _Uneven()])
    b = buffers(group, 2)
    actions = np.array([[5.0, 6.0, 7.0], [0.5, -5.0, 1.5]] * 2, np.float32)
    run(group, [actions, actions], b)
    np.testing.assert_array_equal(b["obs"][0, 0], [0, 1, 0, 0])  # a0: 2 floats, zeros after (no garbage)
    np.testing.assert_array_equal(b["obs"][1, 1], [1, 2, 3, 4])
    first = group.envs[0].received[0]
    np.testing.assert_array_equal(first["a0"], [1.0])  # its own 1-D Box, clipped to its own bounds
    np.testing.assert_array_equal(first["a1"], [0.5, -2.0, 1.5])
    finals = dict(group.pop_truncations())
    np.testing.assert_array_equal(finals[0], [2, 3, 0, 0])
    np.testing.assert_array_equal(finals[1], [2, 3, 4, 5])


def test_mpe2_simple_spread_through_its_spec_string():
    pytest.importorskip("mpe2", reason="mpe2 (the multiagent extra) is not installed")
    spec = "mpe2.simple_spread_v3:parallel_env"
    spaces = probe_env(spec)
    assert (spaces.obs_shape, spaces.obs_dtype, spaces.num_actions, spaces.num_agents) == ((18,), "float32", 5, 3)
    assert not is_turn_based(make_env(spec, seed=0))
    group = MultiAgentGroup.from_spec(spec, 2, seed=0, env_kwargs={"max_cycles": 4}, spaces=spaces)
    assert group.num_envs == 6
    b = buffers(group, 4)
    rng = np.random.default_rng(0)
    masks = run(group, [rng.integers(5, size=6) for _ in range(4)], b)
    assert all(m.all() for m in masks)  # every agent acts every step; all are cut at max_cycles together
    assert not b["term"].any() and b["trunc"][:3].sum() == 0 and b["trunc"][3].all()
    stats = group.pop_episode_stats()
    assert sorted(c for _, _, c in stats) == list(range(6)) and {n for _, n, _ in stats} == {4}
    assert [r for r, _, _ in sorted(stats, key=lambda s: s[2])] == pytest.approx(b["rew"].sum(0).tolist(), rel=1e-5)
    assert len(group.pop_truncations()) == 6 and group.episode_index == [1, 1]


def test_mpe2_continuous_actions_are_clipped_to_their_box():
    pytest.importorskip("mpe2", reason="mpe2 (the multiagent extra) is not installed")
    group = MultiAgentGroup.from_spec("mpe2.simple_spread_v3:parallel_env", 1, seed=0,
                                      env_kwargs={"continuous_actions": True, "max_cycles": 2})
    assert group.spaces.action_kind == "box" and group.spaces.action_shape == (5,)
    b = buffers(group, 2)
    run(group, [np.full((3, 5), 7.0, np.float32), np.full((3, 5), -7.0, np.float32)], b)
    assert b["trunc"][1].all() and len(group.pop_episode_stats()) == 3


def test_mpe2_simple_adversary_agents_share_the_union_of_their_spaces():
    pytest.importorskip("mpe2", reason="mpe2 (the multiagent extra) is not installed")
    spaces = probe_env("mpe2.simple_adversary_v3:parallel_env")
    assert (spaces.obs_shape, spaces.num_actions, spaces.agent_ids) == ((10,), 5, ("adversary_0", "agent_0", "agent_1"))
    assert [(a.obs_shape, a.num_actions) for a in spaces.agent_spaces] == [((8,), 5), ((10,), 5), ((10,), 5)]


def test_tictactoe_random_legal_games_are_zero_sum_per_game():
    pytest.importorskip("pettingzoo.classic", reason="pettingzoo's classic games are not installed")
    # the entry point of PettingZoo's own registry ('classic/tictactoe-v3'); the documented module,
    # pettingzoo.classic.tictactoe_v3, warns on import that it is deprecated (PettingZoo 1.27)
    group = MultiAgentGroup.from_spec("pettingzoo.classic.tictactoe.tictactoe:env", 3, seed=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert probe_env("pettingzoo.classic.tictactoe_v3:env") == group.spaces
    keys = group.spaces.obs_keys
    assert group.spaces.action_mask_key == "action_mask" and group.agent_ids == ["player_1", "player_2"] * 3
    steps = 300
    b = buffers(group, steps)
    group.reset(b["obs"][0])
    rng = np.random.default_rng(1)
    games: dict[int, list[tuple[float, int, int]]] = {}
    for t in range(steps):
        active = group.active.copy()
        assert active.reshape(3, 2).sum(1).tolist() == [1, 1, 1]  # one player to move per board
        masks = unpack(b["obs"][t], keys)["action_mask"]
        assert not masks[~active].any()  # the waiting players' rows are zeros
        actions = np.array([rng.choice(np.flatnonzero(m)) if m.any() else 0 for m in masks])
        group.step(actions, b["obs"][t + 1], b["rew"][t], b["term"][t], b["trunc"][t])
        for r, n, c in group.pop_episode_stats():
            games.setdefault(c // 2, []).append((r, n, c % 2))
    finished = sum(len(v) // 2 for v in games.values())
    assert finished >= 30  # at most 9 moves a game
    for episodes in games.values():
        for first, second in zip(episodes[0::2], episodes[1::2], strict=True):  # both end together
            assert {first[2], second[2]} == {0, 1} and first[0] + second[0] == 0 and first[0] in (-1, 0, 1)
            n1 = first[1] if first[2] == 0 else second[1]  # player_1 moves first: as many moves or one more
            assert n1 - (first[1] + second[1] - n1) in (0, 1)
    assert b["rew"].sum() == 0 and not b["trunc"].any()


def test_what_a_multi_agent_env_cannot_do_is_refused_in_one_line(tmp_path):
    from daskrl.config import Config
    from daskrl.driver.launch.preflight import preflight
    from daskrl.errors import ConfigError

    base = Config().replace(train_dir=str(tmp_path), experiment="refused")
    with pytest.raises(ConfigError, match="--self-play-snapshots 2 needs an env with two or more agents"):
        preflight(base.replace(env="CartPole-v1", self_play_snapshots=2))
    with pytest.raises(ConfigError, match="--self-play-snapshots: snapshots act inline"):
        preflight(base.replace(env="daskrl.testing.environments.envs:race_to_ten", self_play_snapshots=2,
                               inference="remote"))
    with pytest.raises(ConfigError, match="--pbt needs a population"):
        preflight(base.replace(env="CartPole-v1", pbt=True))
