"""A league's parts without a cluster: its members and players, the payoff table and Elo ratings, the PFSP opponent
weights by role, the rollout workers' draw, and the options it refuses in one line."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from daskrl.config import Config, ConfigError
from daskrl.league.members import Member, PeerSeats, Player, Players, Role, league_members
from daskrl.league.payoff import ELO_START, Payoff, outcome_of
from daskrl.league.pfsp import MEMBERS_SHARE, opponent_weights
from daskrl.league.resets import starts_afresh
from daskrl.monitor.figures.league_plots import payoff_cells
from daskrl.monitor.figures.league_tables import read_runs_table
from daskrl.monitor.figures.report import league_figures
from daskrl.monitor.history import MetricsStore
from daskrl.sampling.policies.policy_map import PolicyMap, check_mapping, opponent_slots, peer_slots, snapshot_owners


def league_config(**options) -> Config:
    return Config.from_flat({"env": "pettingzoo.classic.tictactoe.tictactoe:env", "league": True, **options}).validate()


def test_a_league_is_one_main_agent_beside_its_exploiters_with_four_snapshots_each_unless_told_otherwise():
    p = league_config().policies
    assert (p.num_policies, p.self_play_snapshots) == (3, 4)
    assert [(m.policy, m.role, m.name) for m in league_members(p)] == [
        (0, Role.MAIN, "main_0"), (1, Role.MAIN_EXPLOITER, "main_exploiter_0"),
        (2, Role.LEAGUE_EXPLOITER, "league_exploiter_0")]
    assert snapshot_owners(p) == (0,) * 4 + (1,) * 4 + (2,) * 4
    bigger = league_config(num_policies=5, league_league_exploiters=2, self_play_snapshots=2).policies
    assert [m.name for m in league_members(bigger)] == ["main_0", "main_1", "main_exploiter_0", "league_exploiter_0",
                                                        "league_exploiter_1"]
    assert snapshot_owners(bigger) == (0, 0, 1, 1, 2, 2, 3, 3, 4, 4)
    plain = Config.from_flat({"env": "x", "self_play_snapshots": 3, "num_policies": 2}).validate().policies
    assert snapshot_owners(plain) == (0, 0, 0)  # self-play without a league: policy 0's, as before


@pytest.mark.parametrize("options, problem", [
    ({"num_policies": 2}, "needs a main agent too: --num-policies 3 or more (got 2)"),
    ({"self_play_snapshots": 0}, "--league keeps frozen past versions of its members as players"),
    ({"policy_mapping": "round_robin"}, "--league draws every game's opponent itself: leave out --policy-mapping"),
    ({"pbt": True}, "--league and --pbt are two ways of running a population"),
    ({"inference": "remote"}, "--league: snapshots act inline in the rollout workers"),
    ({"algo": "dqn"}, "trains one policy: leave out --num-policies, --self-play-snapshots, --pbt and --league"),
    ({"league_peers": ["b"], "num_policies": 3}, "trains one policy, in --league-role: leave out --num-policies"),
    ({"league_peers": ["a"], "experiment": "a"}, "'a' is this run's own name"),
    ({"league_peers": ["b", "b"], "experiment": "a"}, "--league-peers names a run twice"),
    ({"league_role": "main_exploiter"}, "name the other members' runs too"),
    ({"league": False, "league_peers": ["b"]}, "--league-peers make(s) this run a member of a league of runs: add --league"),
    ({"num_learners": 2, "league_peers": ["b"], "league_role": "league_exploiter"},
     "--league's exploiter resets start an exploiter's weights afresh in one learner"),
])
def test_what_a_league_cannot_be_is_one_line(options, problem):
    with pytest.raises(ConfigError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        league_config(**options)


def test_exploiter_resets_need_one_learner_per_member_or_are_turned_off():
    member = {"num_learners": 2, "league_peers": ["b"], "experiment": "a"}
    league_config(**member, league_role="main_exploiter", league_exploiter_resets=False)
    league_config(**member)  # a main agent never starts afresh
    assert league_config().policies.league_exploiter_resets  # AlphaStar's league resets its exploiters


def test_a_league_needs_a_game_of_two_players():
    with pytest.raises(ConfigError, match="--league needs a two-player game .* this one has 1 agent"):
        check_mapping("league", 3, ["agent_0"], 12)
    with pytest.raises(ConfigError, match="this one has 3 agent"):
        check_mapping("league", 3, ["a", "b", "c"], 12)
    check_mapping("league", 3, ["player_1", "player_2"], 12)


def test_players_are_members_now_and_the_versions_their_snapshot_blocks_hold():
    p = league_config(self_play_snapshots=2).policies
    players = Players(league_members(p), p)
    assert players.acting == 3 + 6
    roster = players.roster([[50, 1], [], [57, 20]])  # policy 1's learner has not reported: its initial weights
    assert [r.name for r in roster] == [
        "main_0", "main_exploiter_0", "league_exploiter_0", "main_0@50", "main_0@1", "main_exploiter_0@1",
        "main_exploiter_0@1", "league_exploiter_0@57", "league_exploiter_0@20"]
    assert [r.frozen for r in roster] == [False] * 3 + [True] * 6
    assert roster[7] == Player("league_exploiter_0@57", "league_exploiter_0", Role.LEAGUE_EXPLOITER, True)
    assert players.member_of(7).name == "league_exploiter_0" and players.player(1, 999).name == "main_exploiter_0"


def test_the_payoff_table_counts_both_sides_and_elo_follows_the_wins():
    table = Payoff(window=10)
    snapshot_of = {"main_0@5": "main_0"}
    for outcome in (1.0, 1.0, 0.5, 0.0, 1.0):
        table.add("main_0", "main_0@5", outcome, snapshot_of)
    assert table.counts["main_0", "main_0@5"] == [3, 1, 1] and table.counts["main_0@5", "main_0"] == [1, 1, 3]
    assert table.win_rate("main_0", "main_0@5") == pytest.approx((3.5 + 0.5) / 6)  # the even prior: one game
    assert table.win_rate("main_0", "never_met") == 0.5
    assert table.rating("main_0") > ELO_START > table.rating("main_0@5")
    assert table.rating("main_0") + table.rating("main_0@5") == pytest.approx(2 * ELO_START)  # Elo is zero-sum
    table.add("main_0@9", "main_0", 0.5, {"main_0@9": "main_0"})  # a new snapshot starts where its member stood
    assert table.rating("main_0@9") == pytest.approx(table.rating("main_0"), abs=1.0)
    assert [outcome_of(r) for r in (1.0, 0.0, -1.0)] == [1.0, 0.5, 0.0]
    again = Payoff.from_state(table.state(), window=10)
    assert again.rows() == table.rows() and again.win_rate("main_0", "main_0@5") == table.win_rate("main_0", "main_0@5")
    row = next(r for r in table.rows() if r["player"] == "main_0" and r["opponent"] == "main_0@5")
    assert (row["games"], row["wins"], row["win_rate"]) == (5, 3, 0.7)


def test_pfsp_weights_by_role():
    p = league_config(self_play_snapshots=1).policies
    members = league_members(p)
    roster = Players(members, p).roster([[10], [10], [10]])
    table = Payoff()
    for _ in range(50):
        table.add("main_0", "main_0@10", 1.0, {})  # main_0 beats its old self every time
        table.add("main_0", "league_exploiter_0@10", 0.0, {})  # and loses to the league exploiter's snapshot
    rows = np.array(opponent_weights(members, roster, table, "hard", self_play=0.35))
    assert rows.shape == (3, 6) and np.allclose(rows.sum(axis=1), 1.0)
    main, main_exploiter, league_exploiter = rows
    assert main[5] > 10 * main[3]  # hard: the opponent it loses to, far more than the one it always beats
    assert main[0] >= 0.35 * (1 - MEMBERS_SHARE)  # its self-play share against the current main agent
    assert main_exploiter[4] == main_exploiter[5] == 0.0  # only the main agents and their snapshots,
    assert main_exploiter[2] == pytest.approx(MEMBERS_SHARE / 2)  # beside the members' share
    assert main_exploiter[[0, 3]].sum() == pytest.approx(1 - MEMBERS_SHARE / 2)
    assert league_exploiter[[0, 1]] == pytest.approx([MEMBERS_SHARE / 2] * 2)  # frozen players, beside the share
    assert league_exploiter[3:].sum() == pytest.approx(1 - MEMBERS_SHARE)
    even = np.array(opponent_weights(members, roster, table, "uniform", self_play=0.0))[0]
    assert even[3] == pytest.approx(even[5])  # uniform: fictitious self-play, whatever the results


def test_a_split_seats_each_member_against_opponents_drawn_by_its_weights():
    envs = 8
    pmap = PolicyMap("league", 3, ["player_1", "player_2"] * envs, list(range(envs)), envs, snapshots=3)
    first = pmap.column_policy.copy()
    assert all(first[2 * e] != first[2 * e + 1] for e in range(envs))  # nobody plays itself without being told
    weights = [[0, 0, 0, 0, 1, 0], [1, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 1]]
    pmap.draw_opponents_by(weights)
    seen = []
    for _ in range(20):
        pmap.episodes_began(range(envs))
        seats = pmap.column_policy.reshape(envs, 2)
        for e, (a, b) in enumerate(seats):
            member = e % 3
            learner, other = (a, b) if a == member else (b, a)
            assert learner == member and other == [4, 0, 5][member], (e, a, b)
            seen.append(a == member)
    assert 0.3 < np.mean(seen) < 0.7  # the member's seat alternates between episodes


def test_the_heat_map_cells_and_the_dashboard_store_keep_the_current_players_only():
    table = Payoff()
    table.add("main_0", "main_0@5", 1.0, {})
    table.add("main_0", "gone@1", 1.0, {})
    cells = payoff_cells(table.rows(), ["main_0", "main_0@5"])
    assert sorted(zip(cells["player"], cells["opponent"], cells["win_rate"], strict=True)) == [
        ("main_0", "main_0@5", 1.0), ("main_0@5", "main_0", 0.0)]
    store = MetricsStore()
    assert not store.add_league({"run": "r", "payoff": []})  # a run not seen yet
    store.add({"run": "r", "row": {"time_s": 1.0}})
    assert store.add_league({"run": "r", "players": ["main_0"], "payoff": [], "elo": {"main_0": 1010.0}})
    assert store.get("r").league["elo"] == {"main_0": 1010.0}


def test_the_dashboard_page_shows_a_leagues_heat_map_and_rebuilds_it_when_its_players_change():
    from daskrl.monitor.dashboard.page import RunPage

    store = MetricsStore()
    store.add({"run": "r", "env": "ttt", "row": {"time_s": 1.0, "env_steps": 100}, "policies": []})
    page = RunPage(store)
    assert not page.payoff_box.visible  # no league: no heat map
    table = Payoff()
    table.add("main_0", "main_0@5", 1.0, {})
    store.add_league({"run": "r", "env_steps": 100, "players": ("main_0", "main_0@5"),  # msgpack's tuples
                      "payoff": tuple(table.rows()), "elo": {"main_0": 1008.0, "main_0@5": 992.0}})
    page.update()
    heat_map = page.payoff_box.children[0]
    assert page.payoff_box.visible and list(heat_map.x_range.factors) == ["main_0", "main_0@5"]
    assert sorted(page.payoff_source.data["win_rate"]) == [0.0, 1.0]
    table.add("main_0", "main_0@9", 0.0, {})
    store.add_league({"run": "r", "env_steps": 200, "players": ["main_0", "main_0@5", "main_0@9"],
                      "payoff": table.rows(), "elo": {"main_0": 1000.0}})
    page.update()
    assert list(page.payoff_box.children[0].x_range.factors) == ["main_0", "main_0@5", "main_0@9"]
    assert len(page.payoff_source.data["player"]) == 4


def test_a_member_run_of_a_league_of_runs_is_one_member_and_seats_each_peer_now_and_its_snapshots():
    p = league_config(league_peers=["b", "c"], league_role="main_exploiter", self_play_snapshots=2,
                      experiment="a").policies
    assert p.num_policies == 1 and [(m.policy, m.name) for m in league_members(p)] == [(0, "main_exploiter_0")]
    assert snapshot_owners(p) == (0, 0) and peer_slots(p) == 2 * 3 and opponent_slots(p) == 2 + 6
    players = Players(league_members(p), p)
    assert players.acting == 1 + 2 + 6
    assert players.roster([[7, 9]])[3:] == [None] * 6  # no peer seen yet: empty slots, never drawn
    players.seats["b"] = PeerSeats("main_0", Role.MAIN, ({"b": 0}, {"b": 1}, None, {"b": 3}), (40, 0, 60))
    roster = players.roster([[7, 9]])
    assert [r.name if r else None for r in roster] == [
        "main_exploiter_0", "main_exploiter_0@7", "main_exploiter_0@9", "b:main_0", "b:main_0@40", None,
        None, None, None]  # b's second snapshot block is empty; c is not on the cluster
    assert roster[4] == Player("b:main_0@40", "b:main_0", Role.MAIN, True)
    assert players.player(4, 55).name == "b:main_0@55"  # a game names the version the opponent acted with
    weights = np.array(opponent_weights(league_members(p), roster, Payoff(), "hard", 0.35))[0]
    assert weights[5:].sum() == 0.0  # empty slots get no games
    # a main exploiter meets the main agents (the peer's, now and frozen) beside the members' share
    assert weights[[3, 4]].sum() == pytest.approx(1.0) and weights[3] >= MEMBERS_SHARE


def test_the_draw_follows_the_weights_in_proportion_and_only_a_league_draws():
    envs = 64
    pmap = PolicyMap("league", 1, ["player_1", "player_2"] * envs, list(range(envs)), envs, snapshots=3,
                     opponent_weights=[[0, 1, 3, 0]])
    drawn = []
    for _ in range(50):
        pmap.episodes_began(range(envs))
        drawn += [int(max(a, b)) for a, b in pmap.column_policy.reshape(envs, 2)]
    counts = np.bincount(drawn, minlength=4)
    assert counts[3] == 0 and counts[0] == 0 and 2.5 < counts[2] / counts[1] < 3.5, counts
    with pytest.raises(TypeError, match="the 'self_play' policy mapping draws no opponents"):
        PolicyMap("self_play", 1, ["p1", "p2"], [0], 1, snapshots=2).draw_opponents_by([[0, 1, 1]])


def test_recent_games_of_players_no_longer_in_the_league_are_forgotten_and_their_counts_kept():
    table = Payoff()
    table.add("main_0", "main_0@5", 1.0, {})
    table.add("main_0", "main_0@9", 0.0, {})
    table.forget_recent({"main_0", "main_0@9"})
    assert set(table.recent) == {("main_0", "main_0@9"), ("main_0@9", "main_0")}
    assert table.win_rate("main_0", "main_0@5") == 0.5  # as if never met: the draw no longer weighs it
    rows = {(r["player"], r["opponent"]): r for r in table.rows()}
    assert rows["main_0", "main_0@5"]["games"] == 1 and rows["main_0", "main_0@5"]["recent_win_rate"] == ""
    assert rows["main_0", "main_0@9"]["recent_win_rate"] == 0.0
    assert Payoff.from_state(table.state()).rows() == table.rows()


def test_a_member_started_afresh_leaves_its_rating_to_its_snapshot_and_its_recent_games_behind():
    table = Payoff()
    for _ in range(30):
        table.add("main_exploiter_0", "main_0", 1.0, {})
    table.add("main_0", "league_exploiter_0", 0.0, {})
    strong = table.rating("main_exploiter_0")
    assert strong > ELO_START + 100
    table.start_afresh("main_exploiter_0", "main_exploiter_0@40")
    assert table.rating("main_exploiter_0@40") == strong and table.rating("main_exploiter_0") == ELO_START
    assert table.win_rate("main_0", "main_exploiter_0") == 0.5  # the member it is now was never met
    assert set(table.recent) == {("main_0", "league_exploiter_0"), ("league_exploiter_0", "main_0")}
    assert table.games("main_exploiter_0", "main_0") == 30  # payoff.csv keeps every game it played


def member_experiment(folder, peers: list[str], payoff: list[tuple[str, str, int, int, int]], players: list[str]):
    """A member run's experiment as it leaves it: its config, payoff.csv (player, opponent, wins, draws, losses) and
    the players of its last report in league.csv."""
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"policies": {"league_peers": peers}}))
    with open(folder / "payoff.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["player", "opponent", "games", "wins", "draws", "losses"])
        writer.writerows([a, b, w + d + lost, w, d, lost] for a, b, w, d, lost in payoff)
    with open(folder / "league.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["env_steps", "player"])
        writer.writerows([5, p] for p in players)


def test_a_league_of_runs_has_one_table_joined_from_its_runs_each_game_once(tmp_path):
    member_experiment(tmp_path / "a", ["b", "c"], [("main_0", "b:main_exploiter_0", 6, 1, 3),
                                                    ("b:main_exploiter_0", "main_0", 3, 1, 6),
                                                    ("main_0", "main_0@40", 2, 0, 0), ("main_0@40", "main_0", 0, 0, 2)],
                      ["main_0", "main_0@40", "b:main_exploiter_0"])
    member_experiment(tmp_path / "b", ["a", "c"], [("main_exploiter_0", "a:main_0", 5, 0, 5),
                                                    ("a:main_0", "main_exploiter_0", 5, 0, 5)],
                      ["main_exploiter_0", "a:main_0"])
    league = read_runs_table(str(tmp_path / "a"))
    rows = {(r["player"], r["opponent"]): r for r in league.rows}
    games = rows["a:main_0", "b:main_exploiter_0"]  # 10 games on a's workers, 10 on b's
    assert (games["games"], games["wins"], games["draws"], games["losses"]) == (20, 11, 1, 8)
    assert games["win_rate"] == pytest.approx((11 + 0.5) / 20)
    assert rows["b:main_exploiter_0", "a:main_0"]["wins"] == 8 and rows["a:main_0", "a:main_0@40"]["games"] == 2
    assert league.players == ["a:main_0", "a:main_0@40", "b:main_exploiter_0"]  # every run's, each once
    assert (league.runs, league.missing) == (["a", "b"], ["c"])
    figures = league_figures(str(tmp_path / "a"))  # the report draws the joined table and names the run not found
    assert "no payoff table of c beside this experiment" in figures[-1].text
    assert (tmp_path / "a" / "league_payoff.csv").read_text().count("\n") == len(league.rows) + 1
    assert read_runs_table(str(tmp_path / "nowhere")) is None  # no member of a league of runs


def league_report(run: str, peers: list[str], payoff: list[tuple], players: list[str], env_steps: int) -> dict:
    """A member run's ``daskrl-league`` report: its table's rows as (player, opponent, wins, draws, losses)."""
    rows = [{"player": a, "opponent": b, "games": w + d + lost, "wins": w, "draws": d, "losses": lost,
             "win_rate": (w + 0.5 * d) / (w + d + lost)} for a, b, w, d, lost in payoff]
    return {"run": run, "env_steps": env_steps, "players": players, "payoff": rows, "elo": {}, "peers": peers}


def test_the_dashboard_joins_a_league_of_runs_from_each_members_newest_report_and_names_the_silent_ones():
    from daskrl.monitor.dashboard.league_view import league_payload
    from daskrl.monitor.dashboard.page import RunPage

    store = MetricsStore()
    for run in ("a", "b"):
        store.add({"run": run, "env": "ttt", "row": {"time_s": 1.0, "env_steps": 100}, "policies": []})
    store.add_league(league_report("a", ["b", "c"], [("main_0", "b:main_exploiter_0", 6, 1, 3),
                                                     ("b:main_exploiter_0", "main_0", 3, 1, 6)],
                                   ["main_0", "b:main_exploiter_0"], 100))
    page = RunPage(store)
    page.chooser.value = "a"
    page.update()  # b not heard from yet: a's own games, under the league's names
    assert page.payoff_box.visible and "b, c not heard from yet" in page.payoff_box.children[0].title.text
    assert sorted(page.payoff_source.data["games"]) == [10, 10]
    store.add_league(league_report("b", ["a", "c"], [("main_exploiter_0", "a:main_0", 5, 0, 5),
                                                     ("a:main_0", "main_exploiter_0", 5, 0, 5)],
                                   ["main_exploiter_0", "a:main_0"], 100))
    page.update()  # b's games join a's: 20 between the two, each counted once
    heat_map = page.payoff_box.children[0]
    assert list(heat_map.x_range.factors) == ["a:main_0", "b:main_exploiter_0"]
    title = heat_map.title.text
    assert title.startswith("League payoff of the runs a, b, joined") and "c not heard" in title
    data = page.payoff_source.data
    cells = dict(zip(zip(data["player"], data["opponent"], strict=True), data["games"], strict=True))
    assert cells == {("a:main_0", "b:main_exploiter_0"): 20, ("b:main_exploiter_0", "a:main_0"): 20}
    served = league_payload(store, "b")  # either member's view is the same table
    assert (served["joined"], served["missing"], served["runs"]) == (["b", "a"], ["c"], ["a", "b"])
    assert {(r["player"], r["opponent"]): r["wins"] for r in served["payoff"]} == {
        ("a:main_0", "b:main_exploiter_0"): 11, ("b:main_exploiter_0", "a:main_0"): 8}
    assert league_payload(store, "nobody")["players"] == []


def test_a_main_exploiter_starts_afresh_only_once_it_beats_every_current_main_agent():
    exploiter = Member(1, Role.MAIN_EXPLOITER, "main_exploiter_0")
    roster = [Player("main_0", "main_0", Role.MAIN, False), Player("main_1", "main_1", Role.MAIN, False),
              Player("main_0@5", "main_0", Role.MAIN, True), None]
    table = Payoff()
    for opponent, outcome in (("main_0", 1.0), ("main_0@5", 1.0), ("main_1", 0.0)):
        for _ in range(60):
            table.add("main_exploiter_0", opponent, outcome, {})
    rng = np.random.default_rng(0)
    assert not starts_afresh(exploiter, roster, table, 0.7, rng)  # main_1 still beats it
    for _ in range(200):
        table.add("main_exploiter_0", "main_1", 1.0, {})
    assert starts_afresh(exploiter, roster, table, 0.7, rng)
    assert not starts_afresh(exploiter, [p for p in roster if p is None or p.frozen], table, 0.7, rng)  # none seen
    assert not starts_afresh(Member(0, Role.MAIN, "main_0"), roster, table, 0.0, rng)  # main agents never
    league_exploiter = Member(2, Role.LEAGUE_EXPLOITER, "league_exploiter_0")
    share = np.mean([starts_afresh(league_exploiter, roster, table, 0.7, rng) for _ in range(2000)])
    assert 0.22 < share < 0.28  # AlphaStar's 0.25
