"""A league on a real run of tic-tac-toe (PettingZoo classic): every pair of members plays, each role meets the
players PFSP gives it, the payoff table, the ratings and the heat map are written, and a resume goes on with the
table it had."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from daskrl import Observer, train
from daskrl.config import ConfigError
from daskrl.monitor.dashboard import summary_html
from daskrl.monitor.figures.report import write_report
from daskrl.monitor.history import MetricsStore
from daskrl.protocol import LEAGUE_TOPIC, METRICS_TOPIC

from ..helpers import Killer, recovery_of, run_config, slow

pytest.importorskip("pettingzoo", reason="the league plays PettingZoo's tic-tac-toe: pip install 'daskrl[multiagent]'")
pytestmark = slow("league runs of 15 s on a cluster of their own")

TICTACTOE = {"env": "pettingzoo.classic.tictactoe.tictactoe:env", "num_workers": 2, "num_envs_per_worker": 32,
             "report_interval": 1.0, "train_for_env_steps": 0}
TICTACTOE_LEAGUE = {**TICTACTOE, "league": True, "self_play_snapshots": 2, "self_play_snapshot_every": 10}
MEMBERS = ["main_0", "main_exploiter_0", "league_exploiter_0"]


class KeepLogged(Observer):
    """Keeps what the run logged on the scheduler for the dashboard."""

    def on_stop(self, run) -> None:
        self.metrics = [msg for _, msg in run.client.get_events(METRICS_TOPIC)]
        self.league = [msg for _, msg in run.client.get_events(LEAGUE_TOPIC)]


def games(experiment_dir: Path) -> dict[tuple[str, str], int]:
    return {(r["player"], r["opponent"]): int(r["games"]) for r in csv.DictReader(open(experiment_dir / "payoff.csv"))}


def test_a_league_fills_its_payoff_table_by_role_its_exploiters_start_afresh_and_a_resume_goes_on(tmp_path):
    logged = KeepLogged()
    # any win rate adds a snapshot after a full window of games: the main exploiter starts afresh at each one
    reset_often = {"league_snapshot_win_rate": 0.01}
    summary = train(run_config(tmp_path, "ttt", base=TICTACTOE_LEAGUE, train_for_seconds=15, **reset_often),
                    observers=[logged])
    experiment = Path(summary["experiment_dir"])
    played = games(experiment)
    resets = [dict(kv.split("=") for kv in r["detail"].split()) for r in csv.DictReader(open(experiment / "events.csv"))
              if r["event"] == "league_reset"]
    assert resets and {r["member"] for r in resets} <= {"main_exploiter_0", "league_exploiter_0"}, resets
    assert "main_exploiter_0" in {r["member"] for r in resets}
    # what the exploiter was before it started afresh stays in the league, as the snapshot the reset named
    assert any(played.get(("main_0", r["snapshot"]), 0) + played.get(("league_exploiter_0", r["snapshot"]), 0)
               for r in resets if r["member"] == "main_exploiter_0"), (resets, sorted(played))
    for a in MEMBERS:  # the members' share: every pair of members met, both ways counted
        for b in MEMBERS:
            assert a == b or played.get((a, b), 0) >= 100, (a, b, played.get((a, b)))
    assert not any(a == b for a, b in played)  # a member against itself is no game of the table
    # the main exploiter meets the main agent (now and its snapshots) and the other members, nothing else
    exploited = {b for a, b in played if a == "main_exploiter_0"}
    assert exploited - {"main_0", "league_exploiter_0"} and all(b.startswith("main_0@") for b in exploited
                                                                 - {"main_0", "league_exploiter_0"}), exploited
    # the league exploiter plays frozen players (and the members, by their share)
    assert any(b.startswith(("main_0@", "main_exploiter_0@")) for a, b in played if a == "league_exploiter_0")
    snapshots = {b for a, b in played if "@" in b}
    assert any(not b.endswith("@1") for b in snapshots), snapshots  # snapshots taken while training are players
    ratings = {r["player"]: float(r["elo"]) for r in csv.DictReader(open(experiment / "league.csv"))}
    assert set(MEMBERS) <= set(ratings) and len(set(ratings.values())) > 1, ratings
    assert set(summary["league"]) == set(MEMBERS)
    store = MetricsStore()  # the dashboard: the summary line and the heat map's table
    for msg in logged.metrics:
        store.add(msg)
    for msg in logged.league:
        store.add_league(msg)
    assert "league of" in summary_html(store.get("ttt")) and "best Elo" in summary_html(store.get("ttt"))
    assert set(MEMBERS) <= set(store.get("ttt").league["players"])
    assert "League payoff" in open(write_report(str(experiment))).read()

    again = train(run_config(tmp_path, "ttt", base=TICTACTOE_LEAGUE, train_for_seconds=5, resume=True,
                             **reset_often))
    resumed = games(Path(again["experiment_dir"]))
    assert all(resumed.get(pair, 0) >= n for pair, n in played.items() if n)  # counts go on from the table kept
    assert sum(resumed.values()) > sum(played.values())


def test_a_member_whose_learner_is_killed_is_recovered_and_the_league_goes_on(tmp_path):
    """SIGKILL of the main exploiter's learner: it restarts from its checkpoint, its snapshot blocks are new and every
    rollout worker reads them, and the league keeps playing it (its games in league.csv grow after the kill)."""
    config = run_config(tmp_path, "kill", base=TICTACTOE_LEAGUE, train_for_seconds=30, checkpoint_interval=1.0)
    checkpoints = Path(config.experiment_dir) / "checkpoints" / "policy_1"
    killer = Killer("learner_p1", ready=lambda row: row["env_steps"] >= 20_000 and any(checkpoints.glob("*.pt")))
    summary = train(config, on_report=killer)
    killer.check()
    assert [r["component"] for r in summary["recoveries"]] == ["learner_p1"]
    assert recovery_of(summary, "learner_p1")["role"] == "learner"
    assert summary["stop_reason"].startswith("trained for"), summary["stop_reason"]
    rows = list(csv.DictReader(open(Path(config.experiment_dir) / "league.csv")))
    killed_at = float(killer.rows[killer.rows_before_kill - 1]["time_s"])
    games = [(float(r["time_s"]), int(r["games"])) for r in rows if r["player"] == "main_exploiter_0"]
    before = max(g for t, g in games if t <= killed_at)
    assert games[-1][1] > before + 500, (before, games[-3:])
    snapshots_after = {r["player"] for r in rows if r["member"] == "main_exploiter_0" and "@" in r["player"]
                       and float(r["time_s"]) > killed_at + 5}
    assert snapshots_after, "the restarted member's snapshots are players again"


def test_a_league_on_a_single_agent_env_is_refused_before_anything_starts(tmp_path):
    with pytest.raises(ConfigError, match="--league needs a two-player game"):
        train(run_config(tmp_path, "one", env="CartPole-v1", league=True))
    assert not (tmp_path / "one").exists()


def test_a_fresh_policy_trains_against_a_frozen_opponent_that_never_changes(tmp_path):
    main = train(run_config(tmp_path, "main", base=TICTACTOE, self_play_snapshots=1, num_workers=1,
                            train_for_seconds=4))
    frozen = str(Path(main["experiment_dir"]) / "checkpoints")
    summary = train(run_config(tmp_path, "exploiter", base=TICTACTOE, num_workers=1,
                               frozen_opponent=frozen, train_for_seconds=6))
    rows = list(csv.DictReader(open(Path(summary["experiment_dir"]) / "selfplay.csv")))
    assert rows and {(r["opponent"], r["opponent_version"]) for r in rows} == {("snapshot_0", "1")}, rows
    assert sum(int(r["games"]) for r in rows) > 1000
    with pytest.raises(ConfigError, match="--frozen-opponent's network differs from this run's"):
        train(run_config(tmp_path, "other_net", base=TICTACTOE, num_workers=1,
                         frozen_opponent=frozen, hidden_sizes=[32], train_for_seconds=3))
    with pytest.raises(ConfigError, match="--frozen-opponent '/nowhere' is neither a checkpoint file"):
        train(run_config(tmp_path, "none", base=TICTACTOE, frozen_opponent="/nowhere"))
