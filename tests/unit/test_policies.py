"""Several policies (--num-policies), checked by hand-built examples with no cluster: who acts for which column
(round_robin, shared, a custom mapping, and a bad mapping's one-line error), the columns and the part of each row a
policy's learner takes (the batcher's cut), the mapping that agents of different spaces need, and episode records
read back from Dask's event log and credited by the PolicyBook."""

from __future__ import annotations

import sys
import types

import msgpack
import numpy as np
import pytest

from daskrl.config import Config
from daskrl.driver.fleet.role_setups import role_setups
from daskrl.driver.loop.policy_book import PolicyBook
from daskrl.errors import ConfigError
from daskrl.learning.slot_reader import PolicyColumns
from daskrl.sampling.episode import Episode, episodes_from_event
from daskrl.sampling.policies.policy_map import NOBODY, PolicyMap, check_mapping, columns_by_policy


def test_round_robin_keeps_each_env_on_one_policy_and_alternates_two_players_seats():
    single = PolicyMap("round_robin", 4, ["agent_0"] * 8, list(range(8, 16)), run_envs=64)
    assert single.column_policy.tolist() == [0, 1, 2, 3, 0, 1, 2, 3]
    single.episodes_began([0, 5])
    assert single.column_policy.tolist() == [0, 1, 2, 3, 0, 1, 2, 3]  # a slot's columns keep their policy
    assert single.episode_index(0) == 8 + 64 and single.episode_index(1) == 9

    players = PolicyMap("round_robin", 2, ["p0", "p1"] * 2, [0, 1], run_envs=2)
    assert players.column_policy.tolist() == [0, 1, 1, 0]
    players.episodes_began([0])
    assert players.column_policy.tolist() == [1, 0, 1, 0]  # env 0's seats swapped for its second episode
    shared = PolicyMap("shared", 1, ["p0", "p1"], [0], run_envs=1)
    assert shared.column_policy.tolist() == [0, 0]
    assert shared.acting(np.array([True, False])).tolist() == [0, NOBODY]


def test_a_custom_mapping_is_asked_per_agent_and_episode_and_a_bad_one_is_one_line(monkeypatch):
    module = types.ModuleType("mapping_for_test")
    asked = []

    def by_agent(agent_id, episode_index):
        asked.append((agent_id, episode_index))
        return 1 if agent_id == "hunter" else 0

    module.by_agent = by_agent
    module.out_of_range = lambda agent_id, episode_index: 7
    monkeypatch.setitem(sys.modules, "mapping_for_test", module)
    mapping = PolicyMap("mapping_for_test:by_agent", 2, ["hunter", "prey"] * 2, [4, 5], run_envs=10)
    assert mapping.column_policy.tolist() == [1, 0, 1, 0]
    mapping.episodes_began([1])
    assert asked[-2:] == [("hunter", 15), ("prey", 15)]  # env 5's second episode: 5 + 10
    check_mapping("mapping_for_test:by_agent", 2, ["hunter", "prey"])
    with pytest.raises(ConfigError, match=r"returned 7 for agent 'hunter'.*0\.\.1 \(--num-policies"):
        check_mapping("mapping_for_test:out_of_range", 2, ["hunter"])
    with pytest.raises(ConfigError, match="cannot be imported"):
        check_mapping("no_such_module_here:fn", 2, ["hunter"])


def test_columns_by_policy_uses_slices_for_runs_and_skips_nobody():
    got = columns_by_policy(np.array([0, 0, 1, -1, 1, 2], np.int8))
    assert got[0] == (0, slice(0, 2)) and got[2] == (2, slice(5, 6))
    assert got[1][0] == 1 and got[1][1].tolist() == [2, 4]


def test_a_learner_takes_the_columns_its_policy_played_with_its_own_steps_marked():
    T, B = 4, 5
    ids = np.array([[0, 1, 1, 0, -1],
                    [0, 1, 1, 0, -1],
                    [0, 1, 0, 0, 1],  # column 2's episode ended at step 1: policy 0 plays its next one
                    [0, 1, 0, 0, 1],
                    [0, 1, 0, 0, 1]], np.int8)  # step T: who acts first in the next slot
    part = {"obs": np.arange((T + 1) * B, dtype=np.float32).reshape(T + 1, B, 1),
            "actions": np.arange(T * B).reshape(T, B), "rewards": np.arange(T * B, dtype=np.float32).reshape(T, B),
            "terminated": np.zeros((T, B), np.uint8), "truncated": np.zeros((T, B), np.uint8),
            "log_probs": np.zeros((T, B), np.float32), "policy_version": np.full((T, B), 3, np.int32),
            "policy_id": ids, "final_at": np.array([1 * B + 2, 3 * B + 1], np.int32),
            "final_obs": np.array([[-1.0], [-2.0]], np.float32)}
    part["truncated"][1, 2] = 1
    part["truncated"][3, 1] = 1
    mine = PolicyColumns(1).take(dict(part), ())
    np.testing.assert_array_equal(mine["obs"][..., 0], part["obs"][:, [1, 2, 4], 0])
    np.testing.assert_array_equal(mine["valid"], ids[:T, [1, 2, 4]] == 1)
    # the time-limit finals of its columns, renumbered to the cut's width; column 1 is now 0, column 2 is now 1
    assert sorted(mine["final_at"].tolist()) == [1 * 3 + 1, 3 * 3 + 0]
    assert sorted(mine["final_obs"][:, 0].tolist()) == [-2.0, -1.0]
    other = PolicyColumns(0).take(dict(part), ())
    np.testing.assert_array_equal(other["actions"], part["actions"][:, [0, 2, 3]])
    assert other["valid"][:, 1].tolist() == [False, False, True, True]


def test_a_policy_of_narrower_spaces_takes_its_part_of_the_rows():
    T, B = 2, 2
    ids = np.array([[0, 1]] * (T + 1), np.int8)
    part = {"obs": np.arange((T + 1) * B * 4, dtype=np.float32).reshape(T + 1, B, 4),
            "actions": np.arange(T * B * 3, dtype=np.float32).reshape(T, B, 3),
            "rewards": np.zeros((T, B), np.float32), "terminated": np.zeros((T, B), np.uint8),
            "truncated": np.zeros((T, B), np.uint8), "log_probs": np.zeros((T, B), np.float32),
            "policy_version": np.zeros((T, B), np.int32), "policy_id": ids,
            "final_at": np.array([1 * B + 0], np.int32), "final_obs": np.array([[1.0, 2.0, 0.0, 0.0]], np.float32)}
    mine = PolicyColumns(0, (2, 1)).take(dict(part), ())
    np.testing.assert_array_equal(mine["obs"], part["obs"][:, [0], :2])
    np.testing.assert_array_equal(mine["actions"], part["actions"][:, [0], :1])
    np.testing.assert_array_equal(mine["final_obs"], [[1.0, 2.0]])
    wide = PolicyColumns(1).take(dict(part), ())
    assert wide["obs"].shape == (T + 1, 1, 4) and wide["actions"].shape == (T, 1, 3)


ADVERSARY = "mpe2.simple_adversary_v3:parallel_env"


def test_agents_of_different_spaces_need_a_mapping_that_gives_each_policy_one_kind(tmp_path):
    pytest.importorskip("mpe2", reason="mpe2 (the multiagent extra) is not installed")
    from daskrl.driver.launch.preflight import preflight

    base = Config().replace(train_dir=str(tmp_path), experiment="kinds", env=ADVERSARY)
    for mapping, n in (("shared", 1), ("round_robin", 2)):
        with pytest.raises(ConfigError, match=rf"^.*--policy-mapping {mapping} puts one policy on agents with "
                                              r"different spaces: 'adversary_0' has observations \(8,\).* and "
                                              r"'agent_0' observations \(10,\).*module:function"):
            preflight(base.replace(num_policies=n, policy_mapping=mapping))
    swap = "daskrl.testing.mappings:swap_every_episode"
    with pytest.raises(ConfigError, match=r"gives policy 1 agents with different spaces: 'agent_0' "
                                          r"\(observations \(10,\).*\) and 'adversary_0' \(observations \(8,\).*episode 1\)"
                       ):
        preflight(base.replace(num_policies=2, policy_mapping=swap))
    with pytest.raises(ConfigError, match="gives policy 2 no agent in episodes 0..255"):
        preflight(base.replace(num_policies=3, policy_mapping="daskrl.testing.mappings:by_role"))
    by_role = base.replace(num_policies=2, policy_mapping="daskrl.testing.mappings:by_role")
    with pytest.raises(ConfigError, match="--pbt copies one network's weights into every policy"):
        preflight(by_role.replace(pbt=True))
    spaces = preflight(by_role)
    setups = role_setups(by_role, spaces)
    assert [s.spaces.obs_shape for s in setups.learners] == [(8,), (10,)]
    assert [s.cut for s in setups.learners] == [(8, 0), None]
    rollout = setups.rollout[0]
    assert rollout.spaces.obs_shape == (10,) and [s.obs_shape for s in rollout.policy_spaces] == [(8,), (10,)]
    remote = role_setups(by_role.replace(inference="remote"), spaces).inference
    assert [(s.policy.spaces.obs_shape, s.policy.cut) for s in remote] == [((8,), (8, 0)), ((10,), None)]


def test_episode_records_come_back_from_the_event_log_and_the_book_reads_them_by_name(tmp_path):
    """A worker that retires in order reports its last episodes through Dask's event log, where msgpack makes them
    plain sequences: they are Episode records again, and the PolicyBook credits each by its fields: a snapshot's
    side of a game is no trained policy's episode, a game against another policy is tallied by the opponent's
    version, a single-agent episode (no opponent) is not a game."""
    episodes = [Episode(1.0, 5, 0, 2, 7), Episode(-1.0, 4, 2, 0, 3), Episode(3.0, 9, 1), Episode(0.0, 6, 1, 0, 4)]
    back = episodes_from_event(msgpack.unpackb(msgpack.packb(episodes), use_list=False))
    assert back == episodes and all(isinstance(e, Episode) for e in back)
    config = Config().replace(train_dir=str(tmp_path), experiment="book", num_policies=2, self_play_snapshots=1)
    book = PolicyBook(config, resuming=False)
    try:
        assert book.trained(back) == [episodes[0], episodes[2], episodes[3]]
        book.add_episodes(book.trained(back))
        # against snapshot 0 (acting as policy 2) by its version; against policy 0, one row for all its versions
        assert book.games == {(0, 2, 7): [1, 0, 0, 7], (1, 0, -1): [0, 1, 0, 4]}
        assert [list(window.returns) for window in book.episodes] == [[1.0], [3.0, 0.0]]
    finally:
        book.close()
