"""A league whose members are separate ``daskrl train`` runs on one ``dask scheduler`` with 4 ``dask worker``
processes: a main agent and a main exploiter, each on workers of its own, each playing the other's current policy
and snapshots (read from the other run's parameter blocks); SIGKILL of the main agent's learner worker: the main
agent's run recovers it, and the exploiter's run follows its new blocks and plays on against it."""

from __future__ import annotations

import csv
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from daskrl.runtime.access.runs import list_runs

from ..helpers import scopes_by_worker, slow, start_cli_cluster, training, wait_for

pytest.importorskip("pettingzoo", reason="the league plays PettingZoo's tic-tac-toe: pip install 'daskrl[multiagent]'")
pytestmark = slow("two league member runs from the command line on four dask workers")


def member_command(address: str, train_dir: Path, name: str, peer: str, role: str) -> list[str]:
    return [sys.executable, "-m", "daskrl", "train", "--env", "pettingzoo.classic.tictactoe.tictactoe:env",
            "--scheduler", address, "--experiment", name, "--train-dir", str(train_dir), "--league",
            "--league-peers", peer, "--league-role", role, "--num-workers", "1", "--num-envs-per-worker", "32",
            "--self-play-snapshots", "2", "--self-play-snapshot-every", "20", "--train-for-env-steps", "0",
            "--train-for-seconds", "300", "--report-interval", "1", "--checkpoint-interval", "2"]


def games_against(experiment: Path, prefix: str) -> dict[str, int]:
    """Games of this run's member by opponent, for the opponents whose names start with ``prefix``."""
    path = experiment / "payoff.csv"
    if not path.exists():
        return {}
    rows = list(csv.DictReader(open(path)))
    return {r["opponent"]: int(r["games"]) for r in rows if r["opponent"].startswith(prefix) and ":" not in r["player"]}


def snapshot_versions(games: dict[str, int]) -> set[int]:
    return {int(name.rpartition("@")[2]) for name in games if "@" in name}


def test_league_members_as_runs_play_each_other_and_one_survives_its_learner_killed(tmp_path):
    with start_cli_cluster(tmp_path, 4) as cluster:
        address, client, procs = cluster["address"], cluster["client"], cluster["procs"]
        a = procs.start("a", *member_command(address, tmp_path, "a", "b", "main"))
        b = procs.start("b", *member_command(address, tmp_path, "b", "a", "main_exploiter"))
        runs = wait_for(lambda: training(client, "a", "b"), timeout=120, what="both runs training")
        assert not set(runs["a"]["workers"]) & set(runs["b"]["workers"])
        assert all(len(scopes) == 1 for scopes in scopes_by_worker(client).values())  # no worker hosts both
        # each plays the other's current policy and snapshots
        wait_for(lambda: any("@" in n for n in games_against(tmp_path / "a", "b:"))
                 and any("@" in n for n in games_against(tmp_path / "b", "a:")), timeout=60, interval=0.5,
                 what="games against the other run's policy and snapshots")
        assert "a:main_0" in games_against(tmp_path / "b", "a:") and "b:main_exploiter_0" in games_against(
            tmp_path / "a", "b:")
        time.sleep(5)  # a checkpoint of a's learner to restart from
        learner = next(info for name, info in client.sync(client.scheduler.daskrl_components)["components"].items()
                       if name.endswith("/learner") and info["address"] in runs["a"]["workers"])
        before = games_against(tmp_path / "b", "a:")
        pid = learner["pid"]

        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: "recovered learner " in procs.log("a"), timeout=90,
                 interval=0.5, what="the main agent's run recovering its learner")
        # a's restarted learner publishes new blocks: b's games go on, against snapshots taken after the restart too
        wait_for(lambda: snapshot_versions(games_against(tmp_path / "b", "a:")) - snapshot_versions(before)
                 and max(snapshot_versions(games_against(tmp_path / "b", "a:"))) > max(snapshot_versions(before)),
                 timeout=60, interval=0.5, what="b playing a's snapshots taken after the restart")
        after = games_against(tmp_path / "b", "a:")
        assert after["a:main_0"] > before["a:main_0"] + 100, (before, after)
        for member in (a, b):  # Ctrl-C: each stops in order
            member.send_signal(signal.SIGINT)
        assert a.wait(120) == 0, procs.log("a")
        assert b.wait(120) == 0, procs.log("b")
        assert "league: run 'b' joined" in procs.log("a") and "league: run 'a' joined" in procs.log("b")
        assert not list_runs(client)["runs"]
