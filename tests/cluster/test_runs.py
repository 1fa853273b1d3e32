"""Runs as objects on a shared cluster, a LocalCluster of 6 worker processes and a Client on it as a notebook makes
them: two runs started with ``daskrl.start`` train at once on workers of their own, each with its own experiment; a
third that does not fit is refused in one line; and a run handle gives its rows and status, scales the run, sets new
hyperparameters between two training steps, evaluates and stops."""

from __future__ import annotations

import csv
import time
from pathlib import Path

import pytest
from distributed import Client, LocalCluster

import daskrl
from daskrl.errors import ClusterAccessError, ConfigError
from daskrl.learning.checkpoints import CheckpointStore
from daskrl.runtime.access.runs import list_runs
from daskrl.runtime.memory.shm import list_segments

from ..helpers import SMALL_CARTPOLE, run_config, slow, wait_for


@pytest.fixture(scope="module")
def shared():
    """A LocalCluster of 6 worker processes, as a notebook makes one, and a Client on it."""
    cluster = LocalCluster(n_workers=6, threads_per_worker=1, processes=True, dashboard_address=None)
    client = Client(cluster, direct_to_workers=True)
    yield client
    client.close()
    cluster.close()


def components_by_worker(client: Client) -> dict[str, set[str]]:
    """Worker address -> the runs (bus scopes) whose components it hosts, from the scheduler's bus registry."""
    listed = client.sync(client.scheduler.daskrl_components)["components"]
    out: dict[str, set[str]] = {}
    for name, info in listed.items():
        out.setdefault(info["address"], set()).add(name.rpartition("/")[0])
    return out


@slow("two runs training at once, then a third refused")
def test_two_runs_share_a_cluster_on_workers_of_their_own(shared, tmp_path):
    config = {**SMALL_CARTPOLE, "num_workers": 2, "train_for_env_steps": 0, "train_for_seconds": 60}
    a = daskrl.start(run_config(tmp_path, "a", **config), client=shared)
    b = daskrl.start(run_config(tmp_path, "b", **config), client=shared)
    try:
        runs = {r["name"]: r for r in list_runs(shared)["runs"]}
        assert set(runs) == {"a", "b"} and len(runs["a"]["workers"]) == len(runs["b"]["workers"]) == 3
        assert not set(runs["a"]["workers"]) & set(runs["b"]["workers"])
        wait_for(lambda: len(a.metrics()) >= 2 and len(b.metrics()) >= 2, timeout=60, what="rows of both runs")
        hosts = components_by_worker(shared)
        assert all(len(scopes) == 1 for scopes in hosts.values()), hosts  # no worker hosts both runs' components
        t0 = time.monotonic()
        with pytest.raises(ConfigError) as refused:  # a third run does not fit: refused at once, in one line
            daskrl.start(run_config(tmp_path, "c", **config), client=shared)
        message = str(refused.value)
        assert time.monotonic() - t0 < 10 and "\n" not in message
        assert "held by other runs: 'a', 'b'" in message and "--wait-for-workers" in message
        with pytest.raises(ClusterAccessError, match="a run named 'a' is already training"):
            daskrl.start(run_config(tmp_path / "other", "a", **config), client=shared)
    finally:
        summaries = [a.stop(timeout=120), b.stop(timeout=120)]
    for name, summary in zip("ab", summaries, strict=True):
        assert summary["experiment_dir"] == str(tmp_path / name) and summary["env_steps"] > 0
        assert (tmp_path / name / "metrics.csv").exists()
        assert CheckpointStore(tmp_path / name / "checkpoints").latest() is not None
    assert not list_runs(shared)["runs"]  # both claims ended with their runs
    assert not (tmp_path / "c" / "config.json").exists()  # the refused run wrote nothing


@slow("a run steered through its handle")
def test_a_handle_watches_scales_sets_and_stops_a_run(shared, tmp_path):
    config = run_config(tmp_path, "steered", **{**SMALL_CARTPOLE, "num_workers": 1, "train_for_env_steps": 0,
                                                "train_for_seconds": 120})
    t0 = time.monotonic()
    with daskrl.start(config, client=shared) as run:
        started_in = time.monotonic() - t0
        assert run.status()["phase"] == "running" and run.status()["rollout_workers"] == 1
        wait_for(lambda: len(run.metrics()) >= 3, timeout=60, what="three rows")
        assert run.scale(rollout_workers=2)["rollout_workers"] == 2
        assert run.status()["rollout_workers"] == 2
        wait_for(lambda: run.status()["env_steps"] > 0, what="steps")
        now = run.set(learning_rate=0.00123, clip_ratio=0.15)
        assert now["learning_rate"] == 0.00123 and now["clip_ratio"] == 0.15
        after = now["after_train_step"]
        learner = run._run.fleet.teams.leaders[0]
        steps = wait_for(lambda: [s for s in learner.call("stats")["step_hyperparams"] if s[0] > after + 2],
                         timeout=60, what="training steps after the change")
        history = learner.call("stats")["step_hyperparams"]
        for step, hp in history:  # every step trained with the old values or the new ones, never a mix
            new = (hp["learning_rate"], hp["clip_ratio"]) == (0.00123, 0.15)
            old = hp["learning_rate"] != 0.00123 and hp["clip_ratio"] != 0.15
            assert new == (step > after) and (new or old), (step, hp, after)
        assert steps
        evaluation = run.evaluate(episodes=2)
        assert evaluation["episodes"] == 2 and evaluation["return_mean"] > 0
        with pytest.raises(ValueError):
            run.set(learning_rate=-1.0)
        wait_for(lambda: any(r["learning_rate"] == 0.00123 for r in run.metrics(frame=False)), what="the new rate in a row")
        summary = run.stop(timeout=120)
    assert started_in < 30 and summary["stop_reason"] == "stopped by its handle"
    assert run.status()["phase"] == "finished" and run.done
    with open(tmp_path / "steered" / "events.csv") as f:
        events = list(csv.DictReader(f))
    assert [e["event"] for e in events] == ["scale", "set"] and "learning_rate=0.00123" in events[1]["detail"]
    with open(tmp_path / "steered" / "metrics.csv") as f:
        assert any(float(r["learning_rate"]) == 0.00123 for r in csv.DictReader(f))
    state = CheckpointStore(Path(summary["experiment_dir"]) / "checkpoints").load("latest")
    assert state["hyperparams"]["learning_rate"] == 0.00123  # the final checkpoint holds what it trained with
    assert list_segments(run._run.session.run_id) == []
