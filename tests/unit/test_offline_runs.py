"""Offline runs (--algo bc|iql|cql) without a cluster: the options they refuse in one line each, the defaults and
actor they get, shards that serve whatever the learner asks once they hold the dataset, and progress counted in
learner updates (the stop rule, the evaluation interval, the console)."""

from __future__ import annotations

import pytest

from daskrl.config import Config
from daskrl.config.algo_options import apply_algo_model
from daskrl.driver.loop.run_control import stop_rule_met
from daskrl.errors import ConfigError
from daskrl.monitor.console import UPDATES, ConsoleView, progress_line
from daskrl.monitor.run_state import RunState
from daskrl.replay.ratio import DatasetOnly, ReplayRatio

DATASET = "minari:me/pendulum/expert-v0"


def problems(**flat) -> list[str]:
    with pytest.raises(ConfigError) as info:
        Config.from_flat(flat).validate()
    return info.value.problems if hasattr(info.value, "problems") else str(info.value).splitlines()


def test_an_offline_algorithm_without_a_dataset_is_refused_in_one_line():
    text = " ".join(problems(algo="iql", env="Pendulum-v1"))
    assert "--algo iql trains from a dataset alone: give --dataset minari:ID" in text
    assert "--dataset-fraction" not in text  # the dataset's own rule is the one line


@pytest.mark.parametrize("option, value, says", [
    ("train_for_env_steps", 10_000, "--train-for-env-steps never comes: use --train-for-updates"),
    ("eval_interval_env_steps", 1_000, "use --eval-interval-updates"),
    ("save_video_every_env_steps", 1_000, "`daskrl enjoy --save-video` after it"),
    ("dataset_fraction", 0.5, "samples nothing: leave out --dataset-fraction"),
    ("record_dataset", "me/pendulum/again-v0", "leave out --record-dataset"),
    ("elastic", True, "no rollout workers to grow"),
])
def test_options_counted_in_env_steps_or_sampling_are_refused_offline(option, value, says):
    text = " ".join(problems(algo="cql", env="Pendulum-v1", dataset=DATASET, **{option: value}))
    assert says in text


def test_update_budgets_belong_to_offline_algorithms():
    assert "--train-for-updates counts the updates of an offline algorithm" in " ".join(
        problems(algo="sac", env="Pendulum-v1", train_for_updates=100))
    assert "use --eval-interval-env-steps for --algo appo" in " ".join(problems(eval_interval_updates=100))


def test_an_offline_run_gets_its_papers_defaults_and_actor():
    config = Config.from_flat({"algo": "iql", "env": "Pendulum-v1", "dataset": DATASET,
                               "eval_interval_updates": 1000}).validate()
    applied = apply_algo_model(config)
    assert config.run.train_for_updates == 100_000 and config.algo.n_step == 1
    assert (config.model.action_bounds, config.model.gaussian_std) == ("squash_mean", "parameter")
    assert config.learner.learning_rate == 3e-4 and "train_for_updates" in applied
    cql = Config.from_flat({"algo": "cql", "env": "Pendulum-v1", "dataset": DATASET, "train_for_updates": 50})
    apply_algo_model(cql)
    assert cql.algo.actor_learning_rate == 1e-4 and cql.run.train_for_updates == 50  # the user's wins
    assert (cql.model.action_bounds, cql.model.gaussian_std) == ("squash", "state")


def test_an_offline_shard_serves_what_is_asked_once_it_holds_its_part():
    assert DatasetOnly(0).draws_allowed(0, 0, 0, 16) == 0  # a shard whose part is empty (more shards than episodes)
    offline = DatasetOnly(4000)
    assert offline.draws_allowed(0, 0, 10**6, 16) == 16 and not offline.behind(0, 0, 10**6)
    assert ReplayRatio(1000, 1.0).draws_allowed(0, 0, 0, 16) == 0  # the online ratio, for contrast, holds it back


def test_an_offline_runs_progress_is_its_learners_updates():
    config = Config.from_flat({"algo": "iql", "env": "Pendulum-v1", "dataset": DATASET, "train_for_updates": 500})
    state = RunState(counts_updates=True)
    state.learner = {"train_steps": 499}
    assert state.progress == 499 and state.env_steps == 0 and stop_rule_met(config, state) == ""
    state.learner = {"train_steps": 512}
    assert stop_rule_met(config, state) == "reached 512 learner updates (--train-for-updates 500)"
    online = RunState()
    online.env_steps, online.learner = 70, {"train_steps": 3}
    assert online.progress == 70


def test_the_console_shows_an_offline_runs_updates_and_newest_evaluation():
    row = {"time_s": 3.0, "env_steps": 0, "learner_updates": 2048, "fps": 0.0, "policy_version": 256,
           "eval_return_mean": float("nan")}
    assert "updates       2,048 | eval return n/a" in progress_line(row, counted=UPDATES)
    evaluated = {**row, "eval_return_mean": -150.25, "eval_return_std": 10.0, "eval_updates": 2000}
    line = progress_line(row, counted=UPDATES, evaluation=evaluated)
    assert "eval return -150.2±10.0 at 2,000 updates" in line and "fps" not in line
    view = ConsoleView(4096, 0.0, stream=None, counted=UPDATES)
    view.live = False
    assert view.fraction(row) == 0.5


def test_online_after_needs_a_dataset_and_an_online_algorithm():
    assert "--online-after counts the updates trained from --dataset before sampling" in " ".join(
        problems(algo="sac", env="Pendulum-v1", online_after=1000))
    assert "--online-after is for --algo sac, td3 or dqn with --dataset" in " ".join(
        problems(algo="iql", env="Pendulum-v1", dataset=DATASET, online_after=1000))
    Config.from_flat({"algo": "dqn", "dataset": "minari:me/cartpole/expert-v0", "online_after": 500}).validate()
