"""The scheduler's run registry (daskrl/runtime/access/runs.py) with a stand-in scheduler: a worker and a name go to
one run, a sharing run may use held workers, claims end with their driver or its lease, a beat hands over what
attached handles asked, and the dashboard lists the live runs."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from daskrl.runtime.access.runs import LEASE_S, RunRegistry


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
