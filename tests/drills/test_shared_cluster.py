"""Several ``daskrl train`` runs on one ``dask scheduler`` with 4 ``dask worker`` processes, as a lab shares a
cluster: two runs started at the same moment from two processes each get workers of their own (no worker ever
hosts components of both), a third that does not fit is refused in one line or, with ``--wait-for-workers``, waits
and starts once a run ends; Ctrl-C on one leaves the other training at its speed; ``daskrl runs`` lists them."""

from __future__ import annotations

import csv
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from daskrl.runtime.access.runs import list_runs

from ..helpers import scopes_by_worker, slow, start_cli_cluster, training, wait_for

pytestmark = slow("four dask workers and four daskrl drivers started from the command line")


@pytest.fixture
def four_workers(tmp_path):
    with start_cli_cluster(tmp_path, 4) as cluster:
        yield cluster


def train_command(address: str, train_dir: Path, name: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "daskrl", "train", "--env", "CartPole-v1", "--scheduler", address,
            "--num-workers", "1", "--num-envs-per-worker", "16", "--experiment", name, "--train-dir", str(train_dir),
            "--train-for-env-steps", "0", "--report-interval", "0.5", *extra]


def fps_between(csv_path: Path, start_s: float, end_s: float) -> float:
    """Frames per second of a run between two of its own times (the CSV's time_s)."""
    with open(csv_path) as f:
        rows = [(float(r["time_s"]), int(r["env_steps"])) for r in csv.DictReader(f)]
    inside = [(t, s) for t, s in rows if start_s <= t <= end_s]
    assert len(inside) >= 2, (start_s, end_s, rows[-5:])
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def run_time_s(csv_path: Path) -> float:
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    return float(rows[-1]["time_s"]) if rows else 0.0


def test_runs_share_a_cli_cluster_on_workers_of_their_own(four_workers, tmp_path):
    address, client, procs = four_workers["address"], four_workers["client"], four_workers["procs"]
    a = procs.start("a", *train_command(address, tmp_path, "a", "--train-for-seconds", "120"))
    b = procs.start("b", *train_command(address, tmp_path, "b", "--train-for-seconds", "120"))
    runs = wait_for(lambda: training(client, "a", "b"), timeout=120, what="both runs training")
    assert not set(runs["a"]["workers"]) & set(runs["b"]["workers"])
    for _ in range(10):  # while they train, no worker ever hosts components of both
        assert all(len(scopes) == 1 for scopes in scopes_by_worker(client).values())
        time.sleep(0.3)
    listed = subprocess.run([sys.executable, "-m", "daskrl", "runs", "--scheduler", address],
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and "2 run(s) hold 4 of the cluster's 4 workers" in listed.stdout, listed.stdout
    t0 = time.monotonic()
    refused = subprocess.run(train_command(address, tmp_path, "c", "--train-for-seconds", "5"),
                             capture_output=True, text=True, timeout=60)
    # refused at once, not after waiting for workers (a minute and more): 11.3 s once beside two training runs and
    # another test file's
    assert refused.returncode == 2 and time.monotonic() - t0 < 20, (refused.returncode, refused.stderr)
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "held by other runs: 'a', 'b'" in lines[0], refused.stderr
    d = procs.start("d", *train_command(address, tmp_path, "d", "--train-for-seconds", "6",
                                        "--wait-for-workers", "120"))
    wait_for(lambda: "waiting up to 120 s for workers" in procs.log("d"), timeout=60, what="d waiting")
    wait_for(lambda: run_time_s(tmp_path / "b" / "metrics.csv") > 15, timeout=60, what="b training for a while")
    before_end = run_time_s(tmp_path / "b" / "metrics.csv")
    a.send_signal(signal.SIGINT)  # Ctrl-C: a stops in order, b trains on
    assert a.wait(60) == 0, procs.log("a")
    wait_for(lambda: run_time_s(tmp_path / "b" / "metrics.csv") > before_end + 10, timeout=60, what="b going on")
    after_start = before_end + 2
    assert fps_between(tmp_path / "b" / "metrics.csv", after_start, after_start + 8) >= \
        0.8 * fps_between(tmp_path / "b" / "metrics.csv", before_end - 10, before_end), "b slowed down"
    b.send_signal(signal.SIGINT)  # measured: b stops in order too
    assert b.wait(120) == 0, procs.log("b")
    assert d.wait(120) == 0, procs.log("d")  # it got a's workers and trained its 6 s
    assert run_time_s(tmp_path / "d" / "metrics.csv") >= 5
    assert not list_runs(client)["runs"]
