"""Runs as objects on a shared cluster: the scheduler's run registry (claims, leases, names), several runs on one
cluster from one Client (each on its own workers, with its own experiment), a run that does not fit refused in one
line, and a run handle (``daskrl.start``): its rows, status, scaling, new hyperparameters between two training
steps, evaluation, stop."""

from __future__ import annotations

import asyncio
import csv
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from distributed import Client, LocalCluster

import daskrl
from daskrl.errors import ClusterAccessError, ConfigError
from daskrl.learning.checkpoints import CheckpointStore
from daskrl.runtime.access.runs import LEASE_S, RunRegistry, list_runs
from daskrl.runtime.memory.shm import list_segments

from .helpers import SMALL_CARTPOLE, run_config, slow, wait_for

# ---- the registry alone ----


def registry_with(workers: list[str]) -> RunRegistry:
    registry = RunRegistry()
    registry.scheduler = SimpleNamespace(workers={w: None for w in workers})
    return registry


def call(coroutine):
    return asyncio.run(coroutine)


def test_a_worker_goes_to_one_run_and_a_name_to_one_run():
    reg = registry_with(["w1", "w2", "w3"])
    assert call(reg.open("a", "train_dir/a", client="c1"))["status"] == "ok"
    assert call(reg.open("b", "train_dir/b", client="c2"))["status"] == "ok"
    taken = call(reg.open("a", "elsewhere/a", client="c3"))
    assert taken["status"] == "taken" and "already training" in taken["message"] and "\n" not in taken["message"]
    assert call(reg.claim("a", ["w1", "w2"]))["status"] == "ok"
    refused = call(reg.claim("b", ["w2", "w3"]))  # all or nothing: w3 is not taken either
    assert refused == {"status": "busy", "held": {"w2": "a"}}
    assert call(reg.claim("b", ["w3"]))["status"] == "ok"
    table = {r["name"]: r for r in call(reg.table())["runs"]}
    assert table["a"]["workers"] == ["w1", "w2"] and table["b"]["workers"] == ["w3"]
    call(reg.release("a", ["w2"]))
    assert call(reg.claim("b", ["w2"]))["status"] == "ok"


def test_a_sharing_run_may_use_held_workers_and_claims_end_with_their_driver():
    reg = registry_with(["w1", "w2"])
    call(reg.open("a", "a", client="c1"))
    call(reg.open("s", "s", client="c2", share=True))
    call(reg.claim("a", ["w1", "w2"]))
    assert call(reg.claim("s", ["w1"]))["status"] == "ok"  # --share-workers
    reg.remove_client(None, "c1")  # a's driver is gone (ended, or killed): its workers are free
    assert [r["name"] for r in call(reg.table())["runs"]] == ["s"]
    reg.remove_worker(None, "w1")
    assert call(reg.table())["runs"][0]["workers"] == []
    call(reg.open("quiet", "q", client="c3"))
    reg.runs["quiet"]["beat"] = time.time() - LEASE_S - 1  # its driver stopped beating
    reg.expire()
    assert "quiet" not in reg.runs


def test_a_beat_hands_over_what_attached_handles_asked():
    reg = registry_with(["w1"])
    call(reg.open("a", "a", client="c1"))
    assert call(reg.command("a", {"op": "set", "values": {"learning_rate": 1e-3}}))["status"] == "ok"
    reply = call(reg.beat("a", "running", {"env_steps": 10}))
    assert reply["commands"] == [{"op": "set", "values": {"learning_rate": 1e-3}}]
    assert call(reg.beat("a", "running"))["commands"] == []  # handed over once
    assert call(reg.table())["runs"][0]["report"] == {"env_steps": 10}
    assert call(reg.command("nobody", {"op": "stop"}))["status"] == "unknown"


def test_the_dashboard_lists_the_live_runs():
    from daskrl.monitor.dashboard.runs import live_runs, runs_table_html
    from daskrl.runtime.access.runs import PLUGIN_NAME

    reg = registry_with(["w1", "w2"])
    call(reg.open("cartpole", "train_dir/cartpole", client="c1"))
    call(reg.claim("cartpole", ["w1", "w2"]))
    call(reg.beat("cartpole", "running", {"env_steps": 123456, "fps": 98765.4, "episode_return_mean": 432.1}))
    runs = live_runs(SimpleNamespace(plugins={PLUGIN_NAME: reg}))
    assert [(r["name"], r["state"], r["workers"], r["env_steps"]) for r in runs] == [
        ("cartpole", "running", ["w1", "w2"], 123456)]
    page = runs_table_html(runs)
    assert "cartpole" in page and "123,456" in page and "98,765" in page and "432.1" in page
    assert live_runs(SimpleNamespace(plugins={})) == [] and runs_table_html([]) == ""


# ---- runs on one cluster ----


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
        wait_for(lambda: any(r["learning_rate"] == 0.00123 for r in run.metrics()), what="the new rate in a row")
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

