"""Replay shards per host (``--replay-shards auto``): where shards start and which one each rollout worker feeds
(the host grouping, from worker addresses), a real DQN run on one host (one shard, every slot through shared memory,
its statistics in the rows, the summary and the dashboard page), and a run that grows onto a second "host" (a
``dask worker --host 127.0.0.2``: another loopback address, which daskrl's host test tells from 127.0.0.1) and gets
a shard there, checkpointed and refilled on ``--resume``."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from daskrl import Observer, train
from daskrl.driver.fleet.replay_hosts import route, shard_workers
from daskrl.monitor.dashboard import DashboardPlugin, RunPage, dashboard_page
from daskrl.monitor.history import MetricsStore, latest_payload
from daskrl.monitor.replay_stats import replay_shards, replay_totals
from daskrl.protocol import METRICS_TOPIC

from ..browser import CHROMIUM, Browser
from ..helpers import DQN_CARTPOLE, REPORT_OFTEN, dask_command, get_json, run_config, slow, start_cli_cluster

A1, A2, B1 = "tcp://10.0.0.1:4001", "tcp://10.0.0.1:4002", "tcp://10.0.0.2:4001"


# ---- the host grouping ----


def test_auto_starts_a_shard_on_the_first_rollout_worker_of_each_host_and_routes_by_host():
    assert shard_workers("auto", [A1, A2, B1]) == [A1, B1]
    assert shard_workers("auto", [B1, A2, A1]) == [B1, A2]  # hosts in the order their first rollout worker comes
    shards = shard_workers("auto", [A1, A2])
    assert [route("auto", i, a, shards) for i, a in enumerate([A1, A2])] == [0, 0]
    assert route("auto", 2, B1, shards) is None  # a host with no shard: the fleet adds one there
    assert route("auto", 3, "inproc://10.0.0.2/77/1", [A1, B1]) == 1  # an in-process worker's host counts too


def test_a_number_of_shards_keeps_the_fixed_layout():
    assert shard_workers(2, [A1, A2, B1]) == [A1, A2]
    assert shard_workers(3, [A1, B1]) == [A1, B1, A1]
    assert [route(2, i, B1, [A1, A2]) for i in range(4)] == [0, 1, 0, 1]  # by index, whatever the host


# ---- the shards' numbers: rows, page ----


def _shard_stats(address: str, size: int, by_worker: dict[str, int]) -> dict:
    """A shard's statistics as ``ReplayShard.stats()`` reports them (the parts the runner reads)."""
    return {"address": address, "replay": {"size": size, "capacity": 1_000, "added": size, "served": size // 10,
                                           "waiting_requests": 1, "held_slots": 2, "prioritized": True},
            "batcher": {"slots_shm": sum(by_worker.values()), "slots_comms": 0, "slots_by_worker": by_worker}}


def test_shard_numbers_reach_the_rows_and_the_page_in_shard_order():
    last_stats = {"replay_10": _shard_stats(B1, 300, {"rollout_10": 3}),
                  "replay_2": _shard_stats(A1, 500, {"rollout_2": 4, "rollout_0": 1}),
                  "learner": {"address": A1, "replay_seen": {"replay_2": {"size": 500, "added": 500}}},
                  "rollout_0": {"address": A1, "slots_filled": 1}}
    shards = replay_shards(last_stats)
    assert [s["shard"] for s in shards] == ["replay_2", "replay_10"]
    assert shards[0]["host"] == "10.0.0.1" and shards[0]["rollout_workers"] == ["rollout_0", "rollout_2"]
    assert [s["trained_on"] for s in shards] == [True, False]
    assert replay_totals(shards) == {"replay_shards": 2, "replay_size": 800, "replay_capacity": 2_000,
                                     "replay_added": 800, "replay_served": 80}
    assert replay_shards({"learner": {"address": A1}}) == [] and replay_totals([]) == {}  # APPO: no columns

    store = MetricsStore()
    store.add({"run": "dqn", "env": "E", "row": {"time_s": 1.0, "env_steps": 10}, "replay": shards})
    page = RunPage(store)
    assert page.replay_table.visible and page.replay_table.text.count("daskrl-replay-shard") == 2
    assert "500 / 1,000 (50%)" in page.replay_table.text and "10.0.0.2" in page.replay_table.text
    assert latest_payload(store)["replay"][1]["shard"] == "replay_10"


# The page's text, shadow roots included (Bokeh's Divs are there).
TEXT_PROBE = """(() => {
  const texts = (root, out) => { for (const el of root.querySelectorAll('*')) {
      if (el.shadowRoot) { out.push(el.shadowRoot.textContent || ''); texts(el.shadowRoot, out); } } return out; };
  return {text: document.body.innerText + '\\n' + texts(document, []).join('\\n')};
})()"""


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
@slow("headless Chromium")
def test_the_page_shows_the_shard_table_in_chromium(tmp_path):
    from distributed import Client, LocalCluster

    shards = replay_shards({"replay_0": _shard_stats(A1, 640, {"rollout_0": 5}),
                            "replay_1": _shard_stats(B1, 128, {"rollout_1": 1}),
                            "learner": {"address": A1, "replay_seen": {"replay_0": {}, "replay_1": {}}}})
    with LocalCluster(n_workers=0, processes=False, protocol="tcp://", host="127.0.0.1",
                      dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client:
        client.register_plugin(DashboardPlugin())
        client.log_event(METRICS_TOPIC, {"run": "dqn", "env": "CartPole-v1", "replay": shards,
                                         "row": {"time_s": 1.0, "env_steps": 768, "fps": 100.0}})
        page = dashboard_page(client)
        assert [s["shard"] for s in get_json(f"{page}/api/latest?run=dqn")["replay"]] == ["replay_0", "replay_1"]
        browser = Browser(tmp_path)
        try:
            probe, _ = browser.inspect(page, lambda p: "replay shards" in p["text"], probe=TEXT_PROBE)
        finally:
            browser.close()
    text = probe["text"]
    assert "replay shards (2, 768 of 2,000 transitions held)" in text, text
    assert "640 / 1,000 (64%)" in text and "10.0.0.2" in text and "rollout_1" in text, text


# ---- one host: one shard, slots through shared memory, its numbers shown ----


class SchedulerStore(Observer):
    """The replay shards as the scheduler's dashboard plugin holds them (from the run's metrics events)."""

    def __init__(self) -> None:
        self.replay: list[dict] = []

    def on_report(self, run, row) -> None:
        def held(dask_scheduler, name: str = run.config.run.experiment) -> list:
            hist = dask_scheduler.plugins["daskrl-dashboard"].store.get(name)
            return hist.replay if hist is not None else []

        self.replay = run.fleet.client.run_on_scheduler(held)


@slow("a DQN run on an embedded cluster of 3 worker processes")
def test_auto_on_one_host_keeps_one_shard_fed_through_shared_memory_and_shows_it(tmp_path):
    seen = SchedulerStore()
    config = run_config(tmp_path, "one_host", base={**DQN_CARTPOLE, **REPORT_OFTEN}, num_workers=2,
                        learning_starts=300, train_for_env_steps=3_000)
    assert config.algo.replay_shards == "auto"  # the default
    summary = train(config, observers=[seen])
    [shard] = summary["replay_shards"]
    assert shard["shard"] == "replay_0" and shard["rollout_workers"] == ["rollout_0", "rollout_1"], shard
    assert shard["slots_shm"] > 0 and shard["slots_comms"] == 0, shard  # every slot copied in place
    assert shard["capacity"] == 100_000 and shard["added"] >= 3_000 and shard["served"] > 0 and shard["trained_on"]
    path = summary["data_path"]
    # the summary has the shard's numbers after the stop's drain: every slot the samplers filled (8 envs x 16 steps)
    assert shard["added"] == 8 * 16 * sum(path["slots_filled"].values()), (shard, path["slots_filled"])
    assert path["slots_comms"] == 0 and set(path["slots_taken"]) == {"rollout_0", "rollout_1"}, path
    with open(tmp_path / "one_host" / "metrics.csv", newline="") as f:
        last = list(csv.DictReader(f))[-1]
    assert last["replay_shards"] == "1" and int(last["replay_added"]) > 0 and int(last["replay_served"]) > 0

    # the scheduler's store got the shard table from the run's events; the page shows it
    assert [s["shard"] for s in seen.replay] == ["replay_0"] and seen.replay[0]["size"] > 0, seen.replay
    store = MetricsStore()
    store.add({"run": "one_host", "env": "CartPole-v1", "row": {"time_s": 1.0, "env_steps": 10},
               "replay": seen.replay})
    page = RunPage(store)
    table = page.replay_table.text
    assert page.replay_table.visible and table.count("daskrl-replay-shard") == 1, table
    assert "replay_0" in table and "127.0.0.1" in table and "rollout_0, rollout_1" in table, table
    store.add({"run": "appo", "env": "CartPole-v1", "row": {"time_s": 1.0, "env_steps": 10}})  # no shards
    page.update()
    assert not page.replay_table.visible and page.replay_table.text == ""


# ---- a second host joins: a shard of its own, checkpointed, refilled on --resume ----


class StopWhenShardTrains(Observer):
    """Stops the run once the learner has trained on ``shard``'s draws (and it served ``served`` of them)."""

    def __init__(self, shard: str, served: int = 20) -> None:
        self.shard, self.served = shard, served
        self.first_sight: dict | None = None  # the shard's numbers the first time the run saw it
        self.learner_saw: set[str] = set()

    def on_poll(self, run) -> None:
        shards = {s["shard"]: s for s in run.state.replay}
        if self.first_sight is None and self.shard in shards:
            self.first_sight = dict(shards[self.shard])
        self.learner_saw = set(run.ledger.last_stats.get("learner", {}).get("replay_seen", {}))
        mine = shards.get(self.shard)
        if mine and mine["trained_on"] and mine["served"] >= self.served:
            run.request_stop(f"the learner trained on {self.shard}")


def _join(cluster: dict, name: str, host: str) -> None:
    """A ``dask worker`` named ``name`` listening on loopback address ``host`` (another host, to daskrl)."""
    cluster["procs"].start(name, dask_command(), "worker", cluster["address"], "--nworkers", "1", "--nthreads", "1",
                           "--name", name, "--host", host)


@slow("two short elastic DQN runs on a dask CLI cluster that grows onto a second loopback address")
def test_a_host_that_joins_gets_a_shard_whose_replay_is_checkpointed_and_refilled(tmp_path):
    base = {**DQN_CARTPOLE, **REPORT_OFTEN, "learning_starts": 200, "checkpoint_replay": True,
            "train_for_env_steps": 0, "train_for_seconds": 150}
    with start_cli_cluster(tmp_path, 2) as cluster:  # w0 (the learner), w1 (rollout_0): both on 127.0.0.1
        class JoinWhenTraining(StopWhenShardTrains):
            def on_report(self, run, row) -> None:
                if row["policy_version"] > 0 and "w2" not in cluster["procs"].procs:
                    _join(cluster, "w2", "127.0.0.2")

        grow = JoinWhenTraining("replay_1")
        summary = train(run_config(tmp_path, "hosts", base=base, scheduler=cluster["address"]), observers=[grow])
        assert summary["stop_reason"] == "the learner trained on replay_1", summary["stop_reason"]
        [grew] = [e for e in summary["elastic"] if e["event"] == "grew"]
        assert grew["component"] == "rollout_1" and grew["shards"] == ["replay_1"], grew
        shards = {s["shard"]: s for s in summary["replay_shards"]}
        assert sorted(shards) == ["replay_0", "replay_1"], shards
        assert shards["replay_0"]["host"] == "127.0.0.1" and shards["replay_1"]["host"] == "127.0.0.2", shards
        assert shards["replay_1"]["rollout_workers"] == ["rollout_1"], shards  # the newcomer feeds its own host's
        assert shards["replay_0"]["rollout_workers"] == ["rollout_0"], shards
        assert shards["replay_1"]["slots_shm"] > 0 and shards["replay_1"]["slots_comms"] == 0, shards
        assert shards["replay_1"]["capacity"] == shards["replay_0"]["capacity"] == 100_000  # the first one's share
        assert grow.learner_saw == {"replay_0", "replay_1"}, grow.learner_saw  # trained on both shards' draws
        saved = {}
        for name in ("replay_0", "replay_1"):  # the final checkpoint saved every shard, the added one too
            with np.load(tmp_path / "hosts" / "replay" / f"{name}.npz") as f:
                saved[name] = f["counters"].tolist()  # next, size, added, served
        assert saved["replay_1"][1] > 0 and saved["replay_1"][3] > 0, saved

        # resumed (with rollout_0 and replay_0 on w1): w2 is there from the start, so idle; a newcomer on 127.0.0.2
        # gets rollout_1 and replay_1 again, which loads its file before it takes a slot
        class JoinAtOnce(StopWhenShardTrains):
            def on_report(self, run, row) -> None:
                if "w3" not in cluster["procs"].procs:
                    _join(cluster, "w3", "127.0.0.2")

        again = JoinAtOnce("replay_1", served=saved["replay_1"][3] + 10)
        resumed = train(run_config(tmp_path, "hosts", base=base, scheduler=cluster["address"], resume=True),
                        observers=[again])
    assert resumed["stop_reason"] == "the learner trained on replay_1", resumed["stop_reason"]
    assert again.first_sight["size"] >= saved["replay_1"][1], (again.first_sight, saved)  # refilled from its file
    assert again.first_sight["served"] >= saved["replay_1"][3], (again.first_sight, saved)
    shards = {s["shard"]: s for s in resumed["replay_shards"]}
    assert shards["replay_1"]["host"] == "127.0.0.2" and shards["replay_1"]["rollout_workers"] == ["rollout_1"]
