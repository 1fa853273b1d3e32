"""Elastic runs on a real ``dask scheduler`` + ``dask worker`` cluster: workers that join get rollout workers, a
worker that leaves in order (``client.retire_workers``, or SIGTERM to its ``dask worker`` process group) hands over
every slot before it goes, and a worker SIGKILLed on a full cluster leaves the run with fewer rollout workers
instead of retrying forever; ``--adapt`` grows an embedded cluster on its own.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from daskrl import train
from daskrl.config import Config
from daskrl.runtime.semaphores import mapped_semaphores, process_tree, remove_orphans

from .helpers import Processes, dask_command, free_port, wait_for_cluster, worker_names


@pytest.fixture
def small_cluster(tmp_path):
    """``dask scheduler`` and two ``dask worker`` processes (w0, w1); the test adds more."""
    procs = Processes(tmp_path)
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    client = None
    try:
        procs.start("scheduler", dask_command(), "scheduler", "--host", "127.0.0.1", "--port", str(port),
                    "--dashboard-address", "127.0.0.1:0")
        for i in range(2):
            procs.start(f"w{i}", dask_command(), "worker", address, "--nworkers", "1", "--nthreads", "1",
                        "--name", f"w{i}")
        client = wait_for_cluster(address, 2, procs)
        yield {"address": address, "client": client, "procs": procs}
    finally:
        if client is not None:
            client.close()
        left = procs.stop()
        assert left == [], f"processes left running: {left}"


class Drill:
    """Runs on its own thread while the training runs: three workers join; one is retired, one gets SIGTERM, one
    is SIGKILLed (with its nanny: it does not come back)."""

    def __init__(self, cluster: dict) -> None:
        self.cluster = cluster
        self.started = time.monotonic()
        self.marks: dict[str, float] = {}
        self.error: BaseException | None = None
        self.left: dict[str, str] = {}
        self.killed_address = ""
        self.orphans: set[str] = set()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _wait_until(self, seconds: float) -> None:
        time.sleep(max(0.0, self.started + seconds - time.monotonic()))

    def _address_of(self, name: str) -> str:
        return next(a for a, n in worker_names(self.cluster["client"]).items() if n == name)

    def _run(self) -> None:
        try:
            procs, client, address = self.cluster["procs"], self.cluster["client"], self.cluster["address"]
            self._wait_until(20)
            for name in ("w2", "w3", "w4"):
                procs.start(name, dask_command(), "worker", address, "--nworkers", "1", "--nthreads", "1",
                            "--name", name)
            while len(client.scheduler_info()["workers"]) < 5:
                time.sleep(0.1)
            self.marks["joined"] = time.time()
            self._wait_until(40)
            self.left = {"retired": self._address_of("w2"), "sigterm": self._address_of("w4")}
            client.retire_workers([self.left["retired"]])  # refused by Dask (actors): daskrl completes it
            os.killpg(procs.procs["w4"].pid, signal.SIGTERM)  # as kill, scancel or a pod's stop do
            while set(self.left.values()) & set(client.scheduler_info()["workers"]):
                time.sleep(0.1)
            self._wait_until(55)
            self.killed_address = self._address_of("w3")
            # the semaphores of a SIGKILLed nanny and worker outlive them (multiprocessing's tracker dies too): the
            # test removes what it caused once they are gone
            self.orphans = mapped_semaphores(process_tree(procs.procs["w3"].pid))
            self.marks["kill"] = time.time()
            os.killpg(procs.procs["w3"].pid, signal.SIGKILL)  # its nanny too: it does not come back
        except BaseException as exc:
            self.error = exc


def test_the_fleet_follows_workers_that_join_retire_and_die(small_cluster, tmp_path, capsys):
    config = Config().replace(train_dir=str(tmp_path), experiment="elastic", dashboard_address="",
                              scheduler=small_cluster["address"], num_workers=1, train_for_seconds=75,
                              train_for_env_steps=0, report_interval=0.5)
    drill = Drill(small_cluster)
    drill.thread.start()
    try:
        summary = train(config)
        drill.thread.join(30)
    finally:
        remove_orphans(drill.orphans)
    assert drill.error is None, drill.error
    out = capsys.readouterr().out
    events = summary["elastic"]

    # grow: every newcomer got a rollout worker within 10 s, and the run said so
    grew = [e for e in events if e["event"] == "grew"]
    assert len(grew) == 3, events
    assert all(e["time"] - drill.marks["joined"] < 10 for e in grew), (grew, drill.marks)
    assert out.count("joined: rollout_") == 3, out

    # leaving in order, both ways: drained, and every slot they filled was taken by the learner
    retired = {e["address"]: e for e in events if e["event"] == "retired"}
    assert sorted(retired) == sorted(drill.left.values()), (events, drill.left)
    path = summary["data_path"]
    for event in retired.values():
        name = event["component"]
        assert event["drained"], event
        assert path["slots_filled"][name] == path["slots_taken"][name] > 0, (path["slots_filled"], path["slots_taken"])
    assert out.count("filled slots (drained)") == 2, out

    # an abrupt loss on a full cluster: not recreated, the run goes on with fewer rollout workers
    [lost] = [r for r in summary["recoveries"] if r.get("not_recreated")]
    assert lost["component"] == next(e["component"] for e in grew if e["address"] == drill.killed_address)
    assert lost["time"] - drill.marks["kill"] < 25, lost
    assert "is not recreated: the cluster has no idle worker; running with 1 rollout workers" in out, out
    assert sum(1 for r in summary["recoveries"] if r["component"] == lost["component"]) == 1  # tried once
    assert summary["stop_reason"].startswith("trained for"), summary["stop_reason"]
    rows_after = [line for line in out.splitlines() if line.startswith("[") and "env steps" in line]
    assert rows_after, out


def test_adapt_grows_the_embedded_cluster_to_more_rollout_workers(tmp_path, capsys):
    config = Config().replace(train_dir=str(tmp_path), experiment="adapt", dashboard_address="", adapt="1:4",
                              train_for_seconds=40, train_for_env_steps=0, report_interval=0.5)
    summary = train(config)
    out = capsys.readouterr().out
    grew = [e for e in summary["elastic"] if e["event"] == "grew"]
    assert len(grew) >= 1, (summary["elastic"], out)
    rollout = {n for n in summary["data_path"]["slots_filled"]}
    assert len(rollout) >= 2, rollout  # started with one (MIN 1 holds a learner and one rollout worker)
    assert "rollout_0" in rollout
