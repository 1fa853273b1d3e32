"""A curriculum's parts without a cluster: the env that switches tasks between episodes, the rule read over a task's
own window, and the refusals before a run (options that do not fit, tasks of other spaces, a task the env does not
take)."""

from __future__ import annotations

import numpy as np
import pytest

from daskrl.config import Config
from daskrl.curriculum.progress import Rule, TaskProgress
from daskrl.driver.launch.preflight import preflight
from daskrl.envs.curriculum_env import RETURN_KEY, TASK_KEY, Curriculum, CurriculumEnv, CurriculumGroup
from daskrl.envs.layouts.spaces import EnvSpaces
from daskrl.errors import ConfigError, EnvError

CORRIDOR = "daskrl.testing.environments.task_envs:corridor"


def corridor_curriculum(*lengths: int, replay: float = 0.0) -> Curriculum:
    return Curriculum.of(Config.from_flat({"env": CORRIDOR, "curriculum_tasks": [str(n) for n in lengths],
                                           "curriculum_replay": replay}).env)


def walk_right(env: CurriculumEnv) -> dict:
    """Play one episode by always walking right; the info of its last step."""
    env.reset()
    while True:
        _, _, terminated, truncated, info = env.step(1)
        if terminated or truncated:
            return info


def test_an_env_takes_a_new_level_at_its_next_reset_and_reports_each_episodes_task_and_return():
    env = CurriculumEnv(corridor_curriculum(2, 5), seed=1)
    env.reset()
    env.step(1)
    env.set_level(1)  # mid-episode: this episode stays on task 0
    _, _, terminated, _, info = env.step(1)
    assert terminated and info["episode_extra_stats"] == {TASK_KEY: 0, RETURN_KEY: 1.0}
    steps = 0
    env.reset()
    while not env.step(1)[2]:
        steps += 1
    assert steps + 1 == 5 and env.task == 1
    env.set_level(7)  # past the last task: the last one
    assert walk_right(env)["episode_extra_stats"][TASK_KEY] == 1
    env.close()


def test_the_replay_share_plays_earlier_tasks_uniformly_and_never_a_later_one():
    env = CurriculumEnv(corridor_curriculum(1, 2, 3, 4, replay=0.3), seed=2, level=3)
    tasks = np.array([walk_right(env)["episode_extra_stats"][TASK_KEY] for _ in range(2000)])
    assert set(tasks) == {0, 1, 2, 3}
    assert 0.26 < np.mean(tasks < 3) < 0.34, np.mean(tasks < 3)
    assert all(abs(np.mean(tasks == k) - 0.1) < 0.03 for k in range(3))
    env.close()


def test_an_id_family_builds_each_tasks_env_once_with_a_seed_of_its_own():
    pytest.importorskip("minigrid", reason="the minigrid extra is not installed (pip install 'daskrl[minigrid]')")
    config = Config.from_flat({"env": "minigrid:MiniGrid-Empty-5x5-v0",
                               "curriculum": ["minigrid:MiniGrid-Empty-6x6-v0, minigrid:MiniGrid-Empty-8x8-v0"]})
    curriculum = Curriculum.of(config.env)
    assert curriculum.ids == ("minigrid:MiniGrid-Empty-5x5-v0", "minigrid:MiniGrid-Empty-6x6-v0",
                              "minigrid:MiniGrid-Empty-8x8-v0")
    env = CurriculumEnv(curriculum, seed=3)
    first = env.env
    env.set_level(2)
    env.reset()
    second = env.env
    assert second is not first and second.unwrapped.width == 8 and first.unwrapped.width == 5
    env.set_level(0)
    env.reset()
    assert env.env is first
    env.close()


def test_a_group_moves_every_env_and_an_env_rebuilt_after_a_failure_starts_at_the_groups_level():
    curriculum = corridor_curriculum(2, 6)
    spaces = EnvSpaces.from_env(CurriculumEnv(curriculum, seed=0))
    group = CurriculumGroup.for_split(curriculum, 0, 3, seed=5, worker_index=0, first_env_index=0, spaces=spaces,
                                      max_consecutive_failures=2, info_keys=())
    group.set_task_level(1)
    assert [env.level for env in group.envs] == [1, 1, 1]
    rebuilt = group.rebuild(0)
    assert rebuilt.level == 1 and rebuilt.base_seed != group.envs[0].base_seed
    rebuilt.close()
    group.close()


def test_the_rule_reads_a_full_window_of_the_current_task_only():
    progress = TaskProgress(3, Rule.parse("success>=0.8"), window=10)
    for _ in range(20):
        progress.add(1, 1.0)  # a later task's (replayed or still ending) episodes do not count for task 0
    assert progress.learned() is None
    for r in [1.0] * 8 + [0.0] * 1:
        progress.add(0, r)
    assert progress.learned() is None  # 9 of 10: the window is not full
    progress.add(0, 0.0)
    assert progress.learned() == {"success": 0.8}
    assert progress.advance({"success": 0.8}, 1234) == 1
    assert progress.state()["passed"] == [{"task": 0, "env_steps": 1234, "success": 0.8}]
    back = TaskProgress(3, Rule.parse("return>=5"), window=2, saved=progress.state())
    assert back.level == 1 and back.passed == progress.passed
    back.add(1, 4.0)
    back.add(1, 6.0)
    assert back.learned() == {"return": 5.0}
    back.advance({"return": 5.0}, 2000)
    for _ in range(2):
        back.add(2, 100.0)
    assert back.learned() is None  # the last task: nothing follows it


@pytest.mark.parametrize("options, words", [
    ({"curriculum": ["CartPole-v1"], "curriculum_tasks": ["1"]}, "give one"),
    ({"curriculum": ["Acrobot-v1"], "env_backend": "envpool"}, "--env-backend gymnasium"),
    ({"curriculum_window": 20}, "name its tasks too"),
    ({"curriculum": ["CartPole-v1"], "curriculum_rule": "success>0.9"}, "success>=X or return>=X"),
    ({"curriculum_tasks": ["1"], "curriculum_replay": 1.5}, "--curriculum-replay must be within [0, 1.0]"),
])
def test_curriculum_options_that_cannot_work_are_refused_in_one_line(options, words):
    with pytest.raises(ConfigError) as caught:
        Config.from_flat({"env": "CartPole-v1", **options}).validate()
    assert words in str(caught.value) and "\n" not in str(caught.value).strip(), str(caught.value)


@pytest.mark.parametrize("options, words", [
    ({"env": "CartPole-v1", "curriculum": ["Acrobot-v1"]}, "'Acrobot-v1' has other spaces than --env 'CartPole-v1'"),
    ({"env": CORRIDOR, "curriculum_tasks": ["2", "40"]}, "refused task 1 (40) in set_task: ValueError"),
    ({"env": "CartPole-v1", "curriculum_tasks": ["1"]}, "'CartPole-v1' has no set_task"),
    ({"env": "daskrl.testing.environments.parallel_envs:twin_cartpoles", "curriculum_tasks": ["1"]},
     "a curriculum plays single-agent envs"),
])
def test_a_curriculum_the_env_cannot_play_is_refused_before_anything_starts(tmp_path, options, words):
    config = Config.from_flat({"train_dir": str(tmp_path), "dashboard_address": "", **options})
    with pytest.raises(EnvError) as caught:
        preflight(config)
    assert words in str(caught.value) and "\n" not in str(caught.value), str(caught.value)
