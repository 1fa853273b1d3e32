"""A league whose members are separate ``daskrl train`` runs on one ``dask scheduler`` with 4 ``dask worker``
processes: a main agent and a main exploiter, each on workers of its own, each playing the other's current policy
and snapshots (read from the other run's parameter blocks); SIGKILL of the main agent's learner worker: the main
agent's run recovers it, and the exploiter's run follows its new blocks and plays on against it. Then the same
league over two hosts (network namespaces), where each run reads the other's snapshots over Dask comms."""

from __future__ import annotations

import csv
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

from daskrl.monitor.dashboard import dashboard_page
from daskrl.monitor.figures.report import write_report
from daskrl.runtime.access.runs import list_runs

from ..browser import CHROMIUM, Browser
from ..helpers import get_json, scopes_by_worker, slow, start_cli_cluster, start_two_hosts, training, wait_for

pytest.importorskip("pettingzoo", reason="the league plays PettingZoo's tic-tac-toe: pip install 'daskrl[multiagent]'")
pytestmark = slow("two league member runs from the command line on four dask workers")


def member_command(address: str, train_dir: Path, name: str, peer: str, role: str) -> list[str]:
    return [sys.executable, "-m", "daskrl", "train", "--env", "pettingzoo.classic.tictactoe.tictactoe:env",
            "--scheduler", address, "--experiment", name, "--train-dir", str(train_dir), "--league",
            "--league-peers", peer, "--league-role", role, "--num-workers", "1", "--num-envs-per-worker", "32",
            "--self-play-snapshots", "2", "--self-play-snapshot-every", "10", "--train-for-env-steps", "0",
            "--train-for-seconds", "300", "--report-interval", "1", "--checkpoint-interval", "2"]


def games_against(experiment: Path, prefix: str) -> dict[str, int]:
    """Games of this run's member by opponent, for the opponents whose names start with ``prefix``."""
    path = experiment / "payoff.csv"
    if not path.exists():
        return {}
    rows = list(csv.DictReader(open(path)))
    return {r["opponent"]: int(r["games"]) for r in rows if r["opponent"].startswith(prefix) and ":" not in r["player"]}


def own_snapshots(experiment: Path, member: str) -> set[int]:
    """The versions of ``member``'s snapshots as its own run knew them (its players in league.csv, its opponents in
    payoff.csv)."""
    names = {r["player"] for r in csv.DictReader(open(experiment / "league.csv"))} | {
        r["opponent"] for r in csv.DictReader(open(experiment / "payoff.csv"))}
    return snapshot_versions({n: 0 for n in names if n.startswith(f"{member}@")})


def plays_current_and_snapshots(experiment: Path, opponent: str) -> bool:
    """Whether this run's member met ``opponent`` (another run's member) both as its current policy and as one of
    its snapshots."""
    games = games_against(experiment, opponent)
    return opponent in games and any(name.startswith(f"{opponent}@") for name in games)


def snapshot_versions(games: dict[str, int]) -> set[int]:
    return {int(name.rpartition("@")[2]) for name in games if "@" in name}


def table(path: Path) -> dict[tuple[str, str], int]:
    """A payoff table's games by (player, opponent)."""
    return {(r["player"], r["opponent"]): int(r["games"]) for r in csv.DictReader(open(path))}


#: in the page: the heat map's title and the cells its source holds (named by daskrl.monitor.dashboard.RunPage)
PAYOFF_PROBE = """(() => {
  const doc = ((window.Bokeh && window.Bokeh.documents) || [])[0];
  const cells = doc ? doc.get_model_by_name('daskrl-payoff-cells') : null;
  const fig = doc ? doc.get_model_by_name('daskrl-payoff') : null;
  return {title: fig && fig.title ? fig.title.text : '', cells: cells ? cells.data.player.length : -1,
          players: cells ? Array.from(new Set(cells.data.player)) : []};
})()"""


def joined_on_dashboard(page: str, run: str) -> dict | None:
    """``api/league`` of ``run`` once it joins both runs' reports and counts games between their members."""
    league = get_json(f"{page}/api/league?run={run}")
    pairs = {(r["player"], r["opponent"]): r["games"] for r in league["payoff"]}
    joined = league["joined"] == ["a", "b"] and not league["missing"]
    return league if joined and pairs.get(("a:main_0", "b:main_exploiter_0"), 0) > 0 else None


def test_league_members_as_runs_play_each_other_and_one_survives_its_learner_killed(tmp_path):
    with start_cli_cluster(tmp_path, 4) as cluster:
        address, client, procs = cluster["address"], cluster["client"], cluster["procs"]
        a = procs.start("a", *member_command(address, tmp_path, "a", "b", "main"))
        b = procs.start("b", *member_command(address, tmp_path, "b", "a", "main_exploiter"))
        runs = wait_for(lambda: training(client, "a", "b"), timeout=120, what="both runs training")
        assert not set(runs["a"]["workers"]) & set(runs["b"]["workers"])
        assert all(len(scopes) == 1 for scopes in scopes_by_worker(client).values())  # no worker hosts both
        # each plays the other's current policy and snapshots (the two conditions come true in either order: the
        # first games against a run that joined late may all be against its snapshots)
        wait_for(lambda: plays_current_and_snapshots(tmp_path / "a", "b:main_exploiter_0")
                 and plays_current_and_snapshots(tmp_path / "b", "a:main_0"), timeout=90, interval=0.5,
                 what="games against the other run's policy and snapshots")
        # the scheduler's dashboard joins the two runs' tables while they train: a's page shows b's games too
        page = dashboard_page(client)
        joined_live = wait_for(lambda: joined_on_dashboard(page, "a"), timeout=30, interval=0.5,
                               what="the dashboard's league table joined from both runs")
        assert {"a:main_0", "b:main_exploiter_0"} <= set(joined_live["players"]), joined_live["players"]
        if CHROMIUM is not None:  # the page itself (the run whose first report came last) draws the joined heat map
            browser = Browser(tmp_path)
            try:
                shown, _ = browser.inspect(page, lambda p: "joined" in p["title"] and p["cells"] > 0,
                                           probe=PAYOFF_PROBE)
            finally:
                browser.close()
            assert re.match(r"League payoff of the runs (a, b|b, a), joined$", shown["title"]), shown
            assert {"a:main_0", "b:main_exploiter_0"} <= set(shown["players"]), shown
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
        # the whole logs (procs.log keeps the last 3,000 characters)
        logs = {name: (tmp_path / f"{name}.log").read_text() for name in ("a", "b")}
        assert "league: run 'b' joined" in logs["a"] and "league: run 'a' joined" in logs["b"]
        assert not list_runs(client)["runs"]
        # either run's report draws the league's one table: the games on both runs' workers, each once
        write_report(str(tmp_path / "a"))
        joined = table(tmp_path / "a" / "league_payoff.csv")
        on_a, on_b = table(tmp_path / "a" / "payoff.csv"), table(tmp_path / "b" / "payoff.csv")
        assert joined["a:main_0", "b:main_exploiter_0"] == on_a["main_0", "b:main_exploiter_0"] + on_b[
            "a:main_0", "main_exploiter_0"] > 0



def test_members_on_two_hosts_read_each_others_snapshots_over_comms(tmp_path):
    workers = [(0, "w0", []), (0, "w1", []), (1, "w2", []), (1, "w3", [])]
    with start_two_hosts(tmp_path, workers) as cluster:
        address, client, procs, net = cluster["address"], cluster["client"], cluster["procs"], cluster["net"]
        a = procs.start("a", "ip", "netns", "exec", net.ns[0], *member_command(address, tmp_path, "a", "b", "main"))
        b = procs.start("b", "ip", "netns", "exec", net.ns[1],
                        *member_command(address, tmp_path, "b", "a", "main_exploiter"))
        wait_for(lambda: training(client, "a", "b"), timeout=120, what="both runs training")
        wait_for(lambda: len(snapshot_versions(games_against(tmp_path / "b", "a:"))) >= 2
                 and len(snapshot_versions(games_against(tmp_path / "a", "b:"))) >= 2, timeout=90, interval=0.5,
                 what="games against two snapshots of the other run")
        for member in (a, b):
            member.send_signal(signal.SIGINT)
        assert a.wait(120) == 0, procs.log("a")
        assert b.wait(120) == 0, procs.log("b")
        # every snapshot a run met is one its owner took: a snapshot block read over comms holds the snapshot's own
        # versions (all of a learner's blocks once shared one Dask variable, and a reader on another host got the
        # newest policy under every snapshot's name)
        for run, peer, member in (("a", "b", "main_exploiter_0"), ("b", "a", "main_0")):
            met = snapshot_versions(games_against(tmp_path / run, f"{peer}:"))
            assert met <= own_snapshots(tmp_path / peer, member), (run, met, own_snapshots(tmp_path / peer, member))
        comms = [int(m) for m in re.findall(r"parameter versions read \d+ from shared memory, (\d+) over comms",
                                            procs.log("a") + procs.log("b"))]
        assert len(comms) == 2 and min(comms) > 0, comms
