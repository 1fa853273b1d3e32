"""A curriculum on a real run: every rollout worker's envs move on when the rule holds, the rows, events and summary
say where the curriculum is, and a resume goes on with the task it had reached (the corridor's tasks are its lengths:
daskrl/testing/environments/task_envs.py)."""

from __future__ import annotations

import csv
from pathlib import Path

from daskrl import Observer, train
from daskrl.curriculum.observer import CurriculumObserver
from daskrl.evaluation import enjoy
from daskrl.learning.checkpoints import CheckpointStore
from daskrl.monitor.dashboard import summary_html
from daskrl.monitor.history import MetricsStore
from daskrl.protocol import EVENTS_TOPIC, METRICS_TOPIC

from ..helpers import run_config, slow

pytestmark = slow("curriculum runs of 10 to 20 s on clusters of their own")

CORRIDOR_RUN = {"env": "daskrl.testing.environments.task_envs:corridor", "num_workers": 2, "num_envs_per_worker": 16,
                "curriculum_window": 50, "report_interval": 0.5, "train_for_seconds": 120}


class StopAtTask(Observer):
    """Stops the run once its curriculum has reached ``level``, and keeps the reports and events the run logged on the
    scheduler for the dashboard."""

    def __init__(self, level: int) -> None:
        self.level = level
        self.metrics: list[dict] = []
        self.events: list[dict] = []

    def on_poll(self, run) -> None:
        if run.state.curriculum["level"] >= self.level:
            run.request_stop(f"the curriculum reached task {self.level}")

    def on_stop(self, run) -> None:
        self.metrics = [msg for _, msg in run.client.get_events(METRICS_TOPIC)]
        self.events = [msg for _, msg in run.client.get_events(EVENTS_TOPIC)]


def test_every_rollout_worker_moves_on_through_the_tasks_and_the_run_says_where_it_is(tmp_path):
    rows: list[dict] = []
    config = run_config(tmp_path, "corridor", base=CORRIDOR_RUN, curriculum_tasks=["2", "6", "14"],
                        train_for_env_steps=400_000)
    stopper = StopAtTask(2)
    summary = train(config, observers=[stopper], on_report=rows.append)
    assert summary["stop_reason"] == "the curriculum reached task 2", summary["stop_reason"]
    progress = summary["curriculum"]
    assert [p["task"] for p in progress["passed"]] == [0, 1] and all(p["success"] >= 0.9 for p in progress["passed"])
    assert progress["passed"][0]["env_steps"] < progress["passed"][1]["env_steps"] <= summary["env_steps"]
    levels = [row["curriculum_task"] for row in rows]
    assert levels == sorted(levels) and levels[-1] == 2, levels
    assert rows[0]["info/curriculum_task"] < 1.0, rows[0]  # the first row's episodes: task 0's, most of them
    events = list(csv.DictReader(open(Path(summary["experiment_dir"]) / "events.csv")))
    assert [e["event"] for e in events] == ["curriculum", "curriculum"] and "task=2" in events[1]["detail"]
    played = summary["data_path"]["slots_filled"]
    assert set(played) == {"rollout_0", "rollout_1"}, played
    store = MetricsStore()  # the dashboard's summary line, from what the run logged on the scheduler
    for msg in stopper.metrics:
        store.add(msg)
    for msg in stopper.events:
        store.add_event(msg)
    line = summary_html(store.get("corridor"))
    assert "curriculum task 2" in line and "curriculum passed=1 success=" in line and line.endswith("task=2</p>"), line


class EveryTwentyThousandSteps(CurriculumObserver):
    """A rule of one's own (docs/curriculum.md's example, at a smaller scale): task k from env step k * 20,000 on."""

    def ready(self, run):
        return {"steps_per_task": 20_000} if run.state.env_steps >= (self.progress.level + 1) * 20_000 else None


def test_a_rule_of_ones_own_takes_the_built_in_rules_place_and_moves_the_envs_alike(tmp_path):
    rows: list[dict] = []
    config = run_config(tmp_path, "own_rule", base=CORRIDOR_RUN, curriculum_tasks=["2", "6", "14"],
                        curriculum_window=1, train_for_env_steps=60_000)  # the built-in rule would pass at once
    summary = train(config, observers=[EveryTwentyThousandSteps()], on_report=rows.append)
    passed = summary["curriculum"]["passed"]
    assert [p["task"] for p in passed] == [0, 1] and all(p["steps_per_task"] == 20_000 for p in passed), passed
    assert [p["env_steps"] >= 20_000 * (k + 1) for k, p in enumerate(passed)] == [True, True], passed
    assert summary["curriculum"]["episodes"][2] > 0 and rows[-1]["curriculum_task"] == 2


def test_a_resume_in_the_middle_of_the_curriculum_goes_on_with_the_task_it_had_reached(tmp_path):
    options = {"base": CORRIDOR_RUN, "curriculum_tasks": ["2", "12"]}
    first = train(run_config(tmp_path, "resumed", **options, train_for_env_steps=400_000), observers=[StopAtTask(1)])
    saved = CheckpointStore(f"{first['experiment_dir']}/checkpoints").load("latest")
    assert saved["curriculum"]["level"] == 1 and saved["curriculum"]["passed"][0]["task"] == 0, saved["curriculum"]
    rows: list[dict] = []
    # a few seconds on (not a step budget: a fast machine took 20k steps before an evaluation could finish)
    second = train(run_config(tmp_path, "resumed", **options, resume=True, eval_interval_env_steps=5_000,
                              eval_episodes=3, train_for_env_steps=0, train_for_seconds=5), on_report=rows.append)
    progress = second["curriculum"]
    assert progress["episodes"][0] == 0 and progress["episodes"][1] > 0, progress  # no episode of task 0 again
    assert progress["passed"][0] == saved["curriculum"]["passed"][0]
    assert all(row["curriculum_task"] == 1 for row in rows) and rows[0]["info/curriculum_task"] == 1.0, rows[0]
    evaluated = [row["eval_length_mean"] for row in rows if row["eval_length_mean"] == row["eval_length_mean"]]
    assert evaluated and min(evaluated) >= 12, evaluated  # evaluations play the task reached too (task 0: 2 cells)
    played = enjoy(second["experiment_dir"], episodes=5, deterministic=True)  # the task reached: 12 cells
    assert played["return_mean"] == 1.0 and played["length_mean"] == 12.0, played
