"""Elastic runs on a real ``dask scheduler`` + ``dask worker`` cluster: workers that join get rollout workers, a
worker that leaves in order (``client.retire_workers``, or SIGTERM to its ``dask worker`` process group) hands over
every slot before it goes, a worker that joins under a departed worker's name (as dask-jobqueue names the job that
replaces an ended one) gets a rollout worker too, and a worker SIGKILLed on a full cluster leaves the run with fewer
rollout workers instead of retrying forever; a ``daskrl train --scheduler`` run on a cluster too small for all its
rollout workers starts with fewer and grows as workers join.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from daskrl import Observer, train
from daskrl.driver.changes.elastic import ElasticGrowth
from daskrl.runtime import dask_internals
from daskrl.runtime.cleanup.semaphores import mapped_semaphores, process_tree, remove_orphans

from ..helpers import dask_command, run_config, slow, start_cli_cluster, wait_for, worker_names

pytestmark = slow("elastic runs of 15 to 40 s on clusters of their own")


@pytest.fixture
def small_cluster(tmp_path):
    """``dask scheduler`` and two ``dask worker`` processes (w0, w1); the test adds more."""
    with start_cli_cluster(tmp_path, 2) as cluster:
        yield cluster


class Drill(Observer):
    """Three workers join; one is retired, one gets SIGTERM, a new worker joins under the retired one's name, one is
    SIGKILLed (with its nanny: it does not come back); then the run is stopped.

    Each step waits for the run to have taken the one before (the newcomers grown on, the leavers retired, the loss
    recorded), read from the run's own records, so the drill is as short as the run lets it be and never outruns a
    loaded machine. The first step comes at seconds of the run's own time (its rows' ``time_s``), counted from
    ``on_start`` (the fleet is placed and elastic growth has noted the workers that were there): a clock of the
    test's own would count the run's start-up too, and newcomers that joined before the run looked were taken as
    present from the start, so no rollout worker grew on them."""

    JOIN_AT = 4.0  # seconds of the run's time
    STEP_TIMEOUT = 60.0  # seconds each step may wait for the run to take the one before
    ROWS_AFTER_KILL_S = 4.0  # the run's time it goes on after the loss is recorded, before the drill stops it

    def __init__(self, cluster: dict) -> None:
        self.cluster = cluster
        self.run_zero = 0.0  # time.monotonic() when the run's time_s was 0
        self.run_zero_wall = 0.0  # and time.time() then
        self.marks: dict[str, float] = {}  # wall-clock times, as the summary's events have them
        self.error: BaseException | None = None
        self.left: dict[str, str] = {}
        self.killed_address = ""
        self.rejoined_address = ""
        self.orphans: set[str] = set()
        self.thread = threading.Thread(target=self._drill, daemon=True)

    def on_start(self, run) -> None:
        self.run = run
        self.growth = next(o for o in run.observers if isinstance(o, ElasticGrowth))
        self.run_zero = time.monotonic() - run.state.elapsed
        self.run_zero_wall = time.time() - run.state.elapsed
        self.thread.start()

    def finish(self) -> None:
        """Wait for the drill's thread; fail if the run never started it."""
        assert self.thread.ident is not None, "the run never started (no on_start)"
        self.thread.join(30)
        assert not self.thread.is_alive(), "the drill did not finish"

    def run_time(self, wall: float) -> float:
        """A wall-clock mark as seconds of the run's time (``time_s``)."""
        return wall - self.run_zero_wall

    def _address_of(self, name: str) -> str:
        return next(a for a, n in worker_names(self.cluster["client"]).items() if n == name)

    def _await(self, condition, what: str) -> None:
        wait_for(condition, timeout=self.STEP_TIMEOUT, interval=0.1, what=what)

    def _drill(self) -> None:
        try:
            self._join()
            self._leave_in_order()
            self._rejoin_under_a_departed_name()
            self._kill()
        except BaseException as exc:
            self.error = exc
        finally:
            self.run.request_stop("the drill is done")

    def _join(self) -> None:
        procs, client, address = self.cluster["procs"], self.cluster["client"], self.cluster["address"]
        time.sleep(max(0.0, self.run_zero + self.JOIN_AT - time.monotonic()))
        for name in ("w2", "w3", "w4"):
            procs.start(name, dask_command(), "worker", address, "--nworkers", "1", "--nthreads", "1",
                        "--name", name)
        self._await(lambda: len(dask_internals.cluster_workers(client)) >= 5, "three more workers joined")
        self.marks["joined"] = time.time()
        self._await(lambda: sum(e["event"] == "grew" for e in self.growth.history) >= 3,
                    "a rollout worker on each newcomer")
        grown = [e["component"] for e in self.growth.history if e["event"] == "grew"]
        self._await(lambda: all(self.run.data_path().get("slots_filled", {}).get(name, 0) > 0 for name in grown),
                    "every grown rollout worker filled slots")  # working, not just placed, before some leave

    def _leave_in_order(self) -> None:
        procs, client = self.cluster["procs"], self.cluster["client"]
        self.left = {"retired": self._address_of("w2"), "sigterm": self._address_of("w4")}
        client.retire_workers([self.left["retired"]])  # refused by Dask (actors): daskrl completes it
        os.killpg(procs.procs["w4"].pid, signal.SIGTERM)  # as kill, scancel or a pod's stop do
        self._await(lambda: not set(self.left.values()) & set(dask_internals.cluster_workers(client)),
                    "the retired and the SIGTERMed worker left")
        self._await(lambda: sum(e["event"] == "retired" for e in self.run.care.departures.history) >= 2,
                    "the run retired both leavers' rollout workers")

    def _rejoin_under_a_departed_name(self) -> None:
        """A batch cluster's replacement job: a new worker named as the retired one was."""
        procs, client, address = self.cluster["procs"], self.cluster["client"], self.cluster["address"]
        procs.start("w2-again", dask_command(), "worker", address, "--nworkers", "1", "--nthreads", "1",
                    "--name", "w2")
        self._await(lambda: "w2" in worker_names(client).values(), "a worker joined under the name w2 again")
        self.marks["rejoined"] = time.time()
        self.rejoined_address = self._address_of("w2")
        self._await(lambda: any(e["event"] == "grew" and e["address"] == self.rejoined_address
                                for e in self.growth.history), "a rollout worker on the worker named w2 again")

    def _kill(self) -> None:
        procs = self.cluster["procs"]
        self.killed_address = self._address_of("w3")
        # the semaphores of a SIGKILLed nanny and worker outlive them (multiprocessing's tracker dies too): the
        # test removes what it caused once they are gone
        self.orphans = mapped_semaphores(process_tree(procs.procs["w3"].pid))
        self.marks["kill"] = time.time()
        os.killpg(procs.procs["w3"].pid, signal.SIGKILL)  # its nanny too: it does not come back
        self._await(lambda: any(r.get("not_recreated") for r in self.run.care.recovery.recoveries), "the loss recorded")
        time.sleep(self.ROWS_AFTER_KILL_S)


def test_the_fleet_follows_workers_that_join_retire_and_die(small_cluster, tmp_path, capsys):
    config = run_config(tmp_path, "elastic", scheduler=small_cluster["address"], num_workers=1, train_for_seconds=240,
                        train_for_env_steps=0, report_interval=0.5)
    drill = Drill(small_cluster)
    try:
        summary = train(config, observers=[drill])
        drill.finish()
    finally:
        remove_orphans(drill.orphans)
    assert drill.error is None, drill.error
    out = capsys.readouterr().out
    events = summary["elastic"]

    # grow: every newcomer got a rollout worker within 10 s, and the run said so; so did the worker that took a
    # departed worker's name
    grew = [e for e in events if e["event"] == "grew"]
    assert len(grew) == 4, events
    assert all(e["time"] - drill.marks["joined"] < 10 for e in grew[:3]), (grew, drill.marks)
    assert grew[3]["address"] == drill.rejoined_address and grew[3]["time"] - drill.marks["rejoined"] < 10, grew
    assert out.count("joined: rollout_") == 4, out

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
    assert "is not recreated: the cluster has no idle worker; running with 2 rollout workers" in out, out
    assert sum(1 for r in summary["recoveries"] if r["component"] == lost["component"]) == 1  # tried once
    assert summary["stop_reason"] == "the drill is done", summary["stop_reason"]
    rows_after = [line for line in out.splitlines() if line.startswith("[") and "env steps" in line]
    assert rows_after, out
    # the run's own rows (time_s) go on after the kill, and so do its env steps
    with open(tmp_path / "elastic" / "metrics.csv", newline="") as f:
        rows = [(float(r["time_s"]), int(r["env_steps"])) for r in csv.DictReader(f)]
    killed_at = drill.run_time(drill.marks["kill"])
    after_kill = [steps for t, steps in rows if t > killed_at + 1]
    assert len(after_kill) >= 2 and after_kill[-1] > after_kill[0], (killed_at, rows[-5:])


def test_an_elastic_run_starts_on_a_cluster_too_small_for_it_and_grows_as_workers_join(small_cluster, tmp_path):
    """``daskrl train --scheduler ADDR`` (elastic there) on 2 ``dask worker`` processes: CartPole's 2 rollout
    workers and a learner do not fit, so it starts with the learner and 1 rollout worker, says so in one line, and
    grows to 3 rollout workers when two workers join (it was refused: "the cluster has 2 worker processes but this
    run needs 3")."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "daskrl", "train", "--env", "CartPole-v1", "--scheduler", small_cluster["address"],
         "--train-dir", str(tmp_path), "--experiment", "small", "--dashboard-address", "", "--train-for-seconds",
         "120", "--train-for-env-steps", "0", "--report-interval", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        wait_for(lambda: proc.poll() is not None or any("env steps" in line and "fps" in line for line in lines),
                 timeout=120, interval=0.2, what="the run's first report")
        assert any("starts with 1 of its 2 rollout workers and grows as workers join" in line for line in lines), \
            "".join(lines)
        for name in ("w2", "w3"):
            small_cluster["procs"].start(name, dask_command(), "worker", small_cluster["address"], "--nworkers", "1",
                                         "--nthreads", "1", "--name", name)
        wait_for(lambda: any("now 3 rollout and 0 inference workers" in line for line in lines), timeout=60,
                 interval=0.2, what="the run to grow to 3 rollout workers")
        grown_at = len(lines)
        wait_for(lambda: any("env steps" in line for line in lines[grown_at:]), timeout=30, interval=0.2,
                 what="a report after growing")
        proc.send_signal(signal.SIGINT)  # Ctrl-C: a last row, a final checkpoint, exit 0
        assert proc.wait(timeout=60) == 0, "".join(lines)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        reader.join(10)
    out = "".join(lines)
    assert "Traceback" not in out and "SIGINT" in out, out
